"""The experiment interface: what a lab module gives the one runner (:mod:`mininet_labs.lab.runner`).

A lab is a :class:`Lab` subclass holding only what is special about it: its schema
(``spec_model``), its network (``network``), its variants (each with the controller it runs
under and the keys of its runs), one run on the live network (:meth:`Lab.run`), and its
verdicts from the run records (pure). ``mininet_labs/README.md`` has a complete minimal lab.

The runner does the rest, the same way for every lab: lock → requirements → network →
variants (per variant: controller started and all hosts reachable, then every run) → results
→ verdicts → plots. A lab never imports another lab; what two labs share lives in
:mod:`mininet_labs.lab` (framework) or :mod:`mininet_labs.analysis` (pure).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from controller.yamlsrc import Document
from mininet_labs.analysis.verdict import Verdict
from mininet_labs.lab.schema import Experiment, FabricExperimentSpec, load_fabric_experiment

__all__ = ["ControllerConfig", "Lab", "RunContext", "Variant", "Verdict"]

if TYPE_CHECKING:
    from rich.console import Console

    from mininet_labs.lab.processes import ControllerSession, HostProcesses
    from mininet_labs.lab.requirements import Requirement


@dataclass(frozen=True)
class ControllerConfig:
    """The controller a variant runs under.

    ``policy_text``: the policy YAML it gets (written to ``OUT/policy-<variant>.yaml``);
    ``args``: extra ``aifabric controller`` flags; ``southbound``: ``openflow`` (Open vSwitch) or
    ``p4runtime`` (``aifabric controller --p4-targets``, BMv2); ``telemetry``: serve the gRPC API and
    metrics (statistics every ``stats_interval_s``), for labs that measure through them;
    ``wait_log``: log lines to wait for (e.g. ``"[leaf1] QoS applied"``) before the first run;
    ``tls``: OpenFlow (``ssl:`` targets) and the northbound over TLS with tokens, with the
    development PKI of ``aifabric certs init`` (``OUT/pki``; Open vSwitch's ``set-ssl``
    removed after the variant).
    """

    policy_text: str
    args: tuple[str, ...] = ()
    southbound: str = "openflow"
    telemetry: bool = False
    stats_interval_s: float = 1.0
    wait_log: tuple[str, ...] = ()
    tls: bool = False


@dataclass(frozen=True)
class Variant:
    """One configuration of an experiment: a name, the controller it runs under (None: the lab
    programs the switches itself, or there is none), the keys of its runs (handed to
    :meth:`Lab.run` in order) and an optional ``warmup`` key run first and not recorded."""

    name: str
    controller: ControllerConfig | None
    runs: tuple[Any, ...] = (None,)
    warmup: Any = None


@dataclass
class RunContext:
    """What :meth:`Lab.run` gets: the experiment, the live Mininet network (``net``; None for
    ``network = "none"``), the variant, its controller (None without one), the output directory
    of this variant, a process runner, the console and anything :meth:`Lab.setup` stored in
    ``state``."""

    exp: Any
    net: Any
    variant: Variant
    controller: ControllerSession | None
    out: Path
    procs: HostProcesses
    console: Console
    state: dict[str, Any] = field(default_factory=dict)

    def host(self, name: str) -> Any:
        """The Mininet host node ``name``."""
        return self.net.get(name)


class Lab:
    """Base of every lab (module docstring). Override what is special; the defaults fit a lab
    on a generated fabric with a topology and a policy."""

    kind: ClassVar[str]
    spec_model: ClassVar[type[Any]] = FabricExperimentSpec
    #: "ovs": Open vSwitch fabric from the topology; "bmv2": BMv2 fabric from the topology;
    #: "bmv2-star": hosts on one BMv2 switch (:meth:`star_fabric`); "none": no network.
    network: ClassVar[str] = "ovs"
    #: results file names of the plots, first one is named in the last line of ``lab run``
    plot_names: ClassVar[tuple[str, ...]] = ("results.png",)

    # -- loading (no root, nothing started) ----------------------------------------------------
    def load(self, doc: Document) -> Experiment:
        """Validate the document and load what it names (raises ConfigError, located)."""
        exp = load_fabric_experiment(doc, self.spec_model, shaped=self.network in ("ovs", "bmv2"),
                                     check_fabric=self.check_fabric)
        return self.prepare(doc, exp)

    def check_fabric(self, doc: Document, fabric: Any) -> None:
        """What the lab needs of the topology, checked before the policy is read (raises
        ConfigError located in ``doc``)."""

    def prepare(self, doc: Document, exp: Experiment) -> Experiment:
        """Cross-checks and derived values (raises ConfigError located in ``doc``)."""
        return exp

    def describe(self, exp: Any) -> str:
        """One line for ``aifabric lab check``."""
        return f"{exp.fabric.name}: {len(exp.fabric.switches)} switches, {len(exp.fabric.hosts)} hosts"

    def requirements(self, exp: Any) -> Sequence[Requirement]:
        """What this lab needs beyond its network's (:func:`mininet_labs.lab.requirements.for_lab`)."""
        return ()

    # -- running ---------------------------------------------------------------------------------
    def variants(self, exp: Any) -> Sequence[Variant]:
        raise NotImplementedError

    def setup(self, ctx: RunContext) -> None:
        """Once, after the network is up (e.g. splice delay lines, program a switch)."""

    def teardown(self, ctx: RunContext) -> None:
        """Before the network goes (also after an error): stop what :meth:`setup` started, and
        put what results.json should keep in ``ctx.state["results"]`` (a dict)."""

    def cleanup(self) -> list[str]:
        """What the lab's own extras left after a crash (e.g. delay lines); for ``lab cleanup``
        and the runner's teardown."""
        return []

    def run(self, ctx: RunContext, key: Any) -> dict[str, Any]:
        """One run; returns its record (JSON-ready)."""
        raise NotImplementedError

    def run_report(self, exp: Any, record: dict[str, Any]) -> list[Any]:
        """What to print as soon as a run is done (lines or rich renderables)."""
        return []

    # -- results (pure) --------------------------------------------------------------------------
    def summarize(self, exp: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
        """The lab's numbers over all records (results.json ``summary``)."""
        return {}

    def verdicts(self, exp: Any, records: list[dict[str, Any]],
                 summary: dict[str, Any]) -> list[Verdict]:
        raise NotImplementedError

    def report(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any]
               ) -> list[Any]:
        """Tables (rich renderables) or lines printed before the verdicts."""
        return []

    def plots(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any],
              out: Path) -> list[Path]:
        """Write the plots into ``out``; returns their paths."""
        return []
