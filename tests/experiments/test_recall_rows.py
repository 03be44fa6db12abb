"""recall-rows: FAVOR's rows on a trained recall model's own q, k against exact softmax."""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

from performer import configurables
from performer.data import mqar
from performer.errors import UserError
from performer.experiments import recall_rows
from performer.train import trained
from performer.train import evaluate, loop
from testlib import ROOT



def _train(tmp_path, name, attention, options):
  task = mqar.MQARConfig(vocab_size=32, seq_len=16, num_kv=2, eval_examples=24, train_pool=40)
  data = tmp_path / "mqar"
  if not data.exists():
    mqar.prepare(task, str(data))
  configurables.parse([os.path.join(ROOT, "gin/recall/base.gin"),
                       os.path.join(ROOT, "gin/recall/zoology.gin")], [
      f"DataConfig.path = '{data}'", "DataConfig.seq_len = 16", "DataConfig.batch_size = 8",
      "ModelConfig.d_model = 16", "ModelConfig.qk_dim = 8", f"ModelConfig.attention = {attention!r}",
      f"ModelConfig.attention_options = {options!r}", "TrainConfig.steps = 6",
      "TrainConfig.eval_every = 6", "TrainConfig.checkpoint_every = 6", "TrainConfig.log_every = 6"])
  loop.run(configurables.resolve(), str(tmp_path / name), progress=False)
  return str(tmp_path / name)


def test_favor_rows_reproduce_the_model_and_exact_rows_are_softmax_of_its_q_and_k(tmp_path):
  run = _train(tmp_path, "favor", "performer_softmax", {"num_features": 32})
  result = recall_rows.run(recall_rows.RowsConfig(run=run, split="test", examples=24))
  e, row = result.extra, result.rows[0]
  assert e["own_logits_check"] < 1e-4 and e["queries"] == 48
  # Through FAVOR's rows the model scores what `performer eval` scores on the same 24 examples.
  assert e["accuracy_favor"] == pytest.approx(evaluate.run(run, "test")["accuracy"])
  assert 0 <= row["l1"] <= 2 and 0 < row["favor_max"] <= 1 and 0 <= row["argmax_agree"] <= 1
  # The exact rows' largest weight and answer weight, computed here from the model's q and k.
  _, model, _ = trained.load(run)
  maxima, answers = [], []
  for i in range(24):
    inputs, _, positions = mqar.example(mqar.load(str(tmp_path / "mqar")), 0, "test", i)
    x = model.blocks[0].attention_input(model.hidden_states(jnp.asarray(inputs)[None])[0])
    q, k, _ = (np.asarray(t[0, :, 0], np.float64) for t in model.blocks[0].heads(x))
    for j, p in enumerate(positions):
      logits = k[:p + 1] @ q[p] / np.sqrt(q.shape[-1])
      weights = np.exp(logits - logits.max())
      weights /= weights.sum()
      maxima.append(weights.max())
      answers.append(weights[2 * j + 1])
  assert row["exact_max"] == pytest.approx(np.mean(maxima), abs=1e-5)
  assert row["exact_answer"] == pytest.approx(np.mean(answers), abs=1e-5)


def test_runs_it_cannot_read_get_one_line_errors(tmp_path):
  run = tmp_path / "exact"  # what the run is comes from its config, before any checkpoint
  run.mkdir()
  mqar.prepare(mqar.MQARConfig(vocab_size=32, seq_len=16, num_kv=2, eval_examples=4),
               str(tmp_path / "mqar"))
  configurables.parse([os.path.join(ROOT, "gin/recall/base.gin")], [
      f"DataConfig.path = '{tmp_path / 'mqar'}'", "DataConfig.seq_len = 16",
      "ModelConfig.attention = 'exact'"])
  (run / "config.json").write_text(json.dumps(configurables.resolve().to_json()))
  with pytest.raises(UserError, match="its attention is exact; recall-rows reads FAVOR's rows"):
    recall_rows.run(recall_rows.RowsConfig(run=str(run)))
  with pytest.raises(UserError, match="--examples must be >= 1"):
    recall_rows.run(recall_rows.RowsConfig(run=run, examples=0))
