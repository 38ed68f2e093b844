"""Mininet labs: the one runner (:mod:`mininet_labs.lab.runner`), the experiment interface
(:mod:`mininet_labs.lab.interface`) and what every lab shares (network, processes, counters,
probes, requirements). The labs themselves are in :mod:`mininet_labs.labs`; their pure analysis
in :mod:`mininet_labs.analysis`.

Entry points: ``aifabric lab run EXPERIMENT.yaml --out DIR`` (``python -m mininet_labs.lab``);
``aifabric lab up TOPOLOGY.yaml`` holds a fabric up for a controller run by hand
(:mod:`mininet_labs.lab.up`).
The controller never imports this package; Mininet is imported only when a lab runs.
"""
