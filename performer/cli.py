"""The `performer` command: a table of subcommands, each a module that declares its own flags.

An experiment module (performer/experiments/) exports CONFIG, a dataclass
whose fields are its flags (performer/flags.py), `run(cfg) -> Result`,
`report(cfg, result) -> lines`, NAME, SUMMARY, DESCRIPTION, OUT (the
default --out) and FIGURE (what draws it); `_experiment` does the rest for
all of them. Any other command module exports FLAGS (dataclasses), `main(args)`,
SUMMARY and DESCRIPTION. train and eval are defined here. A command imports
only its own module; the list of commands reads each SUMMARY, a string
literal, from the module's source, so `performer --help` imports no jax.
"""

import argparse
import importlib
import importlib.metadata
import json
import os
import signal
import sys
import threading

from performer import declared, flags
from performer.errors import UserError

# Subcommands in the order of a study: data, training, measurements, then plans and figures.
DATA = ("performer.data.trembl", "performer.data.pfam", "performer.data.pg19", "performer.data.mqar")
DATA_COMMANDS = ("prepare-trembl", "label-pfam", "prepare-pg19", "prepare-mqar")
EXPERIMENTS = ("approx_error", "lemma2", "speed", "throughput", "error_propagation",
               "attention_maps", "aa_similarity", "recall_rows")
OTHERS = ("performer.plans.command", "performer.figures", "performer.plans.archive")
OTHER_COMMANDS = ("reproduce", "figure", "archive")
TRAIN_SUMMARY = "train a language model from gin configs (resumes a workdir)"
TRAIN_DESCRIPTION = (
    "Trains the model the gin files describe (see gin/ and gin/mini/). TensorBoard events, "
    "metrics.jsonl, checkpoints and the operative config go to --workdir; running again on the "
    "same workdir resumes from its latest checkpoint. Ctrl-C saves a checkpoint after the "
    "current step, then stops.")
EVAL_SUMMARY = "evaluate a trained workdir on a split (writes eval_SPLIT.json)"
EVAL_DESCRIPTION = (
    "Restores the latest checkpoint of --workdir and reports loss, accuracy, perplexity and bits "
    "per token on --split (per token; PG-19 adds word_perplexity); for protein data also the "
    "empirical amino-acid frequency baseline (Table 2). Writes --workdir/eval_SPLIT.json, one "
    "file per split.")


def _experiment(module, args):
  """What every experiment command does: build its config, run and write, report, hint."""
  from performer.experiments import results  # pylint: disable=import-outside-toplevel
  given = {}
  if getattr(module, "GIN", False):
    from performer import configurables  # pylint: disable=import-outside-toplevel
    configurables.parse(args.gin, args.gin_param)
    configurables.check_names_a_model()
    given["run"] = configurables.resolve().to_json()
  cfg = flags.build(module.CONFIG, args, **given)
  result, seconds = results.main(module, cfg, args.out)
  print("\n".join(module.report(cfg, result)))
  arrays = f" and {results.arrays_path(args.out)}" if result.arrays is not None else ""
  hint = (f"; draw it with: {_program()} figure {module.FIGURE} --input {args.out}"
          if module.FIGURE else "")
  print(f"wrote {args.out}{arrays} in {seconds:.0f} s{hint}")


def _train(args):
  from performer import configurables  # pylint: disable=import-outside-toplevel
  from performer.train import distributed, loop  # pylint: disable=import-outside-toplevel
  configurables.parse(args.gin, args.gin_param)  # UserError names a bad file or binding
  configurables.check_names_a_model()
  loop.check_workdir(args.workdir)
  distributed.initialize(args.coordinator, args.num_processes, args.process_id,
                         args.init_timeout)
  cfg = configurables.resolve()
  distributed.say(f"process {_processes()}; workdir {args.workdir}")
  m = cfg.model
  distributed.say(f"model: ({'U' if m.causal else 'B'}) {m.attention}, {m.num_layers} layers, "
                  f"d_model {m.d_model}, {m.num_heads} heads, L {cfg.data.seq_len}, {m.dtype}; "
                  f"data {cfg.data.path} ({cfg.data.task})")
  valid = loop.run(cfg, args.workdir, records={"config.gin": configurables.operative_config()})
  if valid:
    distributed.say("valid: " + ", ".join(f"{k} {v:.4g}" for k, v in valid.items()))


def _eval(args):
  import jax  # pylint: disable=import-outside-toplevel
  from performer.train import distributed, evaluate  # pylint: disable=import-outside-toplevel
  try:
    splits = flags.split(args.split)
  except argparse.ArgumentTypeError as e:
    raise UserError(f"--split: {e}") from None
  if not splits or "train" in splits:  # any other name: the dataset says whether it has it
    raise UserError(f"--split: '{args.split}' names no evaluation split (valid, test, ood, or "
                    "an MQAR task's test_shuffled and test_kv<n>)")
  evaluate.check_mask_draws(args.mask_draws)  # before joining the other processes
  distributed.initialize(args.coordinator, args.num_processes, args.process_id,
                         args.init_timeout)
  results = evaluate.run_splits(args.workdir, splits, mask_draws=args.mask_draws)
  if jax.process_index() == 0:
    print(json.dumps(results[0] if len(results) == 1 else results, indent=1, sort_keys=True))


def _processes():
  import jax  # pylint: disable=import-outside-toplevel
  return f"{jax.process_index() + 1} of {jax.process_count()}, {jax.device_count()} device(s)"


def _program():
  """How the user called us, for "draw it with" hints: sys.argv[0] if it is the performer script."""
  return sys.argv[0] if os.path.basename(sys.argv[0]) == "performer" else "performer"


class _Formatter(argparse.HelpFormatter):
  """Wraps text as usual, but keeps the lines of a text that has several (the figure list)."""

  def _fill_text(self, text, width, indent):
    if "\n" in text:
      return "".join(indent + line for line in text.splitlines(keepends=True))
    return super()._fill_text(text, width, indent)


def _texts(where):
  module = importlib.import_module(where)
  return module.SUMMARY, module.DESCRIPTION


def _summary(where):
  """The SUMMARY of module `where` (performer.x.y), read from its source without importing it or
  its packages (performer.plans imports jax, which takes seconds)."""
  base = os.path.join(os.path.dirname(os.path.abspath(__file__)), *where.split(".")[1:])
  source = base + ".py" if os.path.isfile(base + ".py") else os.path.join(base, "__init__.py")
  return declared.constants(source, ("SUMMARY",))["SUMMARY"]


def _summaries():
  """{command: its one-line help}, importing no command module."""
  return {**{name: _summary(where) for name, where in zip(DATA_COMMANDS, DATA)},
          "train": TRAIN_SUMMARY, "eval": EVAL_SUMMARY,
          **{name.replace("_", "-"): _summary("performer.experiments." + name)
             for name in EXPERIMENTS},
          **{name: _summary(where) for name, where in zip(OTHER_COMMANDS, OTHERS)}}


def _command(parser, where):
  """A command module's flags (FLAGS) and its main(args)."""
  module = importlib.import_module(where)
  for cls in module.FLAGS:
    flags.add(parser, cls)
  parser.set_defaults(func=module.main)


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
  summaries = _summaries() if only == "" else {}
  epilog = None
  if not only:
    from performer import figures  # pylint: disable=import-outside-toplevel
    epilog = "figures and tables (performer figure NAME):\n" + figures.listing()
  parser = argparse.ArgumentParser(
      prog="performer", formatter_class=_Formatter,
      description="Reproduce 'Rethinking Attention with Performers' (Choromanski et al., "
                  "ICLR 2021): data preparation, training, FAVOR+ measurements and figures.",
      epilog=epilog)
  parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
  sub = parser.subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

  def add(name, summary, description, **kw):
    return sub.add_parser(name, help=summary, description=description, formatter_class=_Formatter,
                          **kw)

  def named(name):
    """Names a command not built here (with its summary when the list is printed)."""
    sub.add_parser(name, **({"help": summaries[name]} if name in summaries else {}))

  for name, where in zip(DATA_COMMANDS, DATA):
    if wanted(name):
      _command(add(name, *_texts(where)), where)
    else:
      named(name)
  if wanted("train"):
    from performer import configurables  # pylint: disable=import-outside-toplevel
    from performer.train import distributed  # pylint: disable=import-outside-toplevel
    p = add("train", TRAIN_SUMMARY, TRAIN_DESCRIPTION)
    flags.add(p, configurables.GinFlags)
    p.add_argument("--workdir", required=True, type=flags.folder,
                   help="folder for logs, checkpoints and results")
    flags.add(p, distributed.ClusterFlags)
    p.set_defaults(func=_train)
  else:
    named("train")
  if wanted("eval"):
    from performer.train import distributed, evaluate  # pylint: disable=import-outside-toplevel
    p = add("eval", EVAL_SUMMARY, EVAL_DESCRIPTION)
    p.add_argument("--workdir", required=True, type=flags.folder,
                   help="a `performer train` workdir")
    p.add_argument("--split", default="test",
                   help="valid, test or ood (an MQAR task also test_shuffled, test_kv<n>), or "
                        "several comma-separated (test,ood: one restore and compile for both) "
                        "(default test)")
    p.add_argument("--mask-draws", type=int, default=evaluate.MASK_DRAWS, metavar="N",
                   help="(B) models: score N independent draws of the masks, summed, for a "
                        "smaller sampling error; (U) models have none; 1 to "
                        f"{evaluate.MAX_MASK_DRAWS} (default {evaluate.MASK_DRAWS}; "
                        "train/evaluate.py says why)")
    flags.add(p, distributed.ClusterFlags)
    p.set_defaults(func=_eval)
  else:
    named("eval")
  for name in EXPERIMENTS:
    command = name.replace("_", "-")
    if not wanted(command):
      named(command)
      continue
    module = importlib.import_module("performer.experiments." + name)
    p = add(command, module.SUMMARY, module.DESCRIPTION)
    if getattr(module, "GIN", False):
      from performer import configurables  # pylint: disable=import-outside-toplevel
      flags.add(p, configurables.GinFlags)
    flags.add(p, module.CONFIG)
    p.add_argument("--out", default=module.OUT, help=f"result JSON (default {module.OUT})")
    p.set_defaults(func=lambda args, m=module: _experiment(m, args))
  epilogs = {"reproduce": lambda m: m.epilog(),
             "figure": lambda m: "figures and tables:\n" + m.listing(), "archive": lambda m: None}
  for name, where in zip(OTHER_COMMANDS, OTHERS):
    if not wanted(name):
      named(name)
      continue
    _command(add(name, *_texts(where), epilog=epilogs[name](importlib.import_module(where))),
             where)
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
  return {*DATA_COMMANDS, "train", "eval", *(n.replace("_", "-") for n in EXPERIMENTS),
          *OTHER_COMMANDS}


def _named(argv):
  """The command argv names (its first word that is not an option), or None."""
  return next((a for a in argv if not a.startswith("-")), None)


def main(argv=None):
  """Entry point of the `performer` console script; returns the exit status."""
  argv = sys.argv[1:] if argv is None else argv
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
  try:
    return args.func(args) or 0
  except UserError as e:
    print(f"performer {args.command}: error: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt:
    print(f"performer {args.command}: interrupted", file=sys.stderr)
    return 130
  finally:
    for s, handler in previous.items():
      signal.signal(s, handler)


def _interrupt(signum, frame):
  del signum, frame
  raise KeyboardInterrupt


if __name__ == "__main__":
  sys.exit(main())
