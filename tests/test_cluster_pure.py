"""The pure parts of the cluster package: the balanced assignment, the fencing token's encodings,
the cluster URL."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.cluster.balance import balanced_assignment, moves
from controller.cluster.etcd import ClusterURLError, grpc_target, parse_cluster_url
from controller.cluster.fencing import MastershipTerm, backup_election_id, generation_is_stale

names = st.lists(st.text("abcdefgh", min_size=1, max_size=3), min_size=0, max_size=40, unique=True)
replica_sets = st.lists(st.sampled_from([f"r{i}" for i in range(6)]), min_size=1, max_size=6,
                        unique=True)


def _loads(assign: dict[str, str], replicas) -> list[int]:
    return [sum(1 for v in assign.values() if v == r) for r in replicas]


@settings(max_examples=200, deadline=None)
@given(switches=names, replicas=replica_sets, data=st.data())
def test_every_switch_gets_a_live_replica_and_loads_differ_by_at_most_one(switches, replicas, data):
    # any current assignment, including dead replicas and unknown switches
    current = data.draw(st.dictionaries(st.sampled_from(switches + ["x"]) if switches else st.just("x"),
                                        st.sampled_from(replicas + ["dead"])))
    a = balanced_assignment(switches, replicas, current)
    assert set(a) == set(switches)
    assert set(a.values()) <= set(replicas)
    loads = _loads(a, replicas)
    assert max(loads) - min(loads) <= 1
    # order of the inputs does not matter
    assert balanced_assignment(list(reversed(switches)), list(reversed(replicas)), current) == a


@settings(max_examples=200, deadline=None)
@given(switches=names, replicas=replica_sets)
def test_a_balanced_assignment_is_kept_as_it_is(switches, replicas):
    first = balanced_assignment(switches, replicas, {})
    assert balanced_assignment(switches, replicas, first) == first      # zero moves


@settings(max_examples=200, deadline=None)
@given(switches=names, replicas=replica_sets)
def test_a_joining_replica_takes_only_its_share(switches, replicas):
    newcomer = "new"
    before = balanced_assignment(switches, replicas, {})
    after = balanced_assignment(switches, [*replicas, newcomer], before)
    moved = {s for s in switches if before[s] != after[s]}
    assert all(after[s] == newcomer for s in moved)           # nothing moves between old replicas
    assert len(moved) == len(switches) // (len(replicas) + 1)  # exactly the newcomer's quota


@settings(max_examples=200, deadline=None)
@given(switches=names, replicas=replica_sets.filter(lambda r: len(r) >= 2), data=st.data())
def test_a_leaving_replica_moves_only_its_switches(switches, replicas, data):
    before = balanced_assignment(switches, replicas, {})
    gone = data.draw(st.sampled_from(replicas))
    after = balanced_assignment(switches, [r for r in replicas if r != gone], before)
    assert {s for s in switches if before[s] != after[s]} == {s for s in switches if before[s] == gone}


def test_no_replica_no_assignment_and_moves_counts_changes():
    assert balanced_assignment(["s1"], [], {}) == {}
    assert moves({"a": "r1", "b": "r2"}, {"a": "r1", "b": "r1", "c": "r2"}) == 2


def test_one_two_three_replicas_on_six_switches():
    sw = [f"s{i}" for i in range(1, 7)]
    for n, expected in ((1, [6]), (2, [3, 3]), (3, [2, 2, 2])):
        reps = [f"r{i}" for i in range(n)]
        assert sorted(_loads(balanced_assignment(sw, reps, {}), reps)) == expected


# -- fencing -------------------------------------------------------------------------------------
def test_election_ids_order_terms_and_stay_above_backups():
    old = MastershipTerm(token=7, switch="s1", replica="r1", lease_id=0x5)
    new = MastershipTerm(token=12, switch="s1", replica="r2", lease_id=0x6)
    assert old < new
    # P4Runtime §5: the highest election_id is the primary
    assert new.election_id > old.election_id
    assert new.election_id_high_low == (12, 0) and new.election_id == 12 << 64
    # every backup id (a 63-bit lease id) is below every master's id (>= 2**64)
    assert backup_election_id(2**63 - 1) < MastershipTerm(1, "s", "r", 1).election_id
    assert new.generation_id == 12
    with pytest.raises(ValueError):
        MastershipTerm(token=0, switch="s", replica="r", lease_id=1)
    with pytest.raises(ValueError):
        backup_election_id(0)


def test_generation_id_staleness_follows_openflow_6_3_7():
    # OpenFlow 1.3.5 §6.3.7: stale iff (int64)(generation_id - cached) < 0
    assert generation_is_stale(5, 12)
    assert not generation_is_stale(12, 12)     # equal is accepted (backups send the master's)
    assert not generation_is_stale(13, 12)
    assert not generation_is_stale(3, 2**64 - 2)   # wrapped around: newer
    assert generation_is_stale(2**64 - 2, 3)


# -- cluster URL ---------------------------------------------------------------------------------
def test_cluster_url():
    assert parse_cluster_url("etcd://127.0.0.1:2379,127.0.0.1:22379") == (
        ("127.0.0.1", 2379), ("127.0.0.1", 22379))
    assert parse_cluster_url("etcd://[::1]:2379,localhost") == (("::1", 2379), ("localhost", 2379))
    assert grpc_target((("127.0.0.1", 1), ("127.0.0.2", 2))) == "ipv4:127.0.0.1:1,127.0.0.2:2"
    assert grpc_target((("::1", 1),)) == "ipv6:[::1]:1"
    for bad in ("http://127.0.0.1:2379", "etcd://", "etcd://a:1,,b:2", "etcd://h:99999",
                "etcd://h:1/path"):
        with pytest.raises(ClusterURLError):
            parse_cluster_url(bad)
    with pytest.raises(ClusterURLError):
        grpc_target((("127.0.0.1", 1), ("::1", 2)))


def _client_error(code, details: str) -> Exception:
    """What aetcd raises for a gRPC error whose code it does not map: ClientError from it."""
    import aetcd
    import grpc.aio

    rpc = grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)
    try:
        raise aetcd.ClientError(details) from rpc
    except aetcd.ClientError as exc:
        return exc


def test_etcd_answers_that_mean_not_now_are_transient_and_refusals_are_not():
    import aetcd
    import grpc

    from controller.cluster.etcd import is_transient

    # quorum lost: the member's own context ends first (etcd answers UNKNOWN)
    assert is_transient(_client_error(grpc.StatusCode.UNKNOWN, "context deadline exceeded"))
    assert is_transient(_client_error(grpc.StatusCode.CANCELLED, "channel closed"))
    assert is_transient(_client_error(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                      "etcdserver: too many requests"))
    assert is_transient(aetcd.ConnectionTimeoutError("Deadline Exceeded"))
    assert is_transient(aetcd.ConnectionFailedError("etcdserver: request timed out"))
    assert not is_transient(_client_error(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                          "trying to send message larger than max"))
    assert not is_transient(_client_error(grpc.StatusCode.PERMISSION_DENIED, "denied"))
    assert not is_transient(aetcd.InvalidArgumentError("etcdserver: request is too large"))
    assert not is_transient(aetcd.ClientError("no cause"))
    assert not is_transient(ValueError("x"))
