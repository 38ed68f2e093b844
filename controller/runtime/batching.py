"""How long a batch of northbound registrations (or unregistrations) waits for more callers: a
value, decided by pure functions, held in :class:`controller.runtime.state.RuntimeState`
(``batching``) and moved on by the event :class:`~controller.runtime.events.BatchAnswered` that
:class:`controller.runtime.service.FabricService` feeds after each batch.

A commit costs about the same for 10 registrations as for 100 (at k = 16 ~0.4 s of CPU: the
placement, the plan preview, each touched switch's diff and bundle), so concurrent callers are
worth gathering into one batch. Two rules, measured on the k = 16 bench (``bench/fabric_scale.py``
phase e: 100 clients, each sending its next request when the last is answered):

- **Time**: the batch waits while requests keep arriving, each within the *quiet* time of the
  last, at most the *window*: ``quiet_s`` and ``window_s`` (5 ms, 50 ms), or a tenth and a
  quarter of the time the last batch took when those are longer. With 5 ms the callers answered
  by the last batch missed the next by a few milliseconds and the 100 clients split into two
  cohorts committed in turn (89 and 11, 64 and 36: two commits for one's work).
- **Count**: the batch goes as soon as it holds every request expected — the callers the last
  batch answered (they come straight back with their next request) and the requests already
  waiting when it ended — and waits for them to the end of the window, whatever the gaps (the
  window is then half the last batch's time: a batch of the rest would cost nearly as much).
  Measured: the quiet time after the last caller, ~50 ms at k = 16, was waited for nothing on
  every batch; counting the last batch's callers alone kept cohorts apart (those waiting when
  it ended went with part of the others: unregistering, batches of 50, 41 and 29); the bench's
  callers, 100 threads of one process, came back over more than the quiet time (batches of 91
  and 9) and, unregistering, over more than a quarter of the last batch's time (50 and 50).
  One request and nothing waiting is no evidence of concurrent callers: after it, only the
  time rule applies.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class BatchWindow:
    """The gathering rules' state (module docstring).

    ``window_s``, ``quiet_s``: the floors of the window and the quiet time (s);
    ``last_took_s``: how long the last batch took, from its start to its answers (s);
    ``expected``: the requests the next batch waits for (0: none counted).
    """

    window_s: float = 0.05
    quiet_s: float = 0.005
    last_took_s: float = 0.0
    expected: int = 0

    @property
    def window(self) -> float:
        """The longest a batch waits for callers (s): a quarter of the last batch's time, half
        of it while requests are expected (a batch of the rest would cost nearly as much)."""
        return max(self.window_s, self.last_took_s / (2 if self.expected > 0 else 4))

    @property
    def quiet(self) -> float:
        """The longest gap between two arrivals that still keeps the batch open (s)."""
        return max(self.quiet_s, self.last_took_s / 10)

    def wait_s(self, queued: int, max_batch: int, since_start_s: float,
               since_arrival_s: float) -> float:
        """How much longer the batch waits for callers (0: it goes now), ``queued`` requests
        in, ``since_start_s`` after it began gathering and ``since_arrival_s`` after the last
        request came. While requests are expected it waits for them to the end of the window;
        otherwise while they keep coming within the quiet time."""
        if self.full(queued, max_batch):
            return 0.0
        left = self.window - since_start_s
        if self.expected <= 0:
            left = min(left, self.quiet - since_arrival_s)
        return max(0.0, left)

    def full(self, queued: int, max_batch: int) -> bool:
        """The batch goes now: ``queued`` requests reach ``max_batch`` or those expected."""
        return queued >= max_batch or (self.expected > 0 and queued >= self.expected)

    def after(self, size: int, took_s: float, waiting: int) -> BatchWindow:
        """The rules after a batch of ``size`` requests that took ``took_s`` seconds and ended
        with ``waiting`` requests queued."""
        n = size + waiting
        return replace(self, last_took_s=took_s, expected=n if n > 1 else 0)


__all__ = ["BatchWindow"]
