"""Fencing enforced by BMv2 itself (issue 14, "done means": a deposed master's write refused by
BMv2 — lower election_id): two controllers get their mastership terms of one switch from an etcd
handover (as in ``tests/test_fencing_ovs.py``) and connect to a real ``simple_switch_grpc`` with
``election_id = token << 64`` (:attr:`controller.cluster.fencing.MastershipTerm.election_id`).

P4Runtime spec §5 (client arbitration): the client with the highest election_id is the primary;
a Write from any other client is refused with PERMISSION_DENIED, and a client that arbitrates with
a lower id than the primary's is a backup. So once the new master has arbitrated, the deposed
master's write is refused by the switch, and its reconnection does not make it primary again.

Skips without BMv2, etcd or root (the compiled fabric program is committed: its absence fails).
"""

from __future__ import annotations

import asyncio
import contextlib

import grpc
import pytest

from controller.drivers.p4runtime.client import NotPrimaryError, P4Switch
from controller.drivers.p4runtime.encode import qos_entries
from controller.drivers.p4runtime.reconcile import Update
from mininet_labs.lab.bmv2 import NetnsSwitch, bmv2_missing_reason
from tests.test_fencing_ovs import _terms_from_a_handover

_why = bmv2_missing_reason()
pytestmark = [pytest.mark.p4, pytest.mark.mininet, pytest.mark.skipif(_why is not None, reason=_why or "")]


def _entry(port: int, threshold: int) -> list[Update]:
    qos = {"tables": [{"table": "ecn_threshold", "match": {"egress_port": port, "priority": 0},
                       "action": "mark_ecn", "params": {"threshold_pkts": threshold}}]}
    return [Update("insert", e) for e in qos_entries("leaf1", qos)]


def test_deposed_master_is_refused_by_bmv2(etcd_cluster, tmp_path):
    old_token, new_token = _terms_from_a_handover(etcd_cluster)
    assert new_token > old_token
    with NetnsSwitch(ports=4, device_id=3, workdir=tmp_path) as bmv2:
        async def go() -> None:
            new = P4Switch("leaf1", bmv2.grpc_address, 3, election_id=new_token << 64)
            async with contextlib.AsyncExitStack() as outer:
                old = P4Switch("leaf1", bmv2.grpc_address, 3, election_id=old_token << 64)
                async with old:
                    await old.write_batch(_entry(1, 5))        # still the master: accepted
                    await outer.enter_async_context(new)
                    await asyncio.sleep(0.2)                 # the arbitration update reaches old
                    # the old client heard it is a backup now: it sends nothing
                    with pytest.raises(NotPrimaryError):
                        await old.write_batch(_entry(2, 6))
                    # a zombie that did not hear it sends the write anyway (its stale
                    # election_id in the request, as P4Runtime §5 puts it there): BMv2 refuses
                    req = old.session.write_request()
                    old.codec.fill_updates(req.updates, _entry(2, 6))
                    assert req.election_id.high == old_token
                    with pytest.raises(grpc.aio.AioRpcError) as ei:
                        await old.session._stub.Write(req, timeout=10)
                    assert ei.value.code() == grpc.StatusCode.PERMISSION_DENIED, str(ei.value)
                    await new.write_batch(_entry(2, 6))      # the new master writes
                # the deposed master connecting again (its old session closed) is a backup,
                # not primary, while the new master holds the switch
                with pytest.raises(NotPrimaryError):
                    async with P4Switch("leaf1", bmv2.grpc_address, 3,
                                        election_id=old_token << 64):
                        pass

        asyncio.run(go())
