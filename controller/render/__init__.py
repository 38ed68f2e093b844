"""Per-target renderings of a compiled :class:`~controller.qos.compile.QosPlan`. Pure.

:func:`render` returns ``{file name: JSON text}``, one file per switch, deterministic (sorted
keys, fixed indentation, switches and ports in order), so renderings can be diffed and kept as
golden files. The caller writes them (``aifabric policy render --out DIR``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from controller.qos.compile import QosPlan

TARGET_NAMES = ("openflow", "bmv2", "tofino", "sonic")


def dumps(doc: Any) -> str:
    """The one JSON encoding of every rendering: sorted keys, 2-space indent, final newline."""
    return json.dumps(doc, sort_keys=True, indent=2) + "\n"


def render(plan: QosPlan, target: str) -> dict[str, str]:
    """Render ``plan`` for ``target`` (one of :data:`TARGET_NAMES`): ``{file name: text}``.

    Raises
    ------
    KeyError
        Unknown target.
    ValueError
        The plan has more lossless priorities than the target supports
        (:mod:`controller.qos.targets`); nothing is rendered.
    """
    from controller.qos.targets import TARGETS
    from controller.render import bmv2, openflow, sonic, tofino

    caps = TARGETS[target]
    if len(plan.lossless_priorities) > caps.max_lossless_priorities:
        raise ValueError(f"{len(plan.lossless_priorities)} lossless priorities, but target "
                         f"{target} supports {caps.max_lossless_priorities} ({caps.why})")

    fns: dict[str, Callable[[QosPlan], dict[str, Any]]] = {
        "openflow": openflow.render_openflow,
        "bmv2": bmv2.render_bmv2,
        "tofino": tofino.render_tofino,
        "sonic": sonic.render_sonic,
    }
    docs = fns[target](plan)
    return {name: dumps(doc) for name, doc in sorted(docs.items())}
