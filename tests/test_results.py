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
PAGES = sorted(glob.glob(os.path.join(RESULTS, "pages", "*.md")))


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


def test_the_first_recall_studys_no_binding_ceiling_is_computed_not_assumed():
  # Zoology's query order leaks the key's rank; the ceiling the table gives is the rule's.
  from performer.data import mqar  # pylint: disable=import-outside-toplevel
  with open(os.path.join(RESULTS, "runs", "recall_L64_kv4_exact_s0", "dataset.json")) as f:
    task = mqar.from_fingerprint(json.load(f)["fingerprint"])
  rules = mqar.ceilings(task, "test")
  rows = open(os.path.join(RESULTS, "recall.md")).read()
  assert f"no-binding ceiling {100 * rules['ceiling']:.2f}%" in rows


def test_the_texts_give_dates_and_runs_not_how_the_work_was_organised():
  # Issue 41 item 18: sessions and issues are how the work was organised, not what ran.
  templates = glob.glob(os.path.join(RESULTS, "templates", "**", "*.j2"), recursive=True)
  for path in (*DOCS, os.path.join(RESULTS, "README.md"), *PAGES, *templates):
    text = " ".join(open(path).read().split())
    assert not re.search(r"\bsessions?\b|\bthe issue\b|issue's|issue \d+", text, re.I), path


def test_no_measurement_stands_in_both_the_docs_and_a_results_page():
  # Every measurement lives on a rendered page (results/pages/); README.md and docs/ link to it.
  # A number with a unit found in both is a copy that goes stale, but for these coincidences:
  same_by_chance = {"2.80 s": "docs/data.md's zlib time; results' a model step",
                    "4 MiB": "favor.FORMS' batch_bytes, a setting",
                    "55 ms": "docs/training.md's simulated devices; results' a layer"}
  unit = re.compile(r"\b\d[\d,]*\.?\d* ?(?:ms|GiB|MiB|MB|GB|GFLOP/s|TFLOP/s)\b"
                    r"|\b\d[\d,]*\.\d+ ?(?:s|x|%)(?!\w)|\b\d{1,3}(?:,\d{3})+ ?s\b")
  measured = {n for page in PAGES for n in unit.findall(open(page).read())}
  copies = [(os.path.relpath(path, ROOT), number) for path in DOCS
            for number in unit.findall(_outside_blocks(path))
            if number in measured and number not in same_by_chance]
  assert not copies


def _outside_blocks(path):
  """A document's text without its rendered blocks (those are read from files)."""
  text = open(path).read()
  return re.sub(r"<!-- begin (\w+): rendered.*?<!-- end \1 -->", "", text, flags=re.S)


def test_readme_holds_no_measurement_outside_its_rendered_findings():
  # README.md keeps no measurement that is not in a committed file: what was found is its
  # rendered block; the rest is how to run things.
  unit = re.compile(r"\b\d[\d,]*\.?\d* ?(?:ms|s|min|h|GiB|MiB|MB|GB|%|x|pp)(?!\w)")
  assert unit.findall(_outside_blocks(os.path.join(ROOT, "README.md"))) == []
