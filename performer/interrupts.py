"""Stopping a command cleanly: SIGTERM and SIGHUP stop it as Ctrl-C does, and no Ctrl-C is lost.

The command then releases what it holds (a dataset's .partial folder and .lock) on the way out."""

import _thread
import contextlib
import signal
import sys
import threading


@contextlib.contextmanager
def as_ctrl_c():
  """While the block runs, SIGTERM and SIGHUP (a closed terminal) raise KeyboardInterrupt, and a
  KeyboardInterrupt Python had to drop is raised again.

  A signal ignored (nohup) stays ignored; train and reproduce install their own handlers while
  they run. Outside the main thread only the second part applies.
  """
  previous = ({s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
              if threading.current_thread() is threading.main_thread() else {})
  for s, handler in previous.items():
    if handler == signal.SIG_DFL:
      signal.signal(s, _interrupt)
  finished = threading.Event()
  unraisable = sys.unraisablehook
  sys.unraisablehook = _raised_again(unraisable, finished)
  try:
    yield
  finally:
    finished.set()
    sys.unraisablehook = unraisable
    for s, handler in previous.items():
      signal.signal(s, handler)


def _interrupt(signum, frame):
  del signum, frame
  raise KeyboardInterrupt


def _raised_again(hook, finished):
  """A sys.unraisablehook that delivers again a KeyboardInterrupt Python had to drop: a Ctrl-C
  that lands in a gc callback (jax registers one) or a finalizer is printed and ignored, and
  the command would run on. Other exceptions go to `hook`."""
  def handle(unraisable):
    if issubclass(unraisable.exc_type, KeyboardInterrupt):
      for s in (signal.SIGINT, signal.SIGTERM):  # whichever still raises KeyboardInterrupt
        if signal.getsignal(s) in (signal.default_int_handler, _interrupt):
          # From a thread, shortly: raised from here, it would be dropped again.
          again = threading.Timer(0.05, lambda s=s: finished.is_set() or _thread.interrupt_main(s))
          again.daemon = True
          again.start()
          return
    hook(unraisable)
  return handle
