"""Figures and tables: each reads result files or run folders and writes; none recomputes anything.

`FIGURES` maps a figure name (as given to `performer figure NAME`) to the
module that renders it and `SUMMARIES` to its one-line help. A figure of
`RUNS` reads `performer train` run folders, `render(run_dirs, out_path)`;
any other reads one input, `render(input_path, out_path)`, whose default
`INPUTS` gives: where the producing command's own `--out` default writes
(runs/, never the committed results/). The tables (`TABLES`) write
NAME.md and NAME.csv.
"""

import dataclasses
import importlib
import os

from performer.errors import UserError
from performer.flags import flag, folder

FIGURES = {
    "aa-similarity": "performer.figures.aa_similarity",  # paper Fig. 13 (App. C.4)
    "attention-maps": "performer.figures.attention_maps",  # paper Figs. 10-11 (App. C.4)
    "backward-compat": "performer.figures.backward_compat",  # paper Fig. 5
    "claims": "performer.figures.claims",  # Sec. 4.3, Fig. 6, Table 2
    "curves": "performer.figures.curves",  # paper Fig. 6
    "error-propagation": "performer.figures.error_propagation",  # paper Fig. 14 (App. D.1)
    "kernels": "performer.figures.kernels",  # paper Fig. 16 (App. D.3)
    "lemma2": "performer.figures.lemma2",  # paper Fig. 2 (Lemma 2)
    "mse-vs-m": "performer.figures.mse_vs_m",  # paper Fig. 4
    "recall": "performer.figures.recall",  # associative recall (MQAR), beyond the paper
    "recall-lr": "performer.figures.recall_lr",  # the recall study's learning rates
    "redraw": "performer.figures.redraw",  # paper Fig. 15 left and middle (App. D.2)
    "speed": "performer.figures.speed",  # paper Fig. 3
    "table1": "performer.figures.table1",  # paper Table 1 (App. C.1)
    "table2": "performer.figures.table2",  # paper Table 2 (App. C.3)
}

SUMMARIES = {
    "aa-similarity": "Fig. 13 amino-acid similarity from attention beside BLOSUM62 (--input JSON)",
    "attention-maps": "Figs. 10-11 a protein's attention maps and a two-head zoom (--input JSON)",
    "backward-compat": "Fig. 5 a Transformer's weights fine-tuned as Performers (--runs)",
    "claims": "the paper's protein claims with verdicts, from run folders (--runs)",
    "curves": "Fig. 6 train/validation curves of --metric against step (--runs)",
    "error-propagation": "Fig. 14 Transformer vs FAVOR+ error against layer (--input JSON)",
    "kernels": "Fig. 16 accuracy of generalized-attention kernels, log-log, NaN stops (--runs)",
    "lemma2": "Fig. 2 MSE ratio r of trig to positive features (--input lemma2 JSON)",
    "mse-vs-m": "Fig. 4 MSE of FAVOR attention against m (--input approx-error JSON)",
    "recall": "MQAR recall accuracy against state size and m, with verdicts (--runs)",
    "recall-lr": "the recall study's learning rates chosen on valid (--runs)",
    "redraw": "Fig. 15 softmax features with/without redrawing; softmax vs ReLU (--runs)",
    "speed": "Fig. 3 time and memory against L (--input speed JSON)",
    "table1": "Table 1 TrEMBL split statistics beside the paper's (--input dataset folder)",
    "table2": "Table 2 test/OOD accuracy and perplexity beside the paper's (--runs)",
}

INPUTS = {
    "aa-similarity": "runs/aa_similarity.json",
    "attention-maps": "runs/attention_maps.json",
    "error-propagation": "runs/error_propagation.json",
    "lemma2": "runs/lemma2.json",
    "mse-vs-m": "runs/approx_error.json",
    "speed": "runs/speed.json",
    "table1": "runs/data/trembl-sample",  # prepare-trembl --sample
}

RUNS = frozenset({"backward-compat", "claims", "curves", "kernels", "recall", "recall-lr",
                  "redraw", "table2"})
# A runs figure's file in the first run's parent folder, when not <name>.png / <name>.md.
RUN_FILES = {"curves": "fig6_{metric}.png", "backward-compat": "fig5_backward_compat.png",
             "kernels": "fig16_kernels.png", "redraw": "fig15_redraw.png",
             "recall-lr": "recall_lr.md"}
TABLES = frozenset({"claims", "recall-lr", "table1", "table2"})


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
      "aa-similarity) or prepare-trembl folder (table1) to read", shown="what the producing "
      "command writes by default, e.g. runs/approx_error.json, runs/data/trembl-sample")
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
