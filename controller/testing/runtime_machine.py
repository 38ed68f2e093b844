"""The hypothesis state machine over :class:`~.runtime_model.ModelFabric` (issue 22's model-based
test): each rule is something that happens to a controller in production; after every rule the
fabric is brought to a quiescent point and :meth:`~.runtime_model.ModelFabric.violations` must be
empty. ``tests/test_runtime_model.py`` runs it in ``make test``; ``bench/runtime_model.py
--examples N`` runs more and prints the count and any counterexample.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from controller.model.topology import Fabric, load_topology
from controller.northbound.model import CollectiveRequest
from controller.policy import load_policy
from controller.policy.model import Policy
from controller.runtime.registration import qualified_name
from controller.testing.runtime_model import ModelFabric

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"
PINNED = ROOT / "policies" / "pinned_two_rings.yaml"
ECMP = ROOT / "policies" / "ecmp_two_rings.yaml"


def _inputs() -> tuple[Fabric, Policy, list[tuple[str, str]]]:
    fabric = load_topology(TOPOLOGY)
    pinned = PINNED.read_text()
    docs = [("pinned.yaml", pinned), ("ecmp.yaml", ECMP.read_text()),
            ("reordered.yaml", pinned.replace("[h1, h3, h5, h7]", "[h1, h5, h3, h7]")),
            ("one-ring.yaml", pinned.split("  - name: ring-b")[0]),
            ("broken.yaml", "routing: {mode: sideways}\n")]
    return fabric, load_policy(PINNED, fabric), docs


FABRIC, POLICY, DOCUMENTS = _inputs()
SWITCHES = [s.name for s in FABRIC.switches]
SPINES = [s.name for s in FABRIC.switches if s.role != "leaf"]
LEAVES = [s.name for s in FABRIC.switches if s.role == "leaf"]
REQUESTS = [CollectiveRequest("job", "wide", "ring", ("h1", "h3", "h5", "h7"), dscp=12),
            CollectiveRequest("job", "pair", "ring", ("h2", "h8"), dscp=14),
            CollectiveRequest("other", "x", "ring", ("h4", "h6"), dscp=16)]


class RuntimeMachine(RuleBasedStateMachine):
    """Rules and the invariant (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.m: ModelFabric | None = None

    @initialize()
    def start(self) -> None:
        self.m = ModelFabric(FABRIC, POLICY, PINNED.read_text())
        for name in SWITCHES:
            self.m.connect(name)

    def teardown(self) -> None:
        if self.m is not None:
            self.m.close()

    @property
    def fab(self) -> ModelFabric:
        assert self.m is not None
        return self.m

    @rule(name=st.sampled_from(SWITCHES))
    def disconnect(self, name: str) -> None:
        self.fab.disconnect(name)

    @rule(name=st.sampled_from(SWITCHES))
    def connect(self, name: str) -> None:
        self.fab.connect(name)

    @rule(name=st.sampled_from(SWITCHES), how=st.integers(0, 3))
    def reconnect_holding(self, name: str, how: int) -> None:
        self.fab.reconnect_holding(name, how)

    @rule(name=st.sampled_from(SWITCHES), master=st.booleans())
    def mastership(self, name: str, master: bool) -> None:
        self.fab.mastership_change(name, master)

    @rule(name=st.sampled_from(SWITCHES), how=st.integers(0, 3), back=st.booleans())
    def interim_master(self, name: str, how: int, back: bool) -> None:
        """We lose ``name`` to another replica, which writes it; then (``back``) we master it
        again (a failover and a fail-back, as the HA lab's pause-master scenario)."""
        self.fab.mastership_change(name, False)
        self.fab.tamper(name, how)
        if back:
            self.fab.mastership_change(name, True)

    @rule(spine=st.sampled_from(SPINES), leaf=st.sampled_from(LEAVES), up=st.booleans())
    def port(self, spine: str, leaf: str, up: bool) -> None:
        self.fab.port(spine, leaf, up)

    @rule(doc=st.sampled_from(DOCUMENTS))
    def apply_policy(self, doc: tuple[str, str]) -> None:
        self.fab.apply_policy(doc[1], doc[0])

    @rule(req=st.sampled_from(REQUESTS))
    def register(self, req: CollectiveRequest) -> None:
        self.fab.register(req)

    @rule(req=st.sampled_from(REQUESTS))
    def unregister(self, req: CollectiveRequest) -> None:
        """One of the requests' collectives, registered or not (NOT_FOUND). What is drawn never
        depends on the runtime's state: hypothesis replays a sequence by its draws, and a
        precondition on ``registered`` made them depend on how the runtime's threads and
        timers ran ("Inconsistent data generation" in a long bench run)."""
        self.fab.unregister(qualified_name(req.job, req.name))

    @rule(name=st.sampled_from(SWITCHES), then=st.sampled_from(["policy", "register", "port"]),
          doc=st.sampled_from(DOCUMENTS[:4]), req=st.sampled_from(REQUESTS))
    def refusal(self, name: str, then: str, doc: tuple[str, str],
                req: CollectiveRequest) -> None:
        """``name`` refuses the next entry it gets, then something changes the plan."""
        self.fab.refuse_next(name)
        if then == "policy":
            self.fab.apply_policy(doc[1], doc[0])
        elif then == "register":
            self.fab.register(req)
        else:
            self.fab.port("spine1", "leaf1", False)

    @rule(name=st.sampled_from(SPINES), delay_s=st.sampled_from([0.05, 0.3]),
          doc=st.sampled_from(DOCUMENTS[:4]))
    def slow_ack(self, name: str, delay_s: float, doc: tuple[str, str]) -> None:
        """``name`` acknowledges late (0.05 s: in time; 0.3 s: past the 0.2 s deadline), while
        a policy changes the plan."""
        self.fab.slow(name, delay_s)
        self.fab.apply_policy(doc[1], doc[0])

    @invariant()
    def holds_the_plan(self) -> None:
        if self.m is None:
            return
        self.m.quiesce()
        bad = self.m.violations()
        assert not bad, "\n".join(bad)
