"""The policy a variant's controller gets: the experiment's policy YAML (as run: scaled when
``lab.scale`` is set) with one thing changed, comments kept, and a first line saying what."""

from __future__ import annotations

import io
from collections.abc import Collection, Mapping
from typing import Any

#: The QoS sections of a policy (a "no QoS" variant drops them).
QOS_SECTIONS = ("traffic_classes", "pfc", "ecn", "buffers", "shaping")


def policy_variant(text: str, *, mode: str | None = None, keep: Collection[str] | None = None,
                   drop_keys: Collection[str] = (), drop_wan: Collection[str] = (),
                   ecmp: Mapping[str, Any] | None = None,
                   source: str = "the experiment's policy") -> str:
    """``text`` with ``routing.mode`` set to ``mode``, ``routing.ecmp`` replaced by ``ecmp``
    (when given), only the collectives named in ``keep`` (all when None), the top-level keys
    ``drop_keys`` and the ``wan`` keys ``drop_wan`` removed.

    >>> t = "routing: {mode: pinned}\\ncollectives:\\n- {name: a}\\n- {name: b}\\n"
    >>> print(policy_variant(t, mode="ecmp", keep={"b"}, source="p.yaml"))
    # p.yaml, changed by the lab: routing.mode = ecmp; only collectives ['b']
    routing: {mode: ecmp}
    collectives:
    - {name: b}
    <BLANKLINE>
    """
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    data: Any = yaml.load(text)
    what = []
    if mode is not None:
        data["routing"]["mode"] = mode
        what.append(f"routing.mode = {mode}")
    if ecmp is not None:
        data["routing"]["ecmp"] = dict(ecmp)
        what.append("routing.ecmp = {" + ", ".join(f"{k}: {v}" for k, v in ecmp.items()) + "}")
    if keep is not None:
        data["collectives"] = [c for c in data.get("collectives", []) if c["name"] in keep]
        what.append(f"only collectives {sorted(keep)}")
    gone = [k for k in drop_keys if k in data]
    for k in gone:
        data.pop(k)
    if "wan" in data:
        for k in drop_wan:
            if k in data["wan"]:
                data["wan"].pop(k)
                gone.append(f"wan.{k}")
    if gone:
        what.append("without " + ", ".join(gone))
    buf = io.StringIO()
    buf.write(f"# {source}, changed by the lab: {'; '.join(what) or 'nothing'}\n")
    yaml.dump(data, buf)
    return buf.getvalue()
