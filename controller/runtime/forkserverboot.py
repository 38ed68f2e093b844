"""What :mod:`multiprocessing`'s fork server imports when it starts (its preload; never imported
by the controller itself): the policy checker's modules, and SIGHUP ignored.

The fork server and every child it forks inherit its signal dispositions, so a reload signal
sent to the controller's whole process group (``kill -HUP -PGID``) reaches none of them with its
default action (terminate) — also not a worker forked a moment before, which has not run a line
of its own yet (a worker that set ``SIG_IGN`` itself died of a SIGHUP sent while it started,
and the reload it was to check failed with "Connection reset by peer"). The controller's own
SIGHUP handler is in the controller's process only.
"""

from __future__ import annotations

import signal

signal.signal(signal.SIGHUP, signal.SIG_IGN)  # first: the imports below take a while

import controller.runtime.policycheck  # noqa: E402, F401 - preloaded for the workers
