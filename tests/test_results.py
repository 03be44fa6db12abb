"""results/: every committed table is what its figure command writes from committed files."""

import filecmp
import glob
import json
import math
import os
import re

import pytest

from performer import figures, plans
from testlib import ROOT

RESULTS = os.path.join(ROOT, "results")
DOCS = [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]


def _docs():
  """README.md and docs/*.md as one text, whitespace collapsed: where a quoted number may live."""
  return " ".join(" ".join(open(path).read().split()) for path in DOCS)


def _committed_table_jobs():
  """The mini plan's table jobs whose output is in results/ and whose run folders all are too
  (archives under results/runs/), as (name, args, out)."""
  ctx = plans.context("mini", runs=os.path.join(ROOT, "runs", "reproduce", "mini"),
                      results=RESULTS)
  found = []
  for job in plans.build(ctx):
    out = job.outputs[0] if job.outputs else ""
    if job.kind != "figure" or not out.endswith(".md") or not os.path.exists(out):
      continue
    args = list(job.command[2:job.command.index("--out")])
    if "--runs" in args and all(os.path.isdir(r) for r in args[args.index("--runs") + 1:]):
      found.append((job.name, args, out))
  return found


@pytest.mark.parametrize("name, args, out", _committed_table_jobs() or [
    pytest.param(None, None, None, marks=pytest.mark.skip("no archived study in results/ yet"))])
def test_committed_tables_are_what_the_plan_writes_from_the_archives(name, args, out, tmp_path):
  runs = args[args.index("--runs") + 1:]
  written = figures.figure(args[0], run_dirs=runs, out_path=str(tmp_path / "t.md"))
  for path in written:
    ext = os.path.splitext(path)[1]
    assert filecmp.cmp(path, os.path.splitext(out)[0] + ext, shallow=False), (name, ext)


@pytest.mark.parametrize("direction", ["u", "b"])
def test_the_fig14_claims_are_what_the_figure_writes_from_the_committed_json(direction, tmp_path):
  source = os.path.join(RESULTS, f"error_propagation_{direction}.json")
  out = str(tmp_path / "f.png")
  figures.figure("error-propagation", input_path=source, out_path=out)
  for ext in (".md", ".csv"):
    committed = os.path.join(RESULTS, f"fig14_error_propagation_{direction}_claims{ext}")
    assert filecmp.cmp(str(tmp_path / f"f_claims{ext}"), committed, shallow=False), ext


def test_every_archive_is_small_and_whole():
  for folder in glob.glob(os.path.join(RESULTS, "runs", "*")):
    files = os.listdir(folder)
    assert "config.json" in files and "metrics.jsonl" in files, folder
    assert not [f for f in files if f.startswith(".tmp")], folder
    size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(folder) for f in fs)
    limit = 12e6 if "checkpoints" in files else 400e3  # a checkpoint: see plans/archive.py
    assert size < limit, (folder, size)


def _table_lines(path):
  """(cells, is_header) of every markdown table row of a file; a header is the row above '| ---'."""
  with open(path) as f:
    lines = f.read().splitlines()
  return [([c.strip() for c in line.strip().strip("|").split("|")],
           i + 1 < len(lines) and lines[i + 1].startswith("| ---"))
          for i, line in enumerate(lines) if line.startswith("| ") and not line.startswith("| ---")]


def _verdict_rows(path):
  """(difference, interval, MDE, verdict) of the rows of every table with a verdict column."""
  out, header = [], None
  for cells, is_header in _table_lines(path):
    if is_header:  # a new table: a verdict table only if it has a verdict column
      header = cells if "verdict" in cells else None
      continue
    if header and len(cells) == len(header):
      row = dict(zip(header, cells))
      diff = next(v for k, v in row.items() if k.startswith("difference"))
      interval = next(v for k, v in row.items() if "interval" in k)
      mde = next(v for k, v in row.items() if k.startswith("MDE"))
      verdict = re.sub(r"[*]", "", row["verdict"]).split()[0]
      out.append((float(diff), interval.replace("+", ""), float(mde), verdict))
  return out


def test_the_verdicts_quoted_in_results_readme_are_those_of_the_committed_claim_tables():
  written = {row for path in glob.glob(os.path.join(RESULTS, "*claims.md"))
             for row in _verdict_rows(path)}
  quoted = _verdict_rows(os.path.join(RESULTS, "README.md"))
  assert len(quoted) >= 12  # Table 2's and Fig. 5's tables at least
  for row in quoted:
    assert row in written, row


def test_results_readme_says_better_and_worse_are_decided_on_holm_adjusted_p():
  # performer/verdicts.py decides better / worse on a Holm-adjusted p, not on the 95%
  # interval it reports: an interval that excludes 0 can stay inconclusive.
  text = " ".join(open(os.path.join(RESULTS, "README.md")).read().split())
  assert not re.search(r"interval excluding 0 for \"better\"|decided by an interval", text)
  assert 'each decided on its Holm-adjusted p < 0.05' in text


def test_the_orders_of_magnitude_positive_beats_trig_by_are_those_of_approx_error_json():
  with open(os.path.join(RESULTS, "approx_error.json")) as f:
    rows = [r for r in json.load(f)["rows"] if r["input_scale"] == 2 and r["scaling"] != "sqrt_d"]
  spans = {}
  for projection in ("orthogonal", "iid"):
    median = {(r["kernel"], r["m"]): r["mse_median"] for r in rows if r["projection"] == projection}
    orders = [math.log10(median["trig", m] / median["positive", m])
              for kernel, m in median if kernel == "positive"]
    spans[projection] = f"{min(orders):.1f}-{max(orders):.1f}"
  text = " ".join(open(os.path.join(RESULTS, "README.md")).read().split())
  assert (f"trig by {spans['orthogonal']} orders of magnitude at every m in median MSE with "
          f"orthogonal features ({spans['iid']} iid" in text)


def test_the_performers_growth_per_doubling_is_that_of_the_regular_model_table():
  text = open(os.path.join(RESULTS, "README.md")).read()
  table = text[text.index("| L | exact (B) | exact_blockwise (B) | performer_softmax (B)"):]
  lines = [l.split("|")[1:-1] for l in table.splitlines()[2:7]]
  seconds = lambda cell: (float(cell.split()[0]) / (1000 if "ms" in cell else 1)
                          if "s" in cell and "timeout" not in cell else None)
  growth = []
  for column in (3, 7):  # performer_softmax (B), (U)
    times = [seconds(row[column]) for row in lines]
    growth += [b / a for a, b in zip(times, times[1:]) if a and b]
  assert len(growth) == 5
  assert f"linear ({min(growth):.1f}-{max(growth):.1f}x per doubling)" in text


def test_inconclusive_claims_are_not_worded_as_findings():
  # Issue 41 item 15: text that states as found what the rule left inconclusive (or decided
  # for another quantity), and claims quoted without their scope.
  text = " ".join(open(os.path.join(RESULTS, "README.md")).read().split())
  readme = _docs()
  for phrase in ("not better than the Transformer in either direction",
                 "Only the (B) Linformer's plateau is decided",
                 "Trigonometric features lead to unstable training: reproduced",
                 "redrawing is worth 0.77 pp", "nor does its absence break it",
                 "does not lift them off the plateau. This agrees with",
                 "With them every Table 2 claim's MDE is under its delta",
                 "the models differ by less than a tenth of what attention gains"):
    assert phrase not in text, phrase
  assert "every Table 2 claim's MDE but the Linformer's (0.15 pp against delta 0.08)" in text
  assert "with attention-only layers and 2,000 steps \"FAVOR+ matches exact\" is contradicted" in readme
  assert "Table 2's own claim is \"ReLU is better\"" in text


def test_the_first_recall_studys_no_binding_ceiling_is_computed_not_assumed():
  # Issue 40: Zoology's query order leaks the key's rank; the ceiling quoted is the rule's.
  from performer.data import mqar  # pylint: disable=import-outside-toplevel
  with open(os.path.join(RESULTS, "runs", "recall_L64_kv4_exact_s0", "dataset.json")) as f:
    task = mqar.from_fingerprint(json.load(f)["fingerprint"])
  rules = mqar.ceilings(task, "test")
  text = " ".join(open(os.path.join(RESULTS, "README.md")).read().split())
  assert f"not 25% on this test set but {100 * rules['ceiling']:.2f}%" in text
  assert f"r-th context value scores {100 * rules['rank_order']:.2f}%" in text
  assert "25% plateau" not in text
  rows = open(os.path.join(RESULTS, "recall.md")).read()
  assert f"no-binding ceiling {100 * rules['ceiling']:.2f}%" in rows


def test_numbers_quoted_for_the_speed_targets_and_archives_are_those_of_their_files():
  # Issue 41 item 16.
  from performer.experiments import speed_targets  # pylint: disable=import-outside-toplevel
  text = " ".join(open(os.path.join(RESULTS, "README.md")).read().split())
  with open(os.path.join(RESULTS, "speed_targets_cpu.json")) as f:
    rows = json.load(f)["rows"]
  small, large = (next(r for r in rows if r["attention"] == "performer_softmax" and r["layer"]
                       and r["direction"] == "causal" and r["mode"] == "fwdbwd" and r["L"] == n)
                  for n in (4096, 32768))
  slope = (large["xla_bytes"] - small["xla_bytes"]) / (32768 - 4096)
  assert f"{slope:,.0f} bytes per token and a constant of " \
         f"{(small['xla_bytes'] - 4096 * slope) / 1e6:.1f} MB" in text
  assert f"add {(small['peak_bytes'] - small['xla_bytes']) / 1e6:.1f} and " \
         f"{(large['peak_bytes'] - large['xla_bytes']) / 1e6:.1f} MB over the plan" in text
  assert f"{(large['peak_bytes'] - small['peak_bytes']) / (32768 - 4096):,.0f} bytes per token" in text
  with open(os.path.join(RESULTS, "speed_regular_cpu.json")) as f:
    regular = json.load(f)["rows"]
  crossing = speed_targets.crossover(regular, config="regular", layer=False, direction="bidirectional",
                             mode="fwdbwd")
  assert f"(`speed_regular_cpu.json`, another run) crosses at {crossing:,}" in text
  readme = _docs()
  fig6 = len(glob.glob(os.path.join(RESULTS, "runs", "[ub]_*")))
  assert f"({fig6} runs archived in results/runs/;" in readme
  assert "`recall`, `recall_conv`" in readme and "`data`, `archive`;" in readme


def test_the_texts_give_dates_and_runs_not_how_the_work_was_organised():
  # Issue 41 item 18: sessions and issues are how the work was organised, not what ran.
  for path in (*DOCS, os.path.join(RESULTS, "README.md")):
    text = " ".join(open(path).read().split())
    assert not re.search(r"\bsessions?\b|\bthe issue\b|issue's|issue \d+", text, re.I), path


def test_the_baselines_and_appendix_counts_quoted_are_those_of_the_files():
  # The trial of 2026-12-05: a (B) OOD baseline and the appendix's test baseline and run count
  # differed from table2.md and the archives.
  text = " ".join(open(os.path.join(RESULTS, "README.md")).read().split())
  table = {}
  for cells, _ in _table_lines(os.path.join(RESULTS, "table2.md")):
    if cells[1] == "Empirical baseline":
      table[cells[0]] = (cells[4], cells[6])  # test, OOD accuracy %
  row = f"| empirical baseline | {' | '.join(table['(U)'] + table['(B)'])} |"
  assert row in text
  appendix_b = [json.load(open(path))["baseline_accuracy"]
                for path in glob.glob(os.path.join(RESULTS, "runs", "fig*", "eval_test.json"))
                if not json.load(open(os.path.join(os.path.dirname(path), "config.json")))
                ["model"]["causal"]]
  assert f"9.71% (U) and {100 * sum(appendix_b) / len(appendix_b):.2f}% (B)" in text
  readme = _docs()
  counts = {n: len(glob.glob(os.path.join(RESULTS, "runs", f"fig{n}_*"))) for n in (5, 7, 15, 16)}
  assert (f"({sum(counts.values())} training runs archived: Fig. 5 {counts[5]}, Fig. 7 "
          f"{counts[7]}, Fig. 15 {counts[15]}, Fig. 16 {counts[16]};") in readme


def test_no_measurement_stands_in_both_the_docs_and_results_readme():
  # Issue 42: every number lives in results/README.md; README.md and docs/ link to it. A number
  # with a unit found in both is a copy that goes stale, but for these coincidences:
  same_by_chance = {"2.80 s": "docs/data.md's zlib time; results' a model step",
                    "4 MiB": "favor.FORMS' batch_bytes, a setting",
                    "55 ms": "docs/training.md's simulated devices; results' a layer"}
  unit = re.compile(r"\b\d[\d,]*\.?\d* ?(?:ms|GiB|MiB|MB|GB|GFLOP/s|TFLOP/s)\b"
                    r"|\b\d[\d,]*\.\d+ ?(?:s|x|%)(?!\w)|\b\d{1,3}(?:,\d{3})+ ?s\b")
  measured = set(unit.findall(open(os.path.join(RESULTS, "README.md")).read()))
  copies = [(os.path.relpath(path, ROOT), number) for path in DOCS
            for number in unit.findall(open(path).read())
            if number in measured and number not in same_by_chance]
  assert not copies
