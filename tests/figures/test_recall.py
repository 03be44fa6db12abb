"""figure recall and recall-lr on hand-written recall runs whose verdicts are known."""

import glob
import json
import os
import re

import numpy as np
import pytest

from performer import cli
from performer.errors import UserError
from performer.figures import recall, recall_lr

N, KV = 400, 4  # test examples, queries per example
ROWS = {"exact": ("exact", {}), "identity": ("identity", {}),
        "favor_m16": ("performer_softmax", {"num_features": 16}),
        "favor_m64": ("performer_softmax", {"num_features": 64}),
        "favor_m128": ("performer_softmax", {"num_features": 128}),
        "favor_no_redraw": ("performer_softmax", {"num_features": 64, "redraw_every": 0}),
        "trig": ("performer_softmax", {"num_features": 64, "kernel": "trig"}),
        "taylor": ("performer_relu", {"kernel": "taylor", "features": "deterministic",
                                      "feature_dim": 16})}


def _run(root, row, seed, correct, *, lr=1e-3, stage="replicate", valid=None, step=100,
         task="L64_kv4"):
  """A recall run folder: config, metrics and a test eval whose per-example sums are `correct`."""
  attention, options = ROWS.get(row, ("exact", {}))
  name = f"{row}_s{seed}" if stage == "replicate" else f"{row}_lr{lr:g}"
  folder = root / name
  folder.mkdir(parents=True)
  settings = {"task": task, "row": row, "lr": lr, "seed": seed, "stage": stage}
  (folder / "config.json").write_text(json.dumps({
      "model": {"attention": attention, "causal": True, "attention_options": options,
                "d_model": 64, "num_heads": 1, "num_layers": 2},
      "data": {"seq_len": 64}, "train": {"seed": seed, "settings": settings}}))
  (folder / "metrics.jsonl").write_text("")
  if correct is not None:
    np.savez(folder / "eval_test_sequences.npz", ids=np.arange(N), correct_sum=correct,
             tokens=np.full(N, float(KV)), loss_sum=np.zeros(N))
    (folder / "eval_test.json").write_text(json.dumps({
        "accuracy": float(correct.sum() / (KV * N)), "perplexity": 2.0, "step": step, "split": "test",
        "sequences_file": "eval_test_sequences.npz"}))
  if valid is not None:
    (folder / "eval_valid.json").write_text(json.dumps(valid))
  return str(folder)


def _correct(rng, p):
  return rng.binomial(KV, p, N).astype(float)


@pytest.fixture(name="study")
def fixture_study(tmp_path):
  rng = np.random.default_rng(0)
  truth = {"exact": 0.97, "identity": 0.004, "favor_m16": 0.55, "favor_m64": 0.96,
           "favor_no_redraw": 0.96, "trig": 0.30, "taylor": 0.9}
  folders = []
  for seed in range(5):
    luck = rng.normal(0, 0.01)
    for row, p in truth.items():
      if row == "favor_no_redraw" and seed == 3:
        p = 0.05  # an unlucky draw of W, never redrawn
      folders.append(_run(tmp_path / "runs", row, seed, _correct(rng, np.clip(p + luck, 0, 1))))
  return folders


def test_claims_are_decided_by_the_rule_and_rows_summarised(study, tmp_path):
  out = tmp_path / "out" / "recall.png"
  written = recall.render(study, str(out))
  assert out.stat().st_size > 20_000 and all(p for p in written)
  record = json.loads((tmp_path / "out" / "recall.json").read_text())["tasks"]["L64_kv4"]
  assert record["gate"]["passed"] and record["gate"]["difference"] == pytest.approx(0.966, abs=0.01)
  verdicts = {c["id"]: c["verdict"] for c in record["claims"]}
  assert verdicts == {
      "FAVOR+ m=16 matches exact": "contradicted",  # 42 pp below, delta = 4.8 pp
      "FAVOR+ m=64 matches exact": "reproduced",  # 1 pp apart, well inside delta
      "no redraw worse than redraw": "inconclusive",  # one unlucky seed of five: not shown
      "trig worse than positive": "reproduced"}
  rows = (tmp_path / "out" / "recall.md").read_text()
  assert "| L64_kv4 | FAVOR+ no redraw | 4096 |" in rows  # m x d_head = 64 x 64
  assert "| 3 |" in rows.split("FAVOR+ no redraw")[1].split("\n")[0]  # the unlucky seed
  assert "| L64_kv4 | Taylor (Based) | 17472 |" in rows  # (1 + 16 + 16^2) x 64
  assert "| L64_kv4 | exact softmax | 8192 |" in rows  # L x (d_k + d_v)
  # Each row's 95% interval: at least its seeds' t interval, about the mean.
  cells = next(line for line in rows.split("\n") if "| FAVOR+ m=16 |" in line).split(" | ")
  mean, (low, high) = float(cells[3]), map(float, cells[4].split(" .. "))
  seeds = 100 * np.array([json.loads(open(f"{f}/eval_test.json").read())["accuracy"]
                          for f in study if "favor_m16_" in f])
  half = 2.776 * seeds.std(ddof=1) / np.sqrt(5)  # t(0.975, 4)
  assert low < mean < high and mean - low == pytest.approx(high - mean, abs=0.011)
  assert half < high - mean < half + 2.776 * 1.0  # the test set adds under 1 pp of se here
  claims = (tmp_path / "out" / "recall_claims.md").read_text()
  assert "gate passed" in claims and "TOST at +-4.8" in claims


def test_a_row_interval_stays_within_0_and_100(tmp_path):
  # Two seeds 10 pp apart: the t interval, 95 +- 12.706 x 5 pp, passes 100%.
  correct = np.full(N, float(KV))
  folders = [_run(tmp_path / "r", "exact", 0, correct)]
  correct = correct.copy()
  correct[:N // 5] = KV / 2  # 90%
  folders.append(_run(tmp_path / "r", "exact", 1, correct))
  recall.render(folders, str(tmp_path / "o.png"))
  row = next(line for line in (tmp_path / "o.md").read_text().split("\n")
             if "| exact softmax |" in line)
  low = float(row.split(" | ")[4].split(" .. ")[0])
  assert "| 95.00 |" in row and row.split(" | ")[4].endswith(" .. 100.00")
  assert 95 - 12.706 * 5 - 1 < low <= 95 - 12.706 * 5  # the test set widens it a little


def test_an_identity_as_good_as_exact_makes_claims_not_testable(tmp_path):
  rng = np.random.default_rng(1)
  folders = [_run(tmp_path / "r", row, seed, _correct(rng, 0.3)) for seed in range(3)
             for row in ("exact", "identity", "favor_m64")]
  recall.render(folders, str(tmp_path / "o.png"))
  record = json.loads((tmp_path / "o.json").read_text())["tasks"]["L64_kv4"]
  assert not record["gate"]["passed"]
  assert [c["verdict"] for c in record["claims"]] == ["not testable at this scale"]


def test_learning_rates_are_chosen_on_valid_ties_to_the_smaller_and_never_diverged(tmp_path):
  root = tmp_path / "tune"
  folders = [
      _run(root, "exact", 100, None, lr=1e-3, stage="tune", valid={"accuracy": 0.9}),
      _run(root, "exact", 100, None, lr=1e-2, stage="tune", valid={"accuracy": 0.95}),
      _run(root, "trig", 100, None, lr=1e-3, stage="tune", valid={"accuracy": 0.4}),
      _run(root, "trig", 100, None, lr=1e-2, stage="tune", valid={"accuracy": 0.4}),
      _run(root, "taylor", 100, None, lr=1e-3, stage="tune", valid={"accuracy": 0.2}),
      _run(root, "taylor", 100, None, lr=1e-2, stage="tune",
           valid={"accuracy": float("nan"), "diverged": True}),
  ]
  md, _, js = recall_lr.render(folders, str(tmp_path / "lr.md"))
  chosen = json.loads(open(js).read())["chosen"]["L64_kv4"]
  assert chosen == {"exact": 1e-2, "trig": 1e-3, "taylor": 1e-3}
  assert "| L64_kv4 | exact softmax | 0.01 | 95.00 | - | yes |" in open(md).read()
  # Early stops (valid accuracy past the target) beat any accuracy; the first stop wins.
  for lr, step in ((1e-3, 750), (1e-2, 500)):
    (root / f"exact_lr{lr:g}" / "stopped_early.json").write_text(json.dumps({"step": step}))
  (root / "exact_lr0.001" / "eval_valid.json").write_text(json.dumps({"accuracy": 0.998}))
  (root / "trig_lr0.01" / "stopped_early.json").write_text(json.dumps({"step": 4000}))
  md, _, js = recall_lr.render(folders, str(tmp_path / "lr.md"))
  assert json.loads(open(js).read())["chosen"]["L64_kv4"] == {"exact": 1e-2, "trig": 1e-2,
                                                               "taylor": 1e-3}
  assert "| L64_kv4 | exact softmax | 0.001 | 99.80 | 750 |  |" in open(md).read()
  (root / "exact_lr0.001" / "eval_valid.json").unlink()
  with pytest.raises(UserError, match="no eval_valid.json"):
    recall_lr.render(folders, str(tmp_path / "lr.md"))


def test_runs_of_another_study_get_a_one_line_error(tmp_path, make_run, capsys):
  folder = make_run("u_exact", "exact", causal=True, test=(0.1, 17.0))
  assert cli.main(["figure", "recall", "--runs", folder, "--out", str(tmp_path / "r.png")]) == 2
  assert "not a recall run" in capsys.readouterr().err


def test_runs_without_a_test_eval_or_with_malformed_settings_get_one_line_errors(tmp_path, capsys):
  rng = np.random.default_rng(2)
  fine = _run(tmp_path / "a", "exact", 0, _correct(rng, 0.9))
  cases = {"no eval_test.json .run performer eval --split test": _run(tmp_path / "b", "exact", 1,
                                                                        None),
           "task 'mytask' is not L<seq_len>_kv<num_kv>": _run(tmp_path / "c", "exact", 2,
                                                               _correct(rng, 0.9), task="mytask"),
           "row 'favor_mfoo' is not a row": _run(tmp_path / "d", "favor_mfoo", 3,
                                                 _correct(rng, 0.9))}
  for message, folder in cases.items():
    assert cli.main(["figure", "recall", "--runs", fine, folder,
                     "--out", str(tmp_path / "r.png")]) == 2
    assert re.search(message, capsys.readouterr().err)
  assert not (tmp_path / "r.png").exists()


def test_two_studies_mixed_get_a_one_line_error(tmp_path, capsys):
  rng = np.random.default_rng(4)
  fine = _run(tmp_path / "a", "exact", 0, _correct(rng, 0.9))
  open(f"{fine}/dataset.json", "w").write(json.dumps({"fingerprint": {"kind": "first"}}))
  again = _run(tmp_path / "b", "exact", 0, _correct(rng, 0.9), lr=3e-3)  # the same row, seed
  conv = _run(tmp_path / "c", "identity", 0, _correct(rng, 0.1))
  config = json.loads(open(f"{conv}/config.json").read())
  config["model"]["conv_kernel"] = 3
  open(f"{conv}/config.json", "w").write(json.dumps(config))
  other_data = _run(tmp_path / "d", "identity", 0, _correct(rng, 0.1))
  open(f"{other_data}/dataset.json", "w").write(json.dumps({"fingerprint": {"kind": "other"}}))
  broken = _run(tmp_path / "e", "identity", 0, _correct(rng, 0.1))
  open(f"{broken}/dataset.json", "w").write("{")
  cases = {"both are L64_kv4 exact seed 0": again,
           "with and without the short convolution": conv,
           "on other data": other_data,
           "dataset.json: unreadable": broken}
  for message, folder in cases.items():
    assert cli.main(["figure", "recall", "--runs", fine, folder,
                     "--out", str(tmp_path / "out" / "r.png")]) == 2
    assert message in capsys.readouterr().err
  assert not (tmp_path / "out").exists()


def test_recall_lr_writes_its_table_beside_the_runs_by_default(tmp_path, capsys):
  folder = _run(tmp_path / "tune", "exact", 100, None, stage="tune", valid={"accuracy": 0.5})
  assert cli.main(["figure", "recall-lr", "--runs", folder]) == 0
  assert (tmp_path / "tune" / "recall_lr.md").exists() and (tmp_path / "tune" / "recall_lr.json").exists()
  assert "recall_lr.csv" in capsys.readouterr().out


def test_zoology_runs_report_every_test_split_the_ceilings_and_compare_early_stops(
    tmp_path, monkeypatch):
  from performer.data import mqar  # pylint: disable=import-outside-toplevel
  task = mqar.MQARConfig(vocab_size=64, seq_len=16, num_kv=2, eval_examples=N, test_kv=(4,))
  fingerprint = {"kind": mqar.KIND, **{k: v for k, v in vars(task).items()}}
  rng = np.random.default_rng(3)
  truth = {"exact": (0.99, 500), "identity": (0.25, 5000), "favor_m64": (0.6, 5000)}
  folders = []
  for seed in range(3):
    for row, (p, step) in truth.items():
      folder = _run(tmp_path / "z", row, seed, _correct(rng, p), step=step, task="L16_kv2")
      config = json.loads(open(f"{folder}/config.json").read())
      config["train"]["steps"] = 5000
      open(f"{folder}/config.json", "w").write(json.dumps(config))
      open(f"{folder}/dataset.json", "w").write(json.dumps({"fingerprint": fingerprint}))
      for split, q in (("test_shuffled", p), ("test_kv4", p / 2)):
        open(f"{folder}/eval_{split}.json", "w").write(json.dumps(
            {"accuracy": q, "perplexity": 2.0, "step": step, "split": split}))
      if row == "favor_m64":  # what recall-rows wrote
        open(f"{folder}/recall_rows.json", "w").write(json.dumps({
            "accuracy_favor": 0.6, "accuracy_exact_rows": 0.9 + seed / 100, "rows": [{
                "l1": 1.2, "favor_answer": 0.3, "exact_answer": 0.8, "favor_max": 0.35,
                "exact_max": 0.85}]}))
      if row == "exact":
        open(f"{folder}/stopped_early.json", "w").write(json.dumps({"step": 500}))
      else:  # valid accuracy climbs 0.5 pp per 500 steps to the cap
        open(f"{folder}/metrics.jsonl", "w").write("".join(
            json.dumps({"step": s, "split": "valid", "accuracy": 0.5 + s / 100_000}) + "\n"
            for s in range(500, 5001, 500)))
      folders.append(folder)
  drawn = []  # the panels: one row per test (L, kv), each with that split's accuracies
  monkeypatch.setattr(recall, "_draw", lambda left, right, title, rows, means, ceiling: (
      drawn.append((title, means["favor_m64"][0], ceiling["ceiling"]))))
  recall.render(folders, str(tmp_path / "z.png"))
  assert [(t, round(m)) for t, m, _ in drawn] == [("L16_kv2", 60.0),
                                                     ("L16_kv2 model on test_kv4 (kv = 4)", 30.0)]
  assert drawn[1][2] == mqar.ceilings(task, "test_kv4")["ceiling"]
  rows = (tmp_path / "z.md").read_text()
  header = rows.split("\n")[2]
  assert header.index("test_shuffled % (mean)") < header.index("test_kv4 % (mean)")
  favor = next(line for line in rows.split("\n") if "| FAVOR+ m=64 |" in line)
  assert "| 5000 | 1.00 | 60.00 | 30.00 |" in favor  # steps, the last 1,000 steps' gain, splits
  exact = next(line for line in rows.split("\n") if "| exact softmax |" in line)
  assert "| 500 | - | 99.00 | 49.50 |" in exact  # stopped early: no gain to read
  ceiling = mqar.ceilings(task, "test")["ceiling"]
  assert f"L16_kv2 test: no-binding ceiling {100 * ceiling:.2f}%" in rows
  assert "L16_kv2 test_kv4: no-binding ceiling" in rows
  record = json.loads((tmp_path / "z.json").read_text())["tasks"]["L16_kv2"]
  assert record["no_binding_ceiling"]["test"]["ceiling"] == ceiling
  mechanism = (tmp_path / "z_mechanism.md").read_text()
  assert "| L16_kv2 | FAVOR+ m=64 | 3 | 60.00 | 91.00 | 1.200 | 0.300 | 0.800 | 0.350 | 0.850 |" in (
      mechanism)
  # Exact stopped early at 500 and FAVOR+ ran to the cap: compared, not refused for their steps.
  assert record["claims"][0]["verdict"] == "contradicted"


def test_every_row_has_its_own_colour_whatever_rows_are_present():
  every = recall.styles_of(list(recall.LABELS))
  colours = [style["color"] for style in every.values()]
  assert len(colours) == len(set(colours)) == len(recall.LABELS) - 1  # identity is a line
  some = recall.styles_of(["smreg", "exact"])  # the colours of a row do not depend on the others
  assert some["smreg"] == every["smreg"] and some["exact"] == every["exact"]


def test_zoology_setting_adds_based_claims_and_asks_more_seeds_only_where_they_resolve(
    tmp_path, monkeypatch):
  # Runs with Zoology's short convolution: seed s of each row gets every example right but the
  # first lost[row][s] of one order of the examples (seed s's, 4 queries each).
  monkeypatch.setitem(ROWS, "elu_plus_one", ("linear", {}))
  monkeypatch.setitem(ROWS, "relu_deterministic", ("performer_relu", {"features": "deterministic"}))
  rng = np.random.default_rng(5)
  lost = {"exact": (0, 0, 0), "identity": (395, 395, 395), "favor_m64": (60, 60, 60),
          "taylor": (2, 1, 3), "elu_plus_one": (8, 8, 8), "relu_deterministic": (36, 42, 48)}
  folders = []
  for seed in range(3):
    order = rng.permutation(N)
    for row, lose in lost.items():
      correct = np.full(N, float(KV))
      correct[order[:lose[seed]]] = 0
      folder = _run(tmp_path / "z", row, seed, correct)
      config = json.loads(open(f"{folder}/config.json").read())
      config["model"]["conv_kernel"] = 3
      open(f"{folder}/config.json", "w").write(json.dumps(config))
      folders.append(folder)
  for seed in (3, 4):  # seeds another claim asked of FAVOR+ m=64 alone: its claims pair on 0-2
    correct = np.full(N, float(KV))
    correct[rng.permutation(N)[:200]] = 0
    folders.append(_run(tmp_path / "z", "favor_m64", seed, correct))
    config = json.loads(open(f"{folders[-1]}/config.json").read())
    config["model"]["conv_kernel"] = 3
    open(f"{folders[-1]}/config.json", "w").write(json.dumps(config))
  recall.render(folders, str(tmp_path / "z.png"))
  record = json.loads((tmp_path / "z.json").read_text())["tasks"]["L64_kv4"]
  verdicts = {c["id"]: c["verdict"] for c in record["claims"]}
  assert "| FAVOR+ m=64 | 4096 | 71.00 |" in (tmp_path / "z.md").read_text()  # all 5 seeds
  assert verdicts["Taylor matches exact"] == "reproduced"  # 0.5 pp apart, delta 4.9 pp
  assert verdicts["elu+1 better than FAVOR+ m=64 (same state)"] == "reproduced"  # 13 pp
  # ReLU's 4.5 pp over FAVOR+ m=64 moves 1.5 pp from seed to seed: 3 seeds cannot tell, 4 can.
  assert verdicts["deterministic ReLU better than FAVOR+ m=64 (same state)"] == "inconclusive"
  assert record["more_seeds"] == [{
      "claim": "deterministic ReLU better than FAVOR+ m=64 (same state)",
      "rows": ["relu_deterministic", "favor_m64"], "seeds": 4}]
  claims = (tmp_path / "z_claims.md").read_text()
  assert "seeds paired): deterministic ReLU better than FAVOR+ m=64 (same state): 4" in claims
  relu = claims.split("ReLU better")[1].split("\n")[0]
  assert "| +4.50 |" in relu and "| 3/3 |" in relu


def test_the_documented_glob_takes_the_replicates_and_rows_follow_the_declared_order(
    tmp_path, capsys):
  """docs/reproducing.md's `figure recall --runs runs/recall/<glob>` beside a tuning run, whose
  folder name (..._simplex_lr0.001) holds "_s" too; rows as results/recall.md orders them."""
  with open(os.path.join(os.path.dirname(recall.__file__), "..", "..", "docs",
                         "reproducing.md")) as f:
    line = next(line for line in f if "performer figure recall --runs runs/recall/" in line)
  pattern = line.split("--runs runs/recall/")[1].split()[0]
  rng = np.random.default_rng(5)
  truth = {"exact": 0.97, "favor_m128": 0.9, "favor_m16": 0.5, "favor_m64": 0.8,
           "identity": 0.01, "taylor": 0.9, "trig": 0.3}
  for seed in range(2):
    for row, p in truth.items():
      _run(tmp_path / "recall", row, seed, _correct(rng, p))
  tune = _run(tmp_path / "recall", "simplex", 100, None, stage="tune", valid={"accuracy": 0.5})
  os.rename(tune, tmp_path / "recall" / "recall_L64_kv4_simplex_lr0.001")  # the plan's name
  folders = sorted(glob.glob(str(tmp_path / "recall" / pattern)))
  assert len(folders) == 14 and not [f for f in folders if "_lr" in f]
  assert cli.main(["figure", "recall", "--runs", *folders]) == 0
  capsys.readouterr()
  rows = [line.split(" | ")[1] for line in (tmp_path / "recall" / "recall.md").read_text()
          .split("\n") if line.startswith("| L64_kv4 |")]
  assert rows == ["exact softmax", "FAVOR+ m=16", "FAVOR+ m=64", "FAVOR+ m=128",
                  "trig (SMtrig)", "Taylor (Based)", "identity (control)"]
