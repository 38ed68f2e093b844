"""Mininet labs: build the fabric of a topology file under Mininet, run the aifabric controller
as its own process, run real workloads on the hosts and measure them.

Entry point: :func:`run_experiment` (``python -m mininet_labs.lab run EXPERIMENT.yaml --out DIR``).
The controller never imports this package; Mininet is imported only when a lab runs.
"""

from mininet_labs.lab.experiment import Experiment, ExperimentSpec, load_experiment
from mininet_labs.lab.runner import Results, requirements_missing, run_experiment

__all__ = ["Experiment", "ExperimentSpec", "Results", "load_experiment", "requirements_missing",
           "run_experiment"]
