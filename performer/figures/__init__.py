"""Figures and tables: each reads result files or run folders and writes; none recomputes anything.

Figure modules declare NAME, SUMMARY, READS, TABLE, OUT, INPUT: read from source, never imported."""

import dataclasses
import glob
import importlib
import os

from performer import declared
from performer.errors import UserError
from performer.flags import flag, folder

_HERE = os.path.dirname(os.path.abspath(__file__))


def _declared():
  """{figure name: its module's declarations}, read from the sources (no import: matplotlib)."""
  out = {}
  for path in sorted(glob.glob(os.path.join(_HERE, "[!_]*.py"))):  # not this module
    found = declared.constants(path, ("NAME", "SUMMARY", "READS", "OUT", "TABLE", "INPUT"))
    if "NAME" in found:
      module = os.path.splitext(os.path.basename(path))[0]
      out[found["NAME"]] = {"module": f"performer.figures.{module}", **found}
  return out


def _produced():
  """{figure name: the default --out of the command whose FIGURE it is} (the experiments)."""
  out = {}
  for path in glob.glob(os.path.join(os.path.dirname(_HERE), "experiments", "*.py")):
    found = declared.constants(path, ("FIGURE", "OUT"))
    if found.get("FIGURE"):
      out[found["FIGURE"]] = found["OUT"]
  return out


_FIGURES = _declared()
FIGURES = {name: d["module"] for name, d in _FIGURES.items()}
SUMMARIES = {name: d["SUMMARY"] for name, d in _FIGURES.items()}
RUNS = frozenset(name for name, d in _FIGURES.items() if d.get("READS") == "runs")
# A runs figure's file in the first run's parent folder, when not <name>.png / <name>.md.
RUN_FILES = {name: d["OUT"] for name, d in _FIGURES.items() if "OUT" in d}
TABLES = frozenset(name for name, d in _FIGURES.items() if d.get("TABLE"))
INPUTS = {**_produced(), **{name: d["INPUT"] for name, d in _FIGURES.items() if "INPUT" in d}}


NAME = "figure"  # the command
SUMMARY = "draw a paper figure or table from result files or runs"
DESCRIPTION = ("Renders a figure or table from a result file (--input) or from `performer train` "
               "run folders (--runs) without recomputing anything.")


@dataclasses.dataclass(frozen=True)
class Flags:
  """The flags of `performer figure`."""
  name: str = flag(help="which figure or table (listed below)", positional=True,
                   choices=sorted(FIGURES), metavar="NAME")
  input: str | None = flag(
      None, "result JSON (mse-vs-m, speed, lemma2, error-propagation, attention-maps, "
      "aa-similarity) or prepare-trembl folder (table1, aa-distribution) to read",
      shown="what the producing command writes by default, e.g. runs/approx_error.json, "
      "runs/data/trembl-sample")
  runs: tuple[str, ...] | None = flag(
      None, "run folders (`performer train` workdirs) for table2, claims, curves, "
      "backward-compat, kernels, redraw, recall, recall-lr (recall runs record their task, row, "
      "lr and seed in TrainConfig.settings: docs/reproducing.md, 'Associative recall')", nargs="+",
      metavar="RUN", parse=folder)
  metric: str | None = flag(None, "what curves draws against the step", shown="accuracy, in %",
                            metavar="{accuracy,perplexity,loss}")
  out: str | None = flag(
      None, "output image (its extension names the format) or, for a table, NAME.md (NAME.csv "
      "is written beside it)", shown="beside the input, <input stem>_<name>.png or .md "
      "(runs/speed_speed.png), or in the first run's parent folder, <name>.md or "
      "fig6_<metric>.png (fig16_kernels.png, fig15_redraw.png, recall.png, recall_lr.md)")


FLAGS = (Flags,)


def main(args):
  """`performer figure` on parsed flags: renders, then names the files written."""
  if args.out is not None and not args.out.strip():  # not the default: the user named nothing
    raise UserError("--out: the output path is empty")
  for path in figure(args.name, input_path=args.input, run_dirs=args.runs, out_path=args.out,
                     metric=args.metric):
    print(f"wrote {path}")


def listing():
  """One line per figure, '  name  summary', for the command's help."""
  width = max(map(len, FIGURES))
  return "\n".join(f"  {name:<{width}}  {SUMMARIES[name]}" for name in sorted(FIGURES))


def epilog():
  """The figures and tables, for `performer figure --help`."""
  return "figures and tables:\n" + listing()


def default_out(name, source, metric="accuracy"):
  """Where figure `name` goes without --out: beside its input, never into results/.

  An input figure writes <input stem>_<figure>.png (runs/a.json ->
  runs/a_mse_vs_m.png; a table .md, a dataset folder keeping its whole
  name): the figure name keeps a re-render off a committed figure. A runs
  figure writes into the first run's parent folder: its RUN_FILES name,
  else <name>.png, or <name>.md for a table.
  """
  ext = ".md" if name in TABLES else ".png"
  if name in RUNS:
    parent = os.path.dirname(os.path.normpath(source[0]))
    return os.path.join(parent, RUN_FILES.get(name, name + ext).format(metric=metric))
  path = os.path.normpath(source)
  stem = path if os.path.isdir(path) else os.path.splitext(path)[0]
  return f"{stem}_{name.replace('-', '_')}{ext}"


def render(name, source, out_path, **options):
  """Renders figure `name` (a key of FIGURES) from source into out_path.

  source is a list of run folders for a figure of RUNS, else one input path;
  options go to the module (curves: metric). Returns what the module
  returns: out_path, or (markdown, csv) paths for a table.
  """
  return importlib.import_module(FIGURES[name]).render(source, out_path, **options)


def figure(name, *, input_path=None, run_dirs=None, out_path=None, metric=None):
  """`performer figure`: checks the flags fit `name`, fills defaults, renders.

  Returns:
    The paths written, as a tuple.

  Raises:
    UserError: --runs for an input figure or --input for a runs figure, no
      run folders, --metric for a figure other than curves, or any error of
      the figure's render.
  """
  if name in RUNS:
    if input_path is not None:
      raise UserError(f"{name} reads run folders: give --runs RUN [RUN ...], not --input")
    if not run_dirs:
      raise UserError(f"{name} needs run folders: --runs RUN [RUN ...]")
    source = list(run_dirs)
  else:
    if run_dirs:
      raise UserError(f"{name} reads one result file: give --input, not --runs")
    source = input_path or INPUTS[name]
  if metric is not None and name != "curves":
    raise UserError(f"--metric applies to curves only, not {name}")
  options = {"metric": metric or "accuracy"} if name == "curves" else {}
  if name == "curves":  # a bad metric fails before it names a default file
    importlib.import_module(FIGURES[name]).check_metric(options["metric"])
  out = out_path or default_out(name, source, **options)
  written = render(name, source, out, **options)
  return tuple(written) if isinstance(written, tuple) else (written or out,)
