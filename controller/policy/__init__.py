"""The operator's policy YAML → a validated, immutable :class:`Policy`."""

from controller.policy.load import load_policy, policy_from_document
from controller.policy.model import Collective, L4Match, Policy, Routing

__all__ = ["Collective", "L4Match", "Policy", "Routing", "load_policy", "policy_from_document"]
