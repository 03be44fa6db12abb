"""Table 2: test and OOD accuracy / perplexity of protein runs, beside the paper's (App. C.3)."""

from performer.figures import paper, runs
from performer.figures.tables import Column, csv_path, write_table

NAME = "table2"  # performer figure NAME
SUMMARY = "Table 2 test/OOD accuracy and perplexity beside the paper's (--runs)"
READS = "runs"  # render(run folders, out)
TABLE = True

PCT, PPL = "{:.2f}", "{:.2f}"
COLUMNS = (Column("direction"), Column("model"), Column("seed"), Column("step", "{:,}"),
           Column("test accuracy %", PCT), Column("test perplexity", PPL),
           Column("OOD accuracy %", PCT), Column("OOD perplexity", PPL),
           Column("paper test accuracy %", PCT), Column("paper test perplexity", PPL),
           Column("paper OOD accuracy %", PCT), Column("paper OOD perplexity", PPL),
           Column("run"))
BASELINE = "Empirical baseline"


def _percent(value):
  return None if value is None else 100 * value


def _ours(values):
  """[test acc %, test ppl, OOD acc %, OOD ppl] from (split, accuracy, perplexity) getters."""
  return [_percent(values("test", "accuracy")), values("test", "perplexity"),
          _percent(values("ood", "accuracy")), values("ood", "perplexity")]


def _paper(direction, model):
  numbers = paper.TABLE2.get((direction, model), {})
  return [x for split in runs.EVAL_SPLITS for x in numbers.get(split, (None, None))]


def _baseline_row(direction, group):
  """A direction's baseline row, averaged over its runs' eval files; notes if they differ."""
  notes = []

  def values(split, key):
    found = [r.value(split, f"baseline_{key}") for r in group]
    found = [v for v in found if v is not None]
    if found and max(found) - min(found) > 1e-9 * max(1.0, abs(max(found))):
      notes.append(f"({direction}) {split} baseline {key} differs between runs "
                   f"({min(found):.4g} to {max(found):.4g}): the runs scored different "
                   "data or positions; the row shows their mean.")
    return runs.mean(found)

  files = sum(len(r.evals) for r in group)
  row = [f"({direction})", BASELINE, "-", None, *_ours(values), *_paper(direction, BASELINE),
         f"from {files} eval file" + ("s" if files != 1 else "")]
  return row, notes


def rows_and_notes(loaded):
  """The table's rows and notes for loaded Runs (load_runs)."""
  groups = runs.by_model(loaded)
  rows, notes = [], []
  for direction in runs.DIRECTIONS:
    in_direction = {label: group for (d, label), group in groups.items() if d == direction}
    if not in_direction:
      continue
    row, baseline_notes = _baseline_row(direction, [r for g in in_direction.values() for r in g])
    rows.append(row)
    notes += baseline_notes
    reported = [label for d, label in paper.TABLE2 if d == direction and label != BASELINE]
    for label in sorted(set(in_direction) | set(reported), key=runs.rank):
      group = in_direction.get(label)
      if group is None:  # the paper's model, not among ours
        rows.append([f"({direction})", label, "not run", None, None, None, None, None,
                     *_paper(direction, label), "-"])
        continue
      model = label + runs.tag(group[0])
      summary = len(group) == 1
      for run in group:
        rows.append([f"({direction})", model + (f" ({run.failed})" if run.failed else ""),
                     run.seed, run.step, *_ours(run.value),
                     *(_paper(direction, label) if summary else [None] * 4), run.name])
      if len(group) > 1:
        mean = lambda split, key, group=group: runs.mean(r.value(split, key) for r in group)
        rows.append([f"({direction})", model, f"mean over {len(group)} seeds", None, *_ours(mean),
                     *_paper(direction, label), "-"])
  return rows, notes


def render(run_dirs, out_path):
  """Reads run folders and writes out_path (Markdown) and its .csv twin.

  Returns:
    (markdown path, csv path).

  Raises:
    UserError: out_path is not a .md path or unwritable; any runs.load_runs error.
  """
  csv_path(out_path)  # a wrong --out fails before reading
  rows, notes = rows_and_notes(runs.load_runs(run_dirs))
  notes = [
      runs.SCORED,
      ("'-': the run has no eval_test.json / eval_ood.json (`performer eval --workdir RUN "
       "--split test|ood` writes them) or the paper reports no such number."),
      "Mean over seeds: arithmetic means of accuracy and perplexity over the seeds evaluated.",
      ("(extra): a model the paper did not train in this direction (Fig. 6 has Reformer (U) "
       "and Linformer (B) only); (control): identity attention, no mixing across positions, "
       "the scale gate of the claims."),
      ("Paper: Table 2 (App. C.3), 36 layers, L = 1024; its 'Performer (generalized)' is "
       "Performer-ReLU (App. A.4); its empirical baseline applies to both directions."),
      *notes]
  return write_table(out_path, "Table 2: protein language models, ours beside the paper's",
                     COLUMNS, rows, notes)
