"""table1, table2 and claims: every printed number traced back to a hand-written fixture."""

import csv
import json
import re

import numpy as np
import pytest

from performer import cli, figures
from performer.errors import UserError
from performer.figures import claims, paper
from performer.figures import runs as runs_lib


def _table(path):
  """The Markdown table of path as a list of {header: cell} dicts."""
  lines = [line for line in path.read_text().splitlines()
           if line.startswith("| ") and not line.startswith("| ---")]
  split = lambda line: [c.strip().replace("\\|", "|")
                        for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
  header = split(lines[0])
  return [dict(zip(header, split(line))) for line in lines[1:]]


def _csv(path):
  with open(path, newline="") as f:
    return list(csv.DictReader(f))


# ---- table1 -----------------------------------------------------------------

STATS = {
    "single": {
        "train": {"count": 1234, "min": 3, "max": 5011, "mean": 300.5, "std": 120.25,
                  "median": 280.0},
        "valid": {"count": 61, "min": 10, "max": 900, "mean": 310.0, "std": 99.5, "median": 290.5},
        "test": {"count": 0},
        "all": {"count": 1295, "min": 3, "max": 5011, "mean": 301.0, "std": 119.0, "median": 281},
    },
    "single_clipped_to": 1024,
    "concat": {"train": {"count": 45, "length": 8192, "dropped_tail_tokens": 7},
               "valid": {"count": 2, "length": 8192, "dropped_tail_tokens": 5},
               "test": {"count": 0, "length": 8192, "dropped_tail_tokens": 3}},
    "ood": "no family mapping given (--families): no OOD split",
    "records_read": 1300, "records_kept": 1295, "duplicates_dropped": 5,
}


def _dataset(tmp_path, stats=STATS):
  folder = tmp_path / "ds"
  folder.mkdir()
  (folder / "stats.json").write_text(json.dumps(stats))
  return str(folder)


def test_table1_puts_ours_beside_the_paper(tmp_path):
  md, table_csv = figures.render("table1", _dataset(tmp_path), str(tmp_path / "t1.md"))
  rows = {(r["task"], r["split"], r["source"]): r for r in _table(tmp_path / "t1.md")}
  train = rows[("single", "train", "ours")]
  assert [train[k] for k in ("sequences / chunks", "min", "max", "mean", "std", "median")] == [
      "1,234", "3", "5,011", "300.50", "120.25", "280.00"]
  assert rows[("single", "valid", "ours")]["median"] == "290.50"
  assert rows[("single", "test", "ours")]["sequences / chunks"] == "0"
  assert rows[("single", "test", "ours")]["mean"] == "-"
  assert rows[("single", "train", "paper")]["sequences / chunks"] == "104,863,744"
  assert rows[("single", "ood", "paper")]["median"] == "200.00"
  # No OOD split: "-" and a note saying why, not a crash.
  assert set(rows[("single", "ood", "ours")].values()) == {"single", "ood", "ours", "-"}
  assert "no family mapping given" in (tmp_path / "t1.md").read_text()
  assert rows[("concat", "train", "ours")]["sequences / chunks"] == "45"
  assert rows[("concat", "train", "paper")]["sequences / chunks"] == "4,532,224"
  assert rows[("concat", "test", "paper")]["sequences / chunks"] == "-"
  # The CSV has the same rows, numbers unformatted, missing values empty.
  assert table_csv == str(tmp_path / "t1.csv") and md == str(tmp_path / "t1.md")
  by_key = {(r["task"], r["split"], r["source"]): r for r in _csv(table_csv)}
  assert by_key[("single", "train", "ours")]["sequences / chunks"] == "1234"
  assert by_key[("single", "train", "ours")]["std"] == "120.25"
  assert by_key[("single", "ood", "ours")]["mean"] == ""
  assert len(by_key) == len(rows)


def test_table1_shows_an_ood_split_when_present(tmp_path):
  stats = json.loads(json.dumps(STATS))
  stats["single"]["ood"] = {"count": 17, "min": 20, "max": 600, "mean": 250.0, "std": 80.0,
                            "median": 210.0}
  stats["ood"] = {"families_in_mapping": 40, "families_held_out": 2, "held_out": ["PF1", "PF2"]}
  figures.render("table1", _dataset(tmp_path, stats), str(tmp_path / "t1.md"))
  rows = {(r["task"], r["split"], r["source"]): r for r in _table(tmp_path / "t1.md")}
  assert rows[("single", "ood", "ours")]["sequences / chunks"] == "17"
  assert "2 of 40 families held out" in (tmp_path / "t1.md").read_text()


def test_table1_default_out_and_errors(tmp_path, monkeypatch):
  dataset = _dataset(tmp_path)
  monkeypatch.chdir(tmp_path)
  assert figures.figure("table1", input_path="ds/") == ("ds_table1.md", "ds_table1.csv")
  assert (tmp_path / "ds_table1.csv").exists()
  with pytest.raises(UserError, match="no such file"):
    figures.render("table1", str(tmp_path / "nothing"), str(tmp_path / "x.md"))
  with pytest.raises(UserError, match="give --out NAME.md"):
    figures.render("table1", dataset, str(tmp_path / "x.png"))
  (tmp_path / "pg").mkdir()
  (tmp_path / "pg" / "stats.json").write_text(json.dumps({"train": {"tokens": 5}}))
  with pytest.raises(UserError, match="prepare-trembl"):
    figures.render("table1", str(tmp_path / "pg"), str(tmp_path / "x.md"))
  assert not (tmp_path / "x.md").exists()


# ---- table2 -----------------------------------------------------------------

def test_table2_rows_means_baselines_and_paper(tmp_path, make_run):
  folders = [
      make_run("u_exact_0", "exact", causal=True, seed=0, test=(0.3012, 9.5), ood=(0.2001, 13.1)),
      make_run("u_exact_1", "exact", causal=True, seed=1, test=(0.3056, 9.3)),
      make_run("b_reformer", "reformer", causal=False, seed=3, test=(0.2543, 10.25),
               baseline=(0.0811, 18.0)),
      make_run("b_relu", "performer_relu", causal=False, seed=0),  # not evaluated yet
  ]
  figures.render("table2", folders, str(tmp_path / "t2.md"))
  rows = _table(tmp_path / "t2.md")
  find = lambda direction, model, seed: next(
      r for r in rows if (r["direction"], r["model"], r["seed"]) == (direction, model, seed))
  seed0 = find("(U)", "Transformer", "0")
  assert (seed0["test accuracy %"], seed0["test perplexity"]) == ("30.12", "9.50")
  assert (seed0["OOD accuracy %"], seed0["OOD perplexity"]) == ("20.01", "13.10")
  assert seed0["step"] == "20" and seed0["run"] == "u_exact_0"
  assert seed0["paper test accuracy %"] == "-"  # the paper sits on the mean row
  assert find("(U)", "Transformer", "1")["OOD accuracy %"] == "-"
  mean = find("(U)", "Transformer", "mean over 2 seeds")
  assert mean["test accuracy %"] == "30.34"  # (30.12 + 30.56) / 2
  assert mean["test perplexity"] == "9.40"
  assert mean["OOD accuracy %"] == "20.01"  # the one seed with an OOD eval
  assert (mean["paper test accuracy %"], mean["paper OOD perplexity"]) == ("30.80", "13.20")
  # Reformer (B) is an extra the paper did not train; its paper cells are "-".
  reformer = find("(B)", "Reformer (extra)", "3")
  assert reformer["test accuracy %"] == "25.43" and reformer["paper test accuracy %"] == "-"
  relu = find("(B)", "Performer-ReLU", "0")
  assert relu["test accuracy %"] == "-" and relu["paper test accuracy %"] == "36.09"
  # Baselines per direction, from the eval files; the paper's Table 2 beside them.
  base_u = find("(U)", "Empirical baseline", "-")
  assert (base_u["test accuracy %"], base_u["test perplexity"]) == ("9.50", "17.50")
  assert (base_u["paper test accuracy %"], base_u["paper OOD accuracy %"]) == ("9.92", "9.07")
  assert find("(B)", "Empirical baseline", "-")["test accuracy %"] == "8.11"
  # Paper models no run covers get a row of their own.
  assert find("(U)", "Performer-ReLU", "not run")["paper test perplexity"] == "9.17"
  assert find("(B)", "Performer-softmax", "not run")["paper OOD accuracy %"] == "23.48"
  # (U) rows come first, the baseline leading each direction.
  assert [r["direction"] for r in rows] == sorted((r["direction"] for r in rows), reverse=True)
  assert rows[0]["model"] == "Empirical baseline"
  text = (tmp_path / "t2.md").read_text()
  assert "masked positions" in text and "all positions" in text
  by_run = {r["run"]: r for r in _csv(tmp_path / "t2.csv")}
  assert float(by_run["u_exact_0"]["test accuracy %"]) == pytest.approx(30.12)
  assert by_run["u_exact_1"]["OOD accuracy %"] == ""


def test_table2_extra_marks_linformer_u(tmp_path, make_run):
  figures.render("table2", [make_run("l", "linformer", causal=True, test=(0.2, 11.0))],
                 str(tmp_path / "t2.md"))
  assert any(r["model"] == "Linformer (extra)" for r in _table(tmp_path / "t2.md"))


def test_bad_run_folders_fail_with_one_line_naming_the_path(tmp_path, make_run, capsys):
  empty = tmp_path / "empty"
  empty.mkdir()
  no_metrics = make_run("nm", "exact", causal=True)
  (tmp_path / "runs" / "nm" / "metrics.jsonl").unlink()
  percent = make_run("pc", "exact", causal=True, test=(30.8, 9.0))  # a percentage, not a fraction
  # trained on after its eval (a resume): the eval's numbers are not the run's
  stale = make_run("st", "exact", causal=True, test=(0.3, 9.0),
                   metrics=[(20, "train", 0.3, 9.0, 2.2), (40, "train", 0.31, 8.9, 2.1)])
  cases = [(["--runs", stale], f"{stale}/eval_test.json is of step 20 but the run has logged "
                               "step 40: evaluate it again"),(["--runs", str(empty)], f"{empty}: no config.json"),
           (["--runs", percent], "eval_test.json: accuracy = 30.8 is not a fraction in [0, 1]"),
           (["--runs", no_metrics], f"{no_metrics}: no metrics.jsonl"),
           (["--runs", str(tmp_path / "missing")], "no such run folder"),
           (["--input", "x.json"], "give --runs RUN"),
           ([], "needs run folders")]
  for flags, message in cases:
    assert cli.main(["figure", "table2", *flags, "--out", str(tmp_path / "t.md")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
  good = make_run("good", "exact", causal=True, test=(0.3, 9.0))
  with pytest.raises(UserError, match="given twice"):
    figures.render("table2", [good, good + "/"], str(tmp_path / "t.md"))
  assert cli.main(["figure", "speed", "--runs", good]) == 2
  assert "give --input, not --runs" in capsys.readouterr().err
  assert cli.main(["figure", "table2", "--runs", good, "--metric", "loss"]) == 2
  assert "--metric applies to curves only" in capsys.readouterr().err
  assert not (tmp_path / "t.md").exists()


def test_runs_are_told_apart_by_their_recorded_settings_else_by_their_config(make_run):
  # Plan runs: the sweep values they recorded. Two feature seeds of one model are two points
  # (their configs differ only inside attention options the figure would otherwise compare).
  a = make_run("a", "performer_softmax", causal=True, settings={"feature_seed": 1})
  b = make_run("b", "performer_softmax", causal=True, settings={"feature_seed": 2})
  assert [r.setting("feature_seed", None) for r in runs_lib.load_runs([a, b])] == [1, 2]
  again = make_run("again", "performer_softmax", causal=True, settings={"feature_seed": 1})
  with pytest.raises(UserError, match=r'both are \(U\) Performer-softmax with recorded settings \{"feature_seed": 1\}'):
    runs_lib.load_runs([a, again])
  # Depth from the recorded `layers` (Fig. 7), else from the config.
  deep = make_run("deep", "exact", causal=True, settings={"layers": 3}, num_layers=3)
  flat = make_run("flat", "exact", causal=True, settings={"layers": 1}, num_layers=1)
  assert [r.label for r in runs_lib.load_runs([deep, flat])] == [
      "Transformer 3-layer", "Transformer 1-layer"]
  # Runs trained by hand: by their config; the same options and seed are one point.
  h1 = make_run("h1", "exact", causal=True, seed=0)
  h2 = make_run("h2", "exact", causal=True, seed=1)
  assert len(runs_lib.load_runs([h1, h2])) == 2
  with pytest.raises(UserError, match="both are .U. Transformer with seed 0; give one run per"):
    runs_lib.load_runs([h1, make_run("h3", "exact", causal=True, seed=0)])


def test_table2_cli_default_out_in_the_runs_parent(tmp_path, make_run, capsys):
  good = make_run("good", "exact", causal=True, test=(0.3, 9.0))
  assert cli.main(["figure", "table2", "--runs", good]) == 0
  out = capsys.readouterr().out
  assert f"wrote {tmp_path / 'runs' / 'table2.md'}" in out
  assert (tmp_path / "runs" / "table2.csv").exists()


# ---- claims -----------------------------------------------------------------

SEQUENCES, TOKENS = 200, 100


def _model_runs(make_run, rng, attention, causal, accuracy, seeds=3, more=None, offsets=None,
                **kw):
  """Run folders of one model: per-sequence test evals around `accuracy` (seed sd 0.1 pp, or
  the given per-seed `offsets`); `more`: settings recorded beyond direction, attention and seed
  (an appendix study's)."""
  d = "u" if causal else "b"
  folders = []
  for seed in range(seeds):
    offset = rng.normal(0, 0.001) if offsets is None else offsets[seed]
    p = np.clip(accuracy + offset + rng.normal(0, 0.02, SEQUENCES), 0, 1)
    correct = rng.binomial(TOKENS, p).astype(np.float32)
    acc = float(correct.sum() / (TOKENS * SEQUENCES))
    name = "_".join([d, attention, *map(str, (more or {}).values()), str(seed)])
    folder = make_run(name, attention, causal=causal, seed=seed,
                      test=(acc, 9.0), ood=(acc - 0.05, 12.0),
                      settings={"direction": d, "attention": attention, "seed": seed,
                                **(more or {})}, **kw)
    np.savez(f"{folder}/eval_test_sequences.npz", ids=np.arange(SEQUENCES),
             correct_sum=correct, tokens=np.full(SEQUENCES, TOKENS, np.float32),
             loss_sum=np.zeros(SEQUENCES, np.float32))
    record = json.load(open(f"{folder}/eval_test.json"))
    record["sequences_file"] = "eval_test_sequences.npz"
    json.dump(record, open(f"{folder}/eval_test.json", "w"))
    folders.append(folder)
  return folders


def _decided(tmp_path, folders):
  figures.render("claims", folders, str(tmp_path / "claims.md"))
  return {r["claim"]: r for r in _table(tmp_path / "claims.md")}, (tmp_path / "claims.md").read_text()


def test_claims_follow_the_verdict_rule_where_attention_matters(tmp_path, make_run):
  rng = np.random.default_rng(0)
  models = {("exact", True): 0.30, ("identity", True): 0.10, ("performer_softmax", True): 0.30,
            ("performer_relu", True): 0.34, ("reformer", True): 0.25}
  folders = [f for (att, causal), acc in models.items()
             for f in _model_runs(make_run, rng, att, causal, acc)]
  rows, text = _decided(tmp_path, folders)
  # delta = 0.1 x exact's 20 pp gain over the control = 2 pp; the design's MDE is ~1.3 pp.
  assert rows["U: softmax matches Transformer"]["verdict"] == "reproduced"
  assert rows["U: ReLU better than Transformer"]["verdict"] == "reproduced"
  assert rows["U: Reformer worse than Transformer"]["verdict"] == "reproduced"
  assert float(rows["U: softmax matches Transformer"]["delta (pp)"]) == pytest.approx(2.0, abs=0.2)
  low, high = (float(x) for x in rows["U: ReLU better than Transformer"]["95% interval (pp)"]
               .split(" .. "))
  assert low < 4.0 < high and rows["U: ReLU better than Transformer"]["seeds"] == "3/3"
  # (B) was not run: not tested, with the reason; OOD is described, not judged.
  assert rows["B: softmax matches Transformer"]["verdict"] == "not tested"
  assert "identity control" in rows["B: softmax matches Transformer"]["why"]
  assert "Scale gate (U)" in text and "passed" in text and "OOD (reported, not judged" in text
  # the .json twin the fig6 plan reads: the gate, and each claim's verdict
  record = json.load(open(tmp_path / "claims.json"))
  assert list(record["gates"]) == ["U"] and record["gates"]["U"]["passed"] is True
  assert record["gates"]["U"]["difference"] == pytest.approx(0.20, abs=0.01)
  assert record["gates"]["U"]["seeds"] == [3, 3]
  assert {c["id"]: c["verdict"] for c in record["claims"]}["U: ReLU better than Transformer"] \
      == "reproduced"


def test_the_paired_sensitivity_removes_what_a_seed_shares_across_models(tmp_path, make_run):
  # Seed j moves every model alike (its data order and masks): independent seeds see that
  # spread, paired seeds do not. The declared verdict stays; the sensitivity column differs.
  rng = np.random.default_rng(4)
  shared = [0.02, -0.015, 0.005, -0.01, 0.015]
  models = {"exact": 0.30, "identity": 0.10, "performer_relu": 0.315}
  folders = [f for att, acc in models.items()
             for f in _model_runs(make_run, rng, att, True, acc, seeds=5, offsets=shared)]
  rows, text = _decided(tmp_path, folders)
  relu = rows["U: ReLU better than Transformer"]
  assert relu["verdict"] == "inconclusive"
  assert relu["verdict with seeds paired (sensitivity)"].startswith("reproduced")
  assert "Sensitivity (not the declared rule)" in text
  record = json.load(open(tmp_path / "claims.json"))
  assert {c["id"]: c["verdict"] for c in record["paired_sensitivity"]}[
      "U: ReLU better than Transformer"] == "reproduced"


def test_without_a_gain_over_the_control_claims_are_not_testable(tmp_path, make_run):
  rng = np.random.default_rng(1)
  models = {("exact", True): 0.20, ("identity", True): 0.20, ("performer_softmax", True): 0.25}
  folders = [f for (att, causal), acc in models.items()
             for f in _model_runs(make_run, rng, att, causal, acc)]
  rows, text = _decided(tmp_path, folders)
  assert rows["U: softmax matches Transformer"]["verdict"] == "not testable at this scale"
  assert "failed" in text
  assert json.load(open(tmp_path / "claims.json"))["gates"]["U"]["passed"] is False


def test_appendix_families_are_decided_by_the_same_rule_on_their_own_groups(tmp_path, make_run):
  rng = np.random.default_rng(3)
  folders = [f for att, acc in (("exact", 0.30), ("identity", 0.10))
             for f in _model_runs(make_run, rng, att, False, acc)]
  # Fig. 16: the cosine kernel far below ReLU, two seeds each; Fig. 5: one seed per variant.
  for kernel, acc in (("trig", 0.15), ("relu", 0.31)):
    folders += _model_runs(make_run, rng, "performer_relu", False, acc, seeds=2,
                           more={"kernel": kernel})
  # App. D.3: ReLU without D^-1, three seeds at ReLU's accuracy (the on row has two) and tanh
  # without it far below; tanh with it was not run.
  folders += _model_runs(make_run, rng, "performer_relu", False, 0.31, seeds=3,
                         more={"kernel": "relu", "renormalize": False})
  folders += _model_runs(make_run, rng, "performer_relu", False, 0.20, seeds=2,
                         more={"kernel": "tanh", "renormalize": False})
  for attention, variant in (("performer_softmax", "positive"), ("exact", "exact")):
    folders += _model_runs(make_run, rng, attention, False, 0.30, seeds=1,
                           more={"source": "b_exact", "variant": variant})
  rows, text = _decided(tmp_path, folders)
  assert {r["family"] for r in rows.values()} == {"fig5", "fig16", "fig16_renormalize"}
  off = rows["B: relu without renormalization matches with"]
  assert off["verdict"] == "reproduced" and off["seeds"] == "3/2"
  assert float(off["delta (pp)"]) == pytest.approx(2, abs=0.1)  # a tenth of exact's 20 pp
  assert rows["B: tanh without renormalization matches with"]["why"] == (
      '(B) Performer-ReLU {"kernel": "tanh"} not run')
  assert rows["B: sigmoid without renormalization matches with"]["verdict"] == "not tested"
  assert rows["B: cosine kernel worse than ReLU"]["verdict"] == "reproduced"
  assert rows["B: cosine kernel worse than ReLU"]["seeds"] == "2/2"
  assert float(rows["B: cosine kernel worse than ReLU"]["difference (pp)"]) == pytest.approx(
      -16, abs=1)
  fig5 = rows["B: fine-tuned positive matches continued Transformer"]
  assert fig5["verdict"] == "inconclusive" and "needs >= 2 per group" in fig5["why"]
  assert rows["U: fine-tuned trig worse than positive"]["verdict"] == "not tested"


def test_runs_of_other_studies_are_not_pooled_as_seeds_and_steps_must_agree(tmp_path, make_run):
  rng = np.random.default_rng(2)
  models = {("exact", True): 0.30, ("identity", True): 0.20, ("performer_softmax", True): 0.30}
  folders = [f for (att, causal), acc in models.items()
             for f in _model_runs(make_run, rng, att, causal, acc, root=f"s_{att}")]
  other = make_run("fig15", "performer_softmax", causal=True, test=(0.3, 9.0),
                   settings={"feature_seed": 1, "schedule": "no_redraw"})
  rows, _ = _decided(tmp_path, folders + [other])
  assert rows["U: softmax matches Transformer"]["seeds"] == "3/3"  # the Fig. 15 run is not a seed
  # the Fig. 15 family is shown (one of its runs is given), its other group is missing
  assert rows["U: without redraw worse than with"]["verdict"] == "not tested"
  assert "Performer-softmax {\"schedule\": \"redraw\"} not run" in \
      rows["U: without redraw worse than with"]["why"]
  models = {("exact", True): 0.30, ("identity", True): 0.20, ("performer_softmax", True): 0.30}
  folders = [f for (att, causal), acc in models.items()
             for f in _model_runs(make_run, rng, att, causal, acc, root=f"r_{att}")]
  for f in folders[-3:]:  # the softmax runs evaluated at another step
    record = json.load(open(f"{f}/eval_test.json"))
    record["step"] = 7
    json.dump(record, open(f"{f}/eval_test.json", "w"))
  rows, _ = _decided(tmp_path, folders)
  assert rows["U: softmax matches Transformer"]["verdict"] == "not tested"
  assert "different steps" in rows["U: softmax matches Transformer"]["why"]


def test_runs_without_per_sequence_evals_are_not_decided(tmp_path, make_run):
  folders = [make_run(f"u_{a}", a, causal=True, test=(0.3, 9.0))
             for a in ("exact", "identity", "performer_softmax")]
  rows, _ = _decided(tmp_path, folders)
  assert {r["verdict"] for r in rows.values()} == {"not tested"}


def test_paper_table2_matches_paper_facts():
  # PAPER_FACTS.md, Table 2 (U) test line and (B) OOD softmax.
  assert paper.TABLE2[("U", "Transformer")]["test"] == (30.80, 9.37)
  assert paper.TABLE2[("B", "Performer-softmax")]["ood"] == (23.48, 12.41)
  assert paper.TABLE1_SINGLE["train"]["count"] == 104_863_744


# ---- help -------------------------------------------------------------------

def test_help_lists_every_figure_with_one_line():
  parser = cli._parser()
  for text in (parser.format_help(), parser.subparsers.choices["figure"].format_help()):
    lines = text.splitlines()
    for name, summary in figures.SUMMARIES.items():
      assert any(line.split() and line.split()[0] == name and line.endswith(summary)
                 for line in lines), (name, text)
  assert set(figures.SUMMARIES) == set(figures.FIGURES)


def test_a_diverged_run_is_marked_in_table2_not_fatal(tmp_path, make_run):
  good = make_run("good", "exact", causal=True, test=(0.3, 9.0))
  nan = make_run("nan", "performer_relu", causal=True, test=(0.3, 9.0))
  record = json.load(open(f"{nan}/eval_test.json"))
  record.update(loss=float("nan"), accuracy=float("nan"), perplexity=float("nan"))
  with open(f"{nan}/eval_test.json", "w") as f:
    json.dump(record, f)  # NaN as Python writes it
  stopped = make_run("stopped", "performer_softmax", causal=True, diverged=130)
  figures.render("table2", [good, nan, stopped], str(tmp_path / "t.md"))
  rows = {r["run"]: r for r in _table(tmp_path / "t.md") if r["run"] in ("good", "nan", "stopped")}
  assert rows["nan"]["model"] == "Performer-ReLU (diverged)" and rows["nan"]["test accuracy %"] == "-"
  assert rows["stopped"]["model"] == "Performer-softmax (diverged at step 130)"
  assert float(rows["good"]["test accuracy %"]) == pytest.approx(30.0)


def test_the_identity_control_is_named_a_control_not_an_extra(tmp_path, make_run):
  control = make_run("control", "identity", causal=True, test=(0.1, 17.0))
  figures.render("table2", [control], str(tmp_path / "t.md"))
  (row,) = [r for r in _table(tmp_path / "t.md") if r["run"] == "control"]
  assert row["model"] == "Identity (control)"


def test_a_diverged_run_gives_its_claims_the_reason_not_a_missing_file(make_run):
  stopped = runs_lib.load_run(make_run("stopped", "performer_softmax", causal=True, diverged=130))
  assert claims.replicates([stopped]) == (None, "stopped diverged at step 130")
