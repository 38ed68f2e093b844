"""The etcd test harness: a 3-member cluster on loopback only, two at once, member faults."""

from __future__ import annotations

import asyncio
import threading

import pytest

from controller.cluster.etcd import EtcdClient, EtcdSettings, retrying
from controller.testing.etcd import EtcdCluster, etcd_binary, listening_addresses

pytestmark = pytest.mark.skipif(etcd_binary() is None, reason="etcd is not installed")


def _put_get(url: str, key: bytes, value: bytes) -> bytes | None:
    async def go() -> bytes | None:
        client = EtcdClient(EtcdSettings.from_url(url, rpc_timeout_s=2.0))
        try:
            # right after a member died the cluster may be electing a leader: retry
            await retrying(lambda: client.put(key, value), deadline_s=10.0)
            got = await client.get(key)
            return got.value if got is not None else None
        finally:
            await client.close()

    return asyncio.run(go())


def test_members_listen_on_loopback_only(etcd_cluster):
    pids = etcd_cluster.pids()
    assert len(pids) == 3
    for pid in pids:
        addrs = listening_addresses(pid)
        # a client and a peer port each, nothing else (no metrics, no pprof, no 0.0.0.0)
        assert len(addrs) == 2, addrs
        assert {a for a, _ in addrs} == {"127.0.0.1"}, addrs
    assert _put_get(etcd_cluster.url, b"k", b"v") == b"v"


def test_two_clusters_at_once_and_stop_kills_only_its_own():
    clusters = [EtcdCluster(3, heartbeat_ms=50, election_ms=500) for _ in range(2)]
    errors: list[BaseException] = []

    def start(c: EtcdCluster) -> None:
        try:
            c.start()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(c,)) for c in clusters]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, errors
        a, b = clusters
        assert not {p for _, p in a.endpoints} & {p for _, p in b.endpoints}
        assert _put_get(a.url, b"x", b"a") == b"a"
        assert _put_get(b.url, b"x", b"b") == b"b"   # separate data
        b_pids = b.pids()
        a.stop()
        assert all(m.proc is not None and m.proc.poll() is not None for m in a.members)
        assert b.pids() == b_pids                      # b untouched
        assert _put_get(b.url, b"y", b"still") == b"still"
    finally:
        for c in clusters:
            c.stop()


def test_one_member_killed_cluster_still_answers_then_member_rejoins(etcd_cluster):
    etcd_cluster.kill_member(0)
    assert not etcd_cluster.members[0].running
    # the client's channel names all three members: it moves on to a live one
    assert _put_get(etcd_cluster.url, b"after-kill", b"1") == b"1"
    etcd_cluster.restart_member(0)
    assert etcd_cluster.members[0].running
    only_m0 = f"etcd://127.0.0.1:{etcd_cluster.members[0].client_port}"
    assert _put_get(only_m0, b"after-kill", b"2") == b"2"


@pytest.mark.parametrize("members", [1, 3])
def test_etcd_over_mutual_tls(tmp_path, members):
    """EtcdClient with EtcdTLS against members started with --client-cert-auth; a client without
    a certificate, or with one from another CA, gets nothing. With 3 members the one channel's
    target (``ipv4:A:P,B:Q,C:R``) names no host: the certificate is checked against the first
    endpoint's (EtcdTLS.server_name)."""
    from controller.cluster.etcd import EtcdTLS, retrying
    from controller.security.certs import init_dev_pki

    pki = init_dev_pki(tmp_path / "pki")
    other = init_dev_pki(tmp_path / "other")
    op_crt, op_key = pki.client_certs["operator"]
    with EtcdCluster(members, heartbeat_ms=50, election_ms=500,
                     client_tls=(pki.controller_cert, pki.controller_key, pki.ca_cert)) as c:
        async def put_get(tls: EtcdTLS) -> bytes | None:
            client = EtcdClient(EtcdSettings(tuple(c.endpoints), rpc_timeout_s=2.0, tls=tls))
            try:
                await retrying(lambda: client.put(b"k", b"tls"), deadline_s=3.0)
                got = await client.get(b"k")
                return got.value if got is not None else None
            finally:
                await client.close()

        assert asyncio.run(put_get(EtcdTLS(pki.ca_cert, op_crt, op_key))) == b"tls"
        import aetcd
        with pytest.raises(aetcd.ClientError):
            asyncio.run(put_get(EtcdTLS(pki.ca_cert)))                      # no client cert
        o_crt, o_key = other.client_certs["operator"]
        with pytest.raises(aetcd.ClientError):
            asyncio.run(put_get(EtcdTLS(pki.ca_cert, o_crt, o_key)))        # another CA
