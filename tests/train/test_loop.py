"""The real training loop on the real sample: logs, checkpoints, resume, divergence, eval."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from performer import configurables
from performer.data import pipeline, samples, trembl
from performer.errors import UserError
from performer.train import evaluate, loop, metrics, steps

TINY = ["DataConfig.seq_len = 32", "DataConfig.batch_size = 4", "ModelConfig.num_layers = 1",
        "ModelConfig.num_heads = 2", "ModelConfig.d_model = 16", "ModelConfig.d_ff = 32",
        "ModelConfig.attention_options = {'num_features': 8}", "TrainConfig.log_every = 2",
        "TrainConfig.eval_every = 3", "TrainConfig.checkpoint_every = 3",
        "TrainConfig.eval_batches = 2"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  out = tmp_path_factory.mktemp("data") / "trembl"
  trembl.prepare(trembl.TremblConfig(inputs=(samples.fetch("protein"),), valid_fraction=0.05,
                                     test_fraction=0.05), str(out), workers=1, progress=False)
  return str(out)


def _train(data, workdir, *extra, config="gin/mini/trembl_u_performer_relu.gin"):
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  configurables.parse([os.path.join(root, config)],
                      [f"DataConfig.path = '{data}'", *TINY, *extra])
  return loop.run(str(workdir), progress=False)


def _rows(workdir):
  return [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]


def test_run_logs_checkpoints_and_resumes_exactly(data, tmp_path):
  _train(data, tmp_path / "a", "TrainConfig.steps = 6")
  rows = _rows(tmp_path / "a")
  train_rows = [r for r in rows if r["split"] == "train"]
  assert [r["step"] for r in train_rows] == [2, 4, 6]
  for key in ("loss", "accuracy", "perplexity", "bits_per_token", "learning_rate", "step_time",
              "tokens_per_s"):
    assert all(np.isfinite(r[key]) for r in train_rows), key
  assert train_rows[0]["loss"] != train_rows[-1]["loss"]
  assert train_rows[0]["bits_per_token"] == pytest.approx(train_rows[0]["loss"] / np.log(2))
  assert sorted(os.listdir(tmp_path / "a" / "checkpoints")) == ["3", "6"]
  assert any(n.startswith("events.out.tfevents") for n in os.listdir(tmp_path / "a" / "tensorboard"))
  # Stopped after step 3 (as a kill after that checkpoint would), then resumed.
  _train(data, tmp_path / "b", "TrainConfig.steps = 3")
  _train(data, tmp_path / "b", "TrainConfig.steps = 6")
  last = lambda w: [r for r in _rows(w) if r["split"] == "valid"][-1]
  assert last(tmp_path / "b") == last(tmp_path / "a")


def test_divergence_stops_and_keeps_the_last_good_checkpoint(data, tmp_path):
  _train(data, tmp_path, "TrainConfig.steps = 3")
  with pytest.raises(loop.TrainingDiverged, match="non-finite loss or gradient at step .*step 3"):
    _train(data, tmp_path, "TrainConfig.steps = 9", "OptimConfig.learning_rate = 1e30")
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["3"]
  result = evaluate.run(str(tmp_path), "valid")  # the kept checkpoint still loads and works
  assert result["step"] == 3 and np.isfinite(result["loss"])


@pytest.mark.parametrize("causal", [True, False])
def test_eval_metrics_match_a_hand_computation(data, tmp_path, causal):
  config = "gin/mini/trembl_u_performer_relu.gin" if causal else "gin/mini/trembl_b_performer_relu.gin"
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  configurables.parse([os.path.join(root, config)], [f"DataConfig.path = '{data}'", *TINY])
  cfgs, model, _, tokens = loop.build()
  batch = next(pipeline.Batches(cfgs["data"], "valid", causal=causal).eval_batches())
  model.eval()
  got = metrics.summarize(jax.device_get(steps.eval_step(model, batch, seed=0, tokens=tokens,
                                                         causal=causal)))
  inputs, mask, targets, weights = (np.asarray(x) for x in steps.model_inputs(
      batch, tokens, jax.random.key(1), causal=causal))
  logits = np.asarray(model(jnp.asarray(inputs), jnp.asarray(mask)), np.float64)
  logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
      - logits.max(-1, keepdims=True)
  nll = -np.take_along_axis(logp, targets[..., None], -1)[..., 0]
  w = weights > 0
  assert got["tokens"] == w.sum() > 0
  assert got["loss"] == pytest.approx(nll[w].mean(), rel=1e-5)
  assert got["accuracy"] == pytest.approx((logits.argmax(-1) == targets)[w].mean())
  assert got["perplexity"] == pytest.approx(np.exp(nll[w].mean()), rel=1e-5)
  if not causal:  # (B): only the ~15% masked positions count
    assert 0.05 < w.sum() / (targets != tokens[1]).sum() < 0.3


def test_unknown_gin_parameters_are_errors(tmp_path):
  result = subprocess.run([sys.executable, "-m", "performer.cli", "train", "--gin",
                           "gin/mini/trembl_u_performer_relu.gin", "--gin_param",
                           "ModelConfig.num_layerz = 3", "--workdir", str(tmp_path)],
                          capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
  assert result.returncode == 2 and "num_layerz" in result.stderr
  assert "Traceback" not in result.stderr


def test_resuming_with_another_optimizer_is_a_clear_error(data, tmp_path):
  _train(data, tmp_path, "TrainConfig.steps = 3")
  with pytest.raises(UserError, match="does not fit this configuration"):
    _train(data, tmp_path, "TrainConfig.steps = 6", "OptimConfig.clip_norm = 0.0")


def test_eval_of_a_folder_that_is_not_a_run(tmp_path):
  with pytest.raises(UserError, match="no config.gin"):
    evaluate.run(str(tmp_path), "test")


def test_a_performer_starts_from_a_trained_transformer(data, tmp_path):
  """Backward compatibility (paper Fig. 5): same weights, attention swapped."""
  _train(data, tmp_path / "exact", "TrainConfig.steps = 3", "ModelConfig.attention = 'exact'",
         "ModelConfig.attention_options = {}")
  exact_valid = [r for r in _rows(tmp_path / "exact") if r["split"] == "valid"][-1]
  _train(data, tmp_path / "favor", "TrainConfig.steps = 3",
         "ModelConfig.attention_options = {'num_features': 256}",
         f"TrainConfig.init_from = '{tmp_path / 'exact'}'", "OptimConfig.learning_rate = 0.0")
  favor_valid = [r for r in _rows(tmp_path / "favor") if r["split"] == "valid"][-1]
  # With learning rate 0 the Performer keeps the Transformer's weights: its loss is close.
  assert abs(favor_valid["loss"] - exact_valid["loss"]) < 0.05
  scratch = _train(data, tmp_path / "scratch", "TrainConfig.steps = 3",
                   "OptimConfig.learning_rate = 0.0")
  assert abs(scratch["loss"] - exact_valid["loss"]) > abs(favor_valid["loss"] - exact_valid["loss"])
  with pytest.raises(UserError, match="only the attention may differ"):
    _train(data, tmp_path / "bad", "TrainConfig.steps = 3", "ModelConfig.d_ff = 48",
           f"TrainConfig.init_from = '{tmp_path / 'exact'}'")


def test_kill_9_then_resume_equals_the_uninterrupted_run(data, tmp_path):
  import signal  # pylint: disable=import-outside-toplevel
  import time  # pylint: disable=import-outside-toplevel
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  params = [f"DataConfig.path = '{data}'", *TINY, "TrainConfig.steps = 60",
            "TrainConfig.checkpoint_every = 5", "TrainConfig.eval_every = 60"]
  cmd = [sys.executable, "-m", "performer.cli", "train", "--gin",
         "gin/mini/trembl_u_performer_relu.gin", "--workdir", str(tmp_path / "killed")]
  for p in params:
    cmd += ["--gin_param", p]
  proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  checkpoints = tmp_path / "killed" / "checkpoints"
  deadline = time.time() + 120
  while time.time() < deadline and not (checkpoints.exists() and any(
      n.isdigit() and int(n) >= 10 for n in os.listdir(checkpoints))):
    time.sleep(0.05)
  proc.send_signal(signal.SIGKILL)  # mid-run, possibly mid-save
  proc.wait()
  assert proc.returncode == -signal.SIGKILL
  assert subprocess.run(cmd, cwd=root, capture_output=True).returncode == 0  # resumes
  _train(data, tmp_path / "straight", *params[1:])
  last = lambda w: [r for r in _rows(w) if r["split"] == "valid"][-1]
  assert last(tmp_path / "killed") == last(tmp_path / "straight")
