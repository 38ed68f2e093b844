"""aifabric: a traffic-engineering SDN controller for AI-training fabrics.

Layers (data flows one way; see README.md, "Architecture"):
``controller.model`` / ``controller.policy`` (validated, immutable inputs) →
``controller.te`` (pure algorithms) → ``controller.plan`` (per-switch intent, diff) →
``controller.drivers`` (the only code that talks to switches) → ``controller.runtime`` / CLI.
"""

__version__ = "0.1.0"
