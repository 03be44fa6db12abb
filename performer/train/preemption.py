"""Ctrl-C and SIGTERM (a scheduler's preemption, a launcher stopping) stop a run after its step.

The loop saves a checkpoint at the next step boundary, so a resumed run continues exactly."""

import contextlib
import signal
import sys
import threading

import jax
import numpy as np
from jax.experimental import multihost_utils

from performer.train.distributed import say


@contextlib.contextmanager
def ctrl_c_stops_after_the_step():
  """Yields a list that the first Ctrl-C or SIGTERM fills; a second Ctrl-C interrupts at once.

  A KeyboardInterrupt raised mid-step could leave the model half-updated,
  so the loop saves and stops at the next step boundary instead. SIGTERM
  (a scheduler's preemption, a session's end, a stopped launcher) does
  the same, so that it also leaves a checkpoint to resume from.
  """
  stop = []
  if threading.current_thread() is not threading.main_thread():  # signals reach the main one only
    yield stop
    return
  previous = {}

  def request(signum, frame):  # pylint: disable=unused-argument
    stop.append(signum)
    signal.signal(signum, previous[signum])  # each signal once; the next acts as before
    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    say(f"\n{name}: saving a checkpoint after this step (Ctrl-C again to quit without)",
        file=sys.stderr)

  for signum in (signal.SIGINT, signal.SIGTERM):
    previous[signum] = signal.signal(signum, request)
  if previous[signal.SIGINT] is None:  # a handler installed outside Python
    previous[signal.SIGINT] = signal.default_int_handler
  if previous[signal.SIGTERM] is None:
    previous[signal.SIGTERM] = signal.SIG_DFL
  try:
    yield stop
  finally:
    for signum, handler in previous.items():
      signal.signal(signum, handler)


def stopping(stop, log):
  """Whether to save and stop after this step, given the signals seen (`stop`).

  One process stops at once. The processes of a multi-process run may see a
  SIGTERM at different steps, and must save the same checkpoint together,
  so they agree at the next log step (one small all-gather there).
  """
  if jax.process_count() == 1:
    return bool(stop)
  if not log:
    return False
  return bool(multihost_utils.process_allgather(np.int32(bool(stop))).max())
