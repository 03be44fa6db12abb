"""kernel-ranking (Fig. 17): the declared rule on hand-made runs at two batch sizes."""

import json
import re

import numpy as np
import pytest
from scipy import stats

from performer import cli, favor
from performer.errors import UserError
from performer.figures import kernel_ranking

SEQUENCES, TOKENS = 300, 50


def _runs(make_run, rng, accuracies, batch, *, seeds=3, root="runs", **extra):
  """Runs of each kernel in `accuracies` ({kernel: accuracy}) at `batch` (32 records Fig. 17's
  batch_factor, as the plan does), with per-sequence test sums around that accuracy (seed sd
  0.2 pp)."""
  folders = []
  for kernel, accuracy in accuracies.items():
    for seed in range(seeds):
      p = np.clip(accuracy + rng.normal(0, 0.002) + rng.normal(0, 0.02, SEQUENCES), 0, 1)
      correct = rng.binomial(TOKENS, p).astype(np.float32)
      options = {"kernel": kernel, **extra}
      folder = make_run(f"b{batch}_{kernel}_{seed}", "performer_relu", causal=False, seed=seed,
                        root=root,
                        test=(float(correct.sum() / (TOKENS * SEQUENCES)), 9.0),
                        attention_options=options,
                        settings={**options, "seed": seed, **({"batch_factor": 4} if batch == 32
                                                              else {})})
      config = json.load(open(f"{folder}/config.json"))
      config["data"] = {"batch_size": batch}
      json.dump(config, open(f"{folder}/config.json", "w"))
      np.savez(f"{folder}/eval_test_sequences.npz", ids=np.arange(SEQUENCES),
               correct_sum=correct, tokens=np.full(SEQUENCES, TOKENS, np.float32),
               loss_sum=np.zeros(SEQUENCES, np.float32))
      record = json.load(open(f"{folder}/eval_test.json"))
      json.dump({**record, "sequences_file": "eval_test_sequences.npz"},
                open(f"{folder}/eval_test.json", "w"))
      folders.append(folder)
  return folders


def _decided(tmp_path, folders):
  tmp_path.mkdir(exist_ok=True)
  out = str(tmp_path / "ranking.md")
  kernel_ranking.render(folders, out)
  return json.load(open(tmp_path / "ranking.json")), open(out).read()


KERNELS = ("sigmoid", "relu", "abs", "gelu", "tanh")


def test_a_decisive_swap_among_agreeing_rankings_reproduces_the_claim(tmp_path, make_run):
  rng = np.random.default_rng(0)
  small = dict(zip(KERNELS, (0.10, 0.20, 0.30, 0.40, 0.50)))
  large = {**small, "abs": 0.40, "gelu": 0.30}  # abs and gelu swap, 10 points apart
  folders = _runs(make_run, rng, small, 8) + _runs(make_run, rng, large, 32)
  decision, text = _decided(tmp_path, folders)
  assert decision["batches"] == [8, 32]
  assert decision["kernels"] == sorted(KERNELS, key=favor.KERNELS.index)  # the registry's order
  # rho against an independent computation from the written per-sequence files
  means = {b: [np.mean([np.load(f"{tmp_path}/runs/b{b}_{k}_{s}/eval_test_sequences.npz")[
      "correct_sum"].sum() / (TOKENS * SEQUENCES) for s in range(3)]) for k in KERNELS]
           for b in (8, 32)}
  assert decision["rho"] == pytest.approx(stats.spearmanr(means[8], means[32]).statistic)
  assert decision["rho"] == pytest.approx(0.9)  # one swap of neighbours among five
  low, high = decision["interval"]
  assert 0 < low <= 0.9 <= high <= 1
  (flip,) = [p for p in decision["pairs"] if p["flips"]]
  assert (flip["a"], flip["b"]) == ("abs", "gelu")
  assert flip["difference"] == pytest.approx([-0.10, 0.10], abs=0.01)
  assert decision["verdict"] == "reproduced"
  assert decision["ranks"]["abs"] == [3.0, 2.0] and decision["ranks"]["tanh"] == [1.0, 1.0]
  assert "Verdict: reproduced" in text and "Flips: abs - gelu" in text
  # accuracy in % to two decimals, rank 1 the most accurate
  assert re.search(r"\| abs \(absolute\) \| 3\d\.\d\d \| 3 \| 40\.\d\d \| 2 \|", text)


def test_the_same_order_everywhere_contradicts_and_noise_is_inconclusive(tmp_path, make_run):
  rng = np.random.default_rng(1)
  small = dict(zip(KERNELS, (0.10, 0.20, 0.30, 0.40, 0.50)))
  decision, _ = _decided(tmp_path / "a", _runs(make_run, rng, small, 8)
                         + _runs(make_run, rng, small, 32))
  assert decision["verdict"] == "contradicted" and "none flips" in decision["why"]
  assert decision["rho"] == pytest.approx(1.0)
  level = dict.fromkeys(KERNELS, 0.30)  # five equal kernels: ranks are noise
  decision, _ = _decided(tmp_path / "b", _runs(make_run, rng, level, 8, root="flat")
                         + _runs(make_run, rng, level, 32, root="flat"))
  assert decision["verdict"] == "inconclusive"
  assert not any(p["flips"] for p in decision["pairs"])
  assert decision["interval"][0] < 0 < decision["interval"][1]


def test_excluded_kernels_too_few_kernels_and_bad_input(tmp_path, make_run, capsys):
  rng = np.random.default_rng(2)
  folders = _runs(make_run, rng, {"relu": 0.3, "abs": 0.2}, 8) + _runs(
      make_run, rng, {"relu": 0.3, "abs": 0.2}, 32)
  diverged = make_run("b32_tanh_0", "performer_relu", causal=False,
                      attention_options={"kernel": "tanh"}, diverged=5)
  json_config = json.load(open(f"{diverged}/config.json"))
  json.dump({**json_config, "data": {"batch_size": 32}}, open(f"{diverged}/config.json", "w"))
  decision, text = _decided(tmp_path / "t", [*folders, diverged])
  assert decision["verdict"] == "not testable at this scale" and decision["rho"] is None
  assert "Not ranked: tanh (no run at batch 8; b32_tanh_0 diverged at step 5)." in text
  with pytest.raises(UserError, match="runs of 1 batch size"):
    kernel_ranking.render(folders[:3], str(tmp_path / "x.md"))
  off = _runs(make_run, rng, {"relu": 0.3}, 8, root="off", renormalize=False)
  with pytest.raises(UserError, match="without D\\^-1 are not ranked"):
    kernel_ranking.render([*folders, *off], str(tmp_path / "x.md"))
  exact = make_run("exact", "exact", causal=False)
  assert cli.main(["figure", "kernel-ranking", "--runs", exact, "--out",
                   str(tmp_path / "x.md")]) == 2
  assert "attention 'exact' has no feature kernel" in capsys.readouterr().err
  assert not (tmp_path / "x.md").exists()
