"""The `performer` command: one subcommand per command module, found by what the module declares.

A command module declares NAME, SUMMARY and DESCRIPTION (docs/ARCHITECTURE.md, "Commands")."""

import functools
import glob
import importlib
import os
import sys

from performer import declared, flags, interrupts
from performer.errors import UserError
from performer.version import __version__

_HERE = os.path.dirname(os.path.abspath(__file__))
# Where command modules live, in the order of a study: data, training, measurements, plans, figures.
PACKAGES = ("data", "commands", "experiments", "plans", "figures")


@functools.cache
def _found():
  """[(module, NAME dashed, SUMMARY)] of every command module, read from the sources without
  importing any (performer.plans imports jax, which takes seconds)."""
  out = []
  for package in PACKAGES:
    for path in sorted(glob.glob(os.path.join(_HERE, package, "*.py"))):
      with open(path, encoding="utf-8") as f:
        if "\nDESCRIPTION = " not in f.read():
          continue
      found = declared.constants(path, ("NAME", "SUMMARY"))
      module = os.path.splitext(os.path.relpath(path, os.path.dirname(_HERE)))[0]
      module = module.replace(os.sep, ".").removesuffix(".__init__")
      out.append((module, found["NAME"].replace("_", "-"), found["SUMMARY"]))
  return out


COMMANDS = tuple(module for module, _, _ in _found())
EXPERIMENTS = tuple(m.rsplit(".", 1)[1] for m in COMMANDS if m.startswith("performer.experiments."))


def _parser(only=None):
  """The argument parser: every command built (only=None, as tests read their flags), the one
  named (so that a command imports only what it needs), or none (only="", for the list that
  `performer --help` prints in well under a second)."""
  epilog = None
  if not only:
    from performer import figures  # pylint: disable=import-outside-toplevel
    epilog = "figures and tables (performer figure NAME):\n" + figures.listing()
  parser = flags.Parser(
      prog="performer", formatter_class=flags.Formatter, epilog=epilog,
      description="Reproduce 'Rethinking Attention with Performers' (Choromanski et al., "
                  "ICLR 2021): data preparation, training, FAVOR+ measurements and figures.")
  parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
  sub = parser.subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
  for where, name, summary in _found():
    if only is not None and name != only:
      sub.add_parser(name, **({"help": summary} if only == "" else {}))  # named, not built
      continue
    module = importlib.import_module(where)
    command = sub.add_parser(name, help=module.SUMMARY, description=module.DESCRIPTION,
                             formatter_class=flags.Formatter,
                             epilog=module.epilog() if hasattr(module, "epilog") else None)
    for cls in module.FLAGS:
      flags.add(command, cls)
    command.set_defaults(func=module.main)
  return parser


def main(argv=None):
  """Entry point of the `performer` console script; returns the exit status."""
  own = argv is None  # this process's own command line, not a caller's list
  argv = sys.argv[1:] if own else argv
  named = next((a for a in argv if not a.startswith("-")), None)
  parser = _parser(named if named in {name for _, name, _ in _found()} else "")
  args, unknown = parser.parse_known_args(argv)
  if unknown:
    parser.subparsers.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
  try:
    with interrupts.as_ctrl_c():
      return args.func(args) or 0
  except UserError as e:
    _say(f"performer {args.command}: error: {e}")
    return 2
  except KeyboardInterrupt:
    _say(f"performer {args.command}: interrupted")
    if own:  # no interpreter teardown under XLA's threads (it segfaulted after Ctrl-C); what the
      sys.stdout.flush()  # command held is released by now, and nothing uses atexit
      os._exit(130)  # pylint: disable=protected-access
    return 130


def _say(line):
  """One line on stderr in one write: between print's two, another thread's line could land."""
  sys.stderr.write(line + "\n")
  sys.stderr.flush()


if __name__ == "__main__":
  sys.exit(main())
