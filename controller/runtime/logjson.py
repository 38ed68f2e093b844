"""The controller's log: one human line per event (``text``) or one JSON object per line
(``json``, ``log.format`` / ``--log-format json``) for journald, Loki or Elasticsearch.

A JSON line holds ``time`` (ISO 8601, UTC, ms), ``level``, ``logger``, ``event`` (the message),
and ``switch``, ``collective``, ``generation``, ``digest`` when the event concerns one (null
otherwise). A log call passes them with ``extra={"switch": ..., ...}``; where it does not, they
are read from the message as the runtime writes it: the ``[leaf1 dpid=0x3]`` tag names the
switch (when it is a switch of the fabric), ``generation N`` and ``sha256 HEX`` the policy's,
``registered NAME`` / ``collective NAME`` the collective. An exception's traceback goes in
``exc``.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
import sys
from collections.abc import Iterable
from typing import Any

from controller.model.topology import Fabric

FIELDS = ("switch", "collective", "generation", "digest")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_TAG = re.compile(r"^\[([^\]\s]+)[^\]]*\]\s*")
_GENERATION = re.compile(r"\bgeneration (\d+)\b")
_DIGEST = re.compile(r"\bsha256 ([0-9a-f]{12,64})\b")
_COLLECTIVE = re.compile(r"\b(?:un)?registered (?:collective )?([A-Za-z0-9_.:-]+)|\bcollective "
                         r"([A-Za-z0-9_.:-]+)")


class JsonFormatter(logging.Formatter):
    """One JSON object per record (module docstring); ``switches``: the fabric's switch names
    (a message's leading tag counts as a switch only if it is one)."""

    def __init__(self, switches: Iterable[str] = ()) -> None:
        super().__init__()
        self.switches = frozenset(switches)

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        out: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC)
            .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "event": msg,
        }
        found = self._from_message(msg)
        for name in FIELDS:
            given = getattr(record, name, None)
            out[name] = given if given is not None else found.get(name)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)

    def _from_message(self, msg: str) -> dict[str, Any]:
        found: dict[str, Any] = {}
        tag = _TAG.match(msg)
        if tag and tag.group(1) in self.switches:
            found["switch"] = tag.group(1)
        m = _GENERATION.search(msg)
        if m:
            found["generation"] = int(m.group(1))
        m = _DIGEST.search(msg)
        if m:
            found["digest"] = m.group(1)
        m = _COLLECTIVE.search(msg)
        if m:
            found["collective"] = m.group(1) or m.group(2)
        return found


def configure_logging(level: str, fmt: str, fabric: Fabric | None = None) -> None:
    """The root logger's one handler on stderr: ``text`` or ``json`` (module docstring)."""
    root = logging.getLogger()
    if fmt == "json":
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter(s.name for s in (fabric.switches if fabric else ())))
        # replace what a library or an earlier basicConfig installed: one format per stream
        for h in list(root.handlers):
            root.removeHandler(h)
        root.addHandler(handler)
    else:
        logging.basicConfig(level=level.upper(), stream=sys.stderr, format=TEXT_FORMAT)
    root.setLevel(level.upper())
