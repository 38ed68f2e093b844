"""Bearer tokens per role, and which role each northbound method needs.

Roles (each includes the ones before it):

* ``read-only``: GetStatus, GetPaths, WatchEvents, ListAudit (the audit trail);
* ``operator``: also RegisterCollective, UnregisterCollective, ApplyPolicy, CheckDrift (it reads
  every switch back: a load on the switches a reader should not be able to cause), CreateInaJob
  and DeleteInaJob (they write the aggregation switch).

The token file has one token per line, ``ROLE TOKEN [NAME]`` (``#`` starts a comment); ``aifabric
certs init`` writes one with a random token per role. A client sends ``authorization: Bearer
TOKEN`` as gRPC metadata. Tokens are kept as SHA-256 digests and compared with
:func:`hmac.compare_digest` (no timing leak of how much of a token matched).

A method not in the table needs no role only if the table says so; by default it is refused
(fail closed): adding an RPC without deciding who may call it refuses everyone.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import logging
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

LOG = logging.getLogger("aifabric.security")


class Role(enum.IntEnum):
    """A caller's role; a larger value includes every smaller one."""

    READ_ONLY = 1
    OPERATOR = 2

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")

    @classmethod
    def parse(cls, text: str) -> Role:
        for r in cls:
            if r.label == text:
                return r
        raise ValueError(f"unknown role {text[:32]!r} (roles: {', '.join(x.label for x in cls)})")


ROLES: tuple[str, ...] = tuple(r.label for r in Role)

_NB = "/aifabric.v1.Northbound/"
#: full gRPC method name → the least role that may call it
NORTHBOUND_METHOD_ROLES: Mapping[str, Role] = {
    _NB + "GetStatus": Role.READ_ONLY,
    _NB + "GetPaths": Role.READ_ONLY,
    _NB + "WatchEvents": Role.READ_ONLY,
    _NB + "ListAudit": Role.READ_ONLY,
    _NB + "RegisterCollective": Role.OPERATOR,
    _NB + "UnregisterCollective": Role.OPERATOR,
    _NB + "ApplyPolicy": Role.OPERATOR,
    _NB + "CheckDrift": Role.OPERATOR,
    _NB + "CreateInaJob": Role.OPERATOR,
    _NB + "DeleteInaJob": Role.OPERATOR,
}


class TokenFileError(ValueError):
    """A token file that can't be used: ``FILE:LINE: message``."""


@dataclass(frozen=True)
class Principal:
    """Who called: the token's role and its name from the token file (or the role's label)."""

    role: Role
    name: str


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class TokenTable:
    """Tokens → principals (see the module docstring)."""

    def __init__(self, tokens: Mapping[str, Principal]):
        self._by_digest = {_digest(t): p for t, p in tokens.items()}

    def __len__(self) -> int:
        return len(self._by_digest)

    def lookup(self, token: str) -> Principal | None:
        """The principal of ``token``, or None. Every stored digest is compared (constant time
        per entry)."""
        d = _digest(token)
        found = None
        for stored, principal in self._by_digest.items():
            if hmac.compare_digest(stored, d):
                found = principal
        return found

    @classmethod
    def load(cls, path: Path) -> TokenTable:
        """Read a token file. Raises TokenFileError (bad line, duplicate token, no token) and
        warns when others may read the file."""
        try:
            st = path.stat()
            text = path.read_text()
        except OSError as exc:
            raise TokenFileError(f"{path}: {exc.strerror}") from None
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            LOG.warning("%s is readable by other users (mode %o): chmod 600 it", path,
                        stat.S_IMODE(st.st_mode))
        tokens: dict[str, Principal] = {}
        for no, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) not in (2, 3):
                raise TokenFileError(f"{path}:{no}: want 'ROLE TOKEN [NAME]'")
            try:
                role = Role.parse(parts[0])
            except ValueError as exc:
                raise TokenFileError(f"{path}:{no}: {exc}") from None
            token = parts[1]
            if len(token) < 16:
                raise TokenFileError(f"{path}:{no}: token shorter than 16 characters")
            if token in tokens:
                raise TokenFileError(f"{path}:{no}: token repeated")
            tokens[token] = Principal(role, parts[2] if len(parts) == 3 else role.label)
        if not tokens:
            raise TokenFileError(f"{path}: no token")
        return cls(tokens)


def format_token_file(tokens: Mapping[str, str]) -> str:
    """The text of a token file from role label → token."""
    lines = ["# aifabric bearer tokens: ROLE TOKEN [NAME]; clients send 'authorization: Bearer TOKEN'"]
    lines += [f"{role} {token}" for role, token in tokens.items()]
    return "\n".join(lines) + "\n"


def token_from_env(var: str = "AIFABRIC_TOKEN") -> str | None:
    """A client's token from the environment (None when unset or empty)."""
    return os.environ.get(var) or None
