"""aifabric: a traffic-engineering SDN controller for AI-training fabrics.

Layers (data flows one way; see docs/architecture.md):
``controller.model`` / ``controller.policy`` (validated, immutable inputs) →
``controller.te`` (pure algorithms) → ``controller.plan`` (per-switch intent, diff) →
``controller.drivers`` (the only code that talks to switches) → ``controller.runtime`` / CLI.

``__version__`` is the installed distribution's version: pyproject.toml defines it, once.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("aifabric")
except PackageNotFoundError:  # a checkout on PYTHONPATH that was never installed
    __version__ = "0+unknown"
