"""figure listops and figure recall-kv on hand-written runs whose verdicts are known."""

import json

import numpy as np
import pytest

from performer import cli
from performer.figures import listops, recall_kv
from performer.figures import runs as runs_lib

N = 2000  # test examples


def _run(root, name, attention, settings, evals, *, causal, options=None):
  """A run folder: config, metrics and, per split, an eval whose per-example sums are `evals`
  [split] = (correct [N], tokens per example)."""
  folder = root / name
  folder.mkdir(parents=True)
  (folder / "config.json").write_text(json.dumps({
      "model": {"attention": attention, "causal": causal, "attention_options": options or {},
                "d_model": 64, "num_heads": 1, "num_layers": 2},
      "data": {"seq_len": 64}, "train": {"seed": settings["seed"], "settings": settings}}))
  (folder / "metrics.jsonl").write_text("")
  for split, (correct, per) in evals.items():
    np.savez(folder / f"eval_{split}_sequences.npz", ids=np.arange(len(correct)),
             correct_sum=correct, tokens=np.full(len(correct), float(per)),
             loss_sum=np.zeros(len(correct)))
    (folder / f"eval_{split}.json").write_text(json.dumps({
        "accuracy": float(correct.sum() / (per * len(correct))), "perplexity": 2.0, "step": 100,
        "split": split, "sequences_file": f"eval_{split}_sequences.npz"}))
  return str(folder)


def test_listops_decides_the_declared_claims_beside_the_published_numbers(tmp_path):
  rng = np.random.default_rng(0)
  truth = {"exact": 0.40, "favor_m128": 0.40, "favor_m2": 0.20, "relu": 0.39, "identity": 0.17}
  attention = {"exact": "exact_blockwise", "favor_m128": "performer_softmax",
               "favor_m2": "performer_softmax", "relu": "performer_relu", "identity": "identity"}
  runs = [_run(tmp_path / "runs", f"listops_{row}_s{seed}", attention[row],
               {"task": "listops", "row": row, "seed": seed},
               {"test": (rng.binomial(1, p, N).astype(float), 1)}, causal=False)
          for row, p in truth.items() for seed in range(3)]
  out = tmp_path / "fig" / "listops.png"
  assert cli.main(["figure", "listops", "--runs", *runs, "--out", str(out)]) == 0
  record = json.loads((tmp_path / "fig" / "listops.json").read_text())
  verdicts = {c["id"]: c["verdict"] for c in record["claims"]}
  assert verdicts["m=2 falls short of m=128"] == "reproduced"
  assert verdicts["Performer-softmax matches the Transformer"] != "contradicted"
  assert record["gate"]["passed"] and list(record["rows"]) == list(truth)  # LABELS' order
  gain = np.mean(record["rows"]["exact"]["accuracies"]) - np.mean(
      record["rows"]["identity"]["accuracies"])
  assert record["claims"][0]["delta"] == pytest.approx(listops.DELTA_FRACTION * gain / 100,
                                                        rel=1e-6)
  claims_md = (tmp_path / "fig" / "listops_claims.md").read_text()
  assert "Transformer 36.37%, Performer 18.01%" in claims_md and "38.02%" in claims_md


def test_listops_refuses_a_run_without_the_study_settings(tmp_path, capsys):
  run = _run(tmp_path, "by_hand", "exact", {"seed": 0},
             {"test": (np.ones(10), 1)}, causal=False)
  assert cli.main(["figure", "listops", "--runs", run, "--out", str(tmp_path / "x.png")]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "not a listops run" in err
  assert not (tmp_path / "x.png").exists()


def test_recall_kv_decides_each_claim_at_each_split_in_one_family(tmp_path):
  rng = np.random.default_rng(1)
  truth = {  # test (kv = 4), test_kv8, test_kv16
      "exact": (0.99, 0.98, 0.97), "identity": (0.01, 0.01, 0.01),
      "favor_m256": (0.96, 0.85, 0.70), "favorpp": (0.97, 0.86, 0.85)}
  attention = {"exact": ("exact", {}), "identity": ("identity", {}),
               "favor_m256": ("performer_softmax", {"num_features": 256}),
               "favorpp": ("performer_favorpp", {"num_features": 256})}
  runs = []
  for row, ps in truth.items():
    for seed in range(4, 8):
      evals = {split: (rng.binomial(4, p, 500).astype(float), 4)
               for split, p in zip(("test", "test_kv8", "test_kv16"), ps)}
      runs.append(_run(tmp_path / "runs", f"recall_kv_L64_kv4_{row}_s{seed}", attention[row][0],
                       {"task": "L64_kv4", "row": row, "seed": seed}, evals, causal=True,
                       options=attention[row][1]))
  out = tmp_path / "fig" / "recall_kv.png"
  assert cli.main(["figure", "recall-kv", "--runs", *runs, "--out", str(out)]) == 0
  record = json.loads((tmp_path / "fig" / "recall_kv.json").read_text())
  found = {c["id"]: c for c in record["claims"]}
  # The claims whose rows were run; FAVOR+ at the largest m run (here 256) against exact.
  assert set(found) == {f"{c} at kv = {kv}" for kv in (8, 16) for c in (
      "FAVOR++ better than FAVOR+", "FAVOR+ m=256 matches exact")}
  assert found["FAVOR++ better than FAVOR+ at kv = 16"]["verdict"] == "reproduced"
  assert found["FAVOR++ better than FAVOR+ at kv = 8"]["verdict"] == "inconclusive"
  assert found["FAVOR+ m=256 matches exact at kv = 16"]["verdict"] == "contradicted"
  assert set(record["gates"]) == {"test_kv8", "test_kv16"}
  assert all(g["passed"] for g in record["gates"].values())
  assert record["rows"]["favorpp"]["test_kv16"]["mean"] == pytest.approx(
      100 * np.mean([json.load(open(f"{r}/eval_test_kv16.json"))["accuracy"]
                     for r in runs if "_favorpp_" in r]))
  _, rows = recall_kv._rows(runs_lib.load_runs(runs))  # pylint: disable=protected-access
  claims = recall_kv.claims(rows)
  assert {c.family for c in claims} == {recall_kv.FAMILY} and len(claims) == 4
  assert {c.delta for c in claims} == {recall_kv.DELTA}  # declared, not re-measured
