"""How long a batch of northbound registrations (or unregistrations) waits for more callers: a
value, decided by pure functions; :class:`controller.runtime.service.FabricService` keeps one
and replaces it after each batch.

A commit costs about the same for 10 registrations as for 100 (at k = 16 ~0.4 s of CPU: the
placement, the plan preview, each touched switch's diff and bundle), so concurrent callers are
worth gathering into one batch. Two rules, measured on the k = 16 bench (``bench/fabric_scale.py``
phase e: 100 clients, each sending its next request when the last is answered):

- **Time**: the batch waits while requests keep arriving, each within the *quiet* time of the
  last, at most the *window*: ``quiet_s`` and ``window_s`` (5 ms, 50 ms), or a tenth and a
  quarter of the time the last batch took when those are longer. With 5 ms the callers answered
  by the last batch missed the next by a few milliseconds and the 100 clients split into two
  cohorts committed in turn (89 and 11, 64 and 36: two commits for one's work).
- **Count**: the batch goes as soon as it holds as many requests as the last one did: the
  callers that batch answered are back, and nobody else is expected (their next requests
  arrived within ~20 ms; the quiet time after the last of them, ~50 ms at k = 16, was waited
  for nothing on every batch). A batch of one is no evidence of concurrent callers: after it,
  only the time rule applies.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class BatchWindow:
    """The gathering rules' state (module docstring).

    ``window_s``, ``quiet_s``: the floors of the window and the quiet time (s);
    ``last_took_s``: how long the last batch took, from its start to its answers (s);
    ``last_size``: how many requests it held.
    """

    window_s: float = 0.05
    quiet_s: float = 0.005
    last_took_s: float = 0.0
    last_size: int = 0

    @property
    def window(self) -> float:
        """The longest a batch waits for callers (s)."""
        return max(self.window_s, self.last_took_s / 4)

    @property
    def quiet(self) -> float:
        """The longest gap between two arrivals that still keeps the batch open (s)."""
        return max(self.quiet_s, self.last_took_s / 10)

    def full(self, queued: int, max_batch: int) -> bool:
        """The batch goes now: ``queued`` requests reach ``max_batch`` or, after a batch of
        more than one, the last batch's size."""
        return queued >= max_batch or (self.last_size > 1 and queued >= self.last_size)

    def after(self, size: int, took_s: float) -> BatchWindow:
        """The rules after a batch of ``size`` requests that took ``took_s`` seconds."""
        return replace(self, last_took_s=took_s, last_size=size)


__all__ = ["BatchWindow"]
