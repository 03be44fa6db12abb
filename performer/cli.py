"""The `performer` command: a list of command modules, each declaring its own name and flags.

A command module exports NAME (the command, dashed: approx_error is
`approx-error`), SUMMARY, DESCRIPTION, FLAGS (dataclasses whose fields are
its flags, performer/flags.py), `main(args)` and optionally `epilog()`;
experiments get FLAGS and main from `results.command`. A command imports
only its own module; the list of commands reads each NAME and SUMMARY, string
literals, from the module's source, so `performer --help` imports no jax.
"""

import _thread
import argparse
import importlib
import importlib.metadata
import os
import signal
import sys
import threading

from performer import declared, flags
from performer.errors import UserError

EXPERIMENTS = ("approx_error", "lemma2", "speed", "throughput", "error_propagation",
               "attention_maps", "aa_similarity", "recall_rows")
# In the order of a study: data, training, measurements, then plans and figures.
COMMANDS = ("performer.data.trembl", "performer.data.pfam", "performer.data.pg19",
            "performer.data.mqar", "performer.commands.train", "performer.commands.eval",
            *(f"performer.experiments.{name}" for name in EXPERIMENTS),
            "performer.plans.command", "performer.figures", "performer.plans.archive")


class _Parser(argparse.ArgumentParser):
  """argparse whose errors are one line, as every other error of the command (no usage block:
  `--help` has it)."""

  def error(self, message):
    hint = " (`performer --help` lists the commands)" if self.prog == "performer" else ""
    self.exit(2, f"{self.prog}: error: {message}{hint}\n")


class _Formatter(argparse.HelpFormatter):
  """Wraps text as usual, but keeps the lines of a text that has several (the figure list)."""

  def _fill_text(self, text, width, indent):
    if "\n" in text:
      return "".join(indent + line for line in text.splitlines(keepends=True))
    return super()._fill_text(text, width, indent)


def _declared(where):
  """NAME (dashed) and SUMMARY of command module `where` (performer.x.y), read from its source
  without importing it or its packages (performer.plans imports jax, which takes seconds)."""
  base = os.path.join(os.path.dirname(os.path.abspath(__file__)), *where.split(".")[1:])
  source = base + ".py" if os.path.isfile(base + ".py") else os.path.join(base, "__init__.py")
  found = declared.constants(source, ("NAME", "SUMMARY"))
  return found["NAME"].replace("_", "-"), found["SUMMARY"]


def _summaries():
  """{command: its one-line help}, importing no command module."""
  return dict(map(_declared, COMMANDS))


def _parser(only=None):
  """The argument parser.

  Args:
    only: None builds every command (tests read their flags); a command name
      builds that one alone, so that a command imports only what it needs
      (prepare-trembl starts without jax); "" builds none, for the list of
      commands that `performer` and `performer --help` print in well under a
      second. A command not built is named, with its summary when listed.
  """
  wanted = lambda name: only is None or name == only
  epilog = None
  if not only:
    from performer import figures  # pylint: disable=import-outside-toplevel
    epilog = "figures and tables (performer figure NAME):\n" + figures.listing()
  parser = _Parser(
      prog="performer", formatter_class=_Formatter,
      description="Reproduce 'Rethinking Attention with Performers' (Choromanski et al., "
                  "ICLR 2021): data preparation, training, FAVOR+ measurements and figures.",
      epilog=epilog)
  parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
  sub = parser.subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

  for where in COMMANDS:
    name, summary = _declared(where)
    if not wanted(name):
      sub.add_parser(name, **({"help": summary} if only == "" else {}))  # named, not built
      continue
    module = importlib.import_module(where)
    parser_ = sub.add_parser(name, help=module.SUMMARY, description=module.DESCRIPTION,
                             formatter_class=_Formatter,
                             epilog=module.epilog() if hasattr(module, "epilog") else None)
    for cls in module.FLAGS:
      flags.add(parser_, cls)
    parser_.set_defaults(func=module.main)
  return parser


def _version():
  """This package's installed version (its metadata), else the one in the source."""
  try:
    return importlib.metadata.version("performer")
  except importlib.metadata.PackageNotFoundError:  # run from a checkout that is not installed
    from performer.version import __version__  # pylint: disable=import-outside-toplevel
    return __version__


def _names():
  """Every command name, without importing any command."""
  return {_declared(where)[0] for where in COMMANDS}


def _named(argv):
  """The command argv names (its first word that is not an option), or None."""
  return next((a for a in argv if not a.startswith("-")), None)


def main(argv=None):
  """Entry point of the `performer` console script; returns the exit status."""
  own = argv is None  # this process's own command line, not a caller's list
  argv = sys.argv[1:] if own else argv
  named = _named(argv)
  parser = _parser(named if named in _names() else "")
  args, unknown = parser.parse_known_args(argv)
  if unknown:
    parser.subparsers.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
  # SIGTERM and SIGHUP (a closed terminal) stop a command as Ctrl-C does, so that what it
  # holds is cleaned up (a dataset's .partial folder and .lock); train and reproduce install
  # their own handlers while they run, and a signal ignored (nohup) stays ignored.
  previous = ({s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
              if threading.current_thread() is threading.main_thread() else {})
  for s, handler in previous.items():
    if handler == signal.SIG_DFL:
      signal.signal(s, _interrupt)
  finished = threading.Event()
  unraisable = sys.unraisablehook
  sys.unraisablehook = _raised_again(unraisable, finished)
  try:
    return args.func(args) or 0
  except UserError as e:
    print(f"performer {args.command}: error: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt:
    print(f"performer {args.command}: interrupted", file=sys.stderr)
    if own:
      # The process's own command: leave without tearing the interpreter down under XLA's
      # threads, which may still run the computation the interrupt cut short (that teardown
      # segfaulted after 2 of 8 Ctrl-Cs on approx-error). What the command held was released
      # on the way here; nothing is registered with atexit.
      sys.stdout.flush()
      sys.stderr.flush()
      os._exit(130)  # pylint: disable=protected-access
    return 130
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
  the command ran on (1 of 15 tries on approx-error). Other exceptions go to `hook`."""
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


if __name__ == "__main__":
  sys.exit(main())
