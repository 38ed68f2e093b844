"""A fake P4Runtime switch client for :class:`controller.drivers.p4runtime.driver.P4RuntimeDriver`
(the P4 twin of :mod:`.fakeswitch`): the switch's entities as values, WriteRequests applied by
the reconciliation oracle (:func:`controller.drivers.p4runtime.reconcile.apply`, which checks
the P4Runtime rules a switch enforces), packets in and out.

A WriteRequest applies update by update (P4Runtime's default ``CONTINUE_ON_ERROR``, spec v1.3
§12.2): an update ``refuse`` names is refused with its own error and the others of the batch
are applied, as BMv2 does; the client then raises
:class:`~controller.drivers.p4runtime.client.WriteError` listing the refused updates.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from controller.drivers.p4runtime.client import FailedUpdate, P4SwitchError, WriteError
from controller.drivers.p4runtime.entities import SwitchEntities
from controller.drivers.p4runtime.reconcile import Reconciliation, Update, apply


class FakeP4Switch:
    """One fake P4Runtime switch (see the module docstring).

    ``state`` holds every entity (ours and others'); ``refuse(update)`` returns an error text for
    an update the switch refuses (None: accepted); ``reachable`` False makes connecting fail.
    """

    def __init__(self, name: str, device_id: int, state: SwitchEntities | None = None) -> None:
        self.name = name
        self.device_id = device_id
        self.state = state or SwitchEntities(name, device_id)
        self.requests = 0
        self.updates = 0
        self.refuse: Callable[[Update], str | None] = lambda u: None
        self.reachable = True
        self.packets_out: list[tuple[int, bytes]] = []
        self.role = "primary"  # what the switch's arbitration says of this client
        self.cells: dict[tuple[str, int], tuple[int, int]] = {}  # counter cells (packets, bytes)
        self.hits: dict[Any, tuple[int, int]] = {}  # pinned entry key -> (packets, bytes)
        self._in: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
        self.connected = False

    # -- the client protocol -----------------------------------------------------------------
    async def __aenter__(self) -> FakeP4Switch:
        if not self.reachable:
            raise P4SwitchError(f"{self.name}: cannot connect (fake switch unreachable)")
        self.connected = True
        self._in = asyncio.Queue()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.connected = False

    async def read_state(self) -> SwitchEntities:
        return self.state

    async def write_phases(self, rec: Reconciliation) -> int:
        n = 0
        for phase in rec.phases:
            self.requests += 1
            n += 1
            ok, failed = [], []
            for u in phase:
                why = self.refuse(u)
                if why is None:
                    ok.append(u)
                else:
                    failed.append(FailedUpdate(u, "INVALID_ARGUMENT", why))
            self.updates += len(ok)
            self.state = apply(self.state, Reconciliation(rec.switch, (tuple(ok),)))
            if failed:
                raise WriteError(self.name, failed, "INVALID_ARGUMENT")
        return n

    async def packet_out(self, port: int, frame: bytes) -> None:
        self.packets_out.append((port, frame))

    async def read_cells(self, cells: Any) -> dict[tuple[str, int], tuple[int, int]]:
        return {(n, i): self.cells.get((n, i), (0, 0)) for n, i in cells if i is not None}

    async def read_direct_counters(self, table: str) -> list[tuple[Any, int, int]]:
        return [(e, *self.hits.get(e.key, (0, 0))) for e in self.state.entries
                if e.table == table]

    async def packets_in(self) -> AsyncIterator[tuple[int, bytes]]:
        while True:
            item = await self._in.get()
            if item is None:
                return
            yield item

    # -- what the switch does on its own --------------------------------------------------------
    def packet_in(self, port: int, frame: bytes) -> None:
        self._in.put_nowait((port, frame))

    def drop(self) -> None:
        """The connection ends (the driver reconnects)."""
        self._in.put_nowait(None)


def factory(switches: dict[str, FakeP4Switch]) -> Callable[..., FakeP4Switch]:
    """A client factory for the driver that hands out ``switches`` by name."""
    def make(name: str, address: str, device_id: int, election_id: int,
             **_: Any) -> FakeP4Switch:
        return switches[name]
    return make
