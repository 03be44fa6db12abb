"""ListOps (performer/data/listops.py): labels by an independent evaluator, LRA's length, depth and
argument rules, de-duplication, determinism, and the classifier that trains on it."""

import json
import os
import time

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from performer import cli, configurables
from performer.data import listops, mqar, pipeline
from performer.data.shards import TokenShards
from performer.errors import UserError
from performer.models.config import ModelConfig
from performer.models.transformer import TransformerLM
from performer.train import early_stop, loop
from performer.train.config import TrainConfig
from testlib import ROOT

TASK = listops.ListOpsConfig(train_examples=300, valid_examples=40, test_examples=40,
                             min_length=20, max_length=120, max_depth=6, max_args=5, seed=7)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
  out = str(tmp_path_factory.mktemp("listops") / "data")
  listops.prepare(TASK, out)
  return out


def _evaluate(tokens):
  """(value, depth, argument counts) of one expression, by a stack machine over the token
  names: the reference the generator's labels are checked against."""
  names = [listops.TOKENS[t] for t in tokens]
  stack, deepest, counts = [], 0, []
  for name in names:
    if name.startswith("["):
      stack.append((name[1:], []))
      deepest = max(deepest, len(stack))
    elif name == "]":
      op, args = stack.pop()
      counts.append(len(args))
      value = {"MIN": min(args), "MAX": max(args), "SM": sum(args) % 10,
               "MED": int(np.median(args))}[op]  # LRA's median, truncated
      if not stack:
        return value, deepest, counts
      stack[-1][1].append(value)
    else:
      stack[-1][1].append(int(name))
      deepest = max(deepest, len(stack) + 1)  # a digit is a level below its operator
  raise AssertionError(f"unclosed expression {' '.join(names)}")


def _split(folder, split):
  return TokenShards(os.path.join(folder, split)), np.load(os.path.join(folder, split,
                                                                      "labels.npy"))


def test_every_label_is_the_expressions_value_and_every_rule_holds(folder):
  seen = set()
  for split in listops.SPLITS:
    records, labels = _split(folder, split)
    assert len(records) == len(labels) == TASK.sizes[split]
    for record, label in zip(records, labels):
      assert record[0] == listops.CLS
      tokens = record[1:].tolist()
      value, depth, counts = _evaluate(tokens)
      assert value == label
      assert TASK.min_length < len(tokens) < TASK.max_length
      assert 2 <= depth <= TASK.max_depth
      assert all(2 <= c <= TASK.max_args for c in counts)
      seen.add(bytes(record))
  assert len(seen) == sum(TASK.sizes.values())  # no expression twice, within or across splits


def test_the_median_is_lras_truncated_one():
  assert listops.operate(2, [1, 2, 3, 4]) == 2 and listops.operate(2, [3, 8]) == 5
  assert listops.operate(2, [9, 1, 5]) == 5 and listops.operate(3, [9, 9, 3]) == 1
  assert listops.operate(0, [4, 2, 7]) == 2 and listops.operate(1, [4, 2, 7]) == 7


def test_stats_describe_the_written_examples(folder):
  with open(os.path.join(folder, "stats.json")) as f:
    stats = json.load(f)
  for split in listops.SPLITS:
    records, labels = _split(folder, split)
    s = stats["splits"][split]
    lengths = records.lengths() - 1  # without CLS
    assert s["count"] == len(records) and s["length"]["max"] == lengths.max()
    assert s["length"]["mean"] == pytest.approx(lengths.mean())
    assert sum(s["length_histogram"]["counts"]) == len(records)
    assert s["labels"] == np.bincount(labels, minlength=10).tolist()
    assert sum(s["depths"]) == len(records) and s["depths"][:2] == [0, 0]
    tokens = np.concatenate([records[i] for i in range(len(records))])
    assert s["operators"]["SM"] == int(np.sum(tokens == listops.OPERATOR + 3))
  g = stats["generator"]
  assert g["drawn"] == sum(TASK.sizes.values()) + g["too_short"] + g["too_long"] + g["duplicate"]


def test_a_seed_gives_one_dataset_and_another_seed_another(tmp_path, folder):
  again = str(tmp_path / "again")
  listops.prepare(TASK, again)
  other = str(tmp_path / "other")
  listops.prepare(listops.ListOpsConfig(**{**TASK.__dict__, "seed": 8}), other)
  for split in listops.SPLITS:
    a, b, c = (_split(f, split) for f in (folder, again, other))
    assert all(np.array_equal(a[0][i], b[0][i]) for i in range(len(a[0])))
    assert np.array_equal(a[1], b[1])
    assert not all(np.array_equal(a[0][i], c[0][i]) for i in range(len(a[0])))


def test_batches_pad_after_cls_and_carry_the_labels(folder):
  data = pipeline.DataConfig(path=folder, seq_len=TASK.max_length, batch_size=8, seed=0)
  records, labels = _split(folder, "valid")
  batches = list(pipeline.batches(data, "valid", causal=False).eval_batches())
  assert len(batches) == 5 and batches[-1]["ids"].tolist() == list(range(32, 40))
  first = batches[0]
  assert first["inputs"].shape == (8, TASK.max_length)
  assert np.array_equal(first["inputs"][0, :len(records[0])], records[0])
  assert np.all(first["inputs"][0, len(records[0]):] == listops.PAD)
  assert first["labels"].tolist() == labels[:8].tolist()
  train = pipeline.batches(data, "train", causal=False)
  assert np.array_equal(train.train_batch(3)["inputs"], train.train_batch(3)["inputs"])
  with pytest.raises(UserError, match="seq_len 100 is shorter"):
    pipeline.batches(pipeline.DataConfig(path=folder, seq_len=100), "train", causal=False)
  with pytest.raises(UserError, match="train a \\(B\\) model"):
    pipeline.batches(data, "train", causal=True)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_the_pooled_classifier_reads_the_first_token_or_the_mean_of_the_real_ones(pooling):
  cfg = ModelConfig(vocab_size=listops.IDS.size, max_len=12, num_layers=1, num_heads=2,
                    d_model=8, d_ff=16, dropout=0.0, causal=False, pooling=pooling,
                    num_classes=10)
  model = TransformerLM(cfg, rngs=nnx.Rngs(0))
  tokens = jnp.array([[1, 12, 3, 4, 16, 0, 0, 0, 0, 0, 0, 0]])
  mask = tokens != 0
  states = model.hidden_states(tokens, mask)[-1]
  want = states[:, 0] if pooling == "cls" else states[:, :5].mean(axis=1)
  logits = model(tokens, mask)
  assert logits.shape == (1, 1, 10)
  np.testing.assert_allclose(logits[:, 0], model.logits(want), rtol=1e-5, atol=1e-6)
  # Padding does not move a mean-pooled prediction: more pad tokens, the same logits.
  longer = jnp.pad(tokens, ((0, 0), (0, 4)))
  cfg16 = ModelConfig(**{**cfg.__dict__, "max_len": 16, "position_embeddings": False})
  m16 = TransformerLM(cfg16, rngs=nnx.Rngs(0))
  np.testing.assert_allclose(m16(longer, longer != 0), m16(tokens, mask), rtol=1e-5, atol=1e-6)


def test_pooling_needs_a_bidirectional_classifier():
  with pytest.raises(ValueError, match="causal = False, num_classes >= 2"):
    ModelConfig(vocab_size=17, max_len=8, causal=True, pooling="mean", num_classes=10)
  with pytest.raises(ValueError, match="pooling must be one of"):
    ModelConfig(vocab_size=17, max_len=8, causal=False, pooling="max", num_classes=10)


@pytest.mark.parametrize("args, message", [
    (("--min-length", "50", "--max-length", "51"), "--max-length must exceed --min-length + 1"),
    (("--train-examples", "0",), "--train-examples must be an integer >= 1"),
    (("--max-args", "1",), "--max-args must be an integer >= 2"),
    (("--operator-p", "1",), "--operator-p must be in (0, 1)"),
    (("--max-depth", "3", "--max-args", "3", "--min-length", "20", "--max-length", "40"),
     "no expression of --max-depth 3 and --max-args 3 is longer than 17 tokens"),
])
def test_bad_flags_are_one_line_errors(args, message, tmp_path, capsys):
  assert cli.main(["prepare-listops", "--out", str(tmp_path / "x"), *args]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and message in err, err
  assert not (tmp_path / "x").exists()


def test_the_plateau_rule_counts_evals_since_the_best():
  train = lambda patience, delta=0.0: TrainConfig(stop_patience=patience, stop_min_delta=delta)
  assert not early_stop.plateaued(train(0), [0.5, 0.5, 0.5, 0.5])  # off
  assert early_stop.plateaued(train(2), [0.3, 0.5, 0.4, 0.5])  # 0.5 at eval 1, two evals ago
  assert not early_stop.plateaued(train(2), [0.3, 0.5, 0.4, 0.51])  # beaten by 0.01
  assert early_stop.plateaued(train(2, 0.02), [0.3, 0.5, 0.4, 0.51])  # not by more than 0.02
  assert not early_stop.plateaued(train(3), [0.3, 0.5, 0.4, 0.5])


def test_a_classifier_trains_stops_on_a_plateau_resumes_complete_and_scores_each_example(
    folder, tmp_path):
  def train(*extra):
    configurables.parse([os.path.join(ROOT, "gin/listops/base.gin"),
                         os.path.join(ROOT, "tests/tiny.gin")], [
        f"DataConfig.path = '{folder}'", f"DataConfig.seq_len = {TASK.max_length}",
        "ModelConfig.pooling = 'mean'", "ModelConfig.attention = 'performer_softmax'",
        "ModelConfig.attention_options = {'num_features': 8}", "TrainConfig.steps = 20",
        "TrainConfig.log_every = 2", "TrainConfig.eval_every = 2",
        "TrainConfig.checkpoint_every = 2", *extra])
    return loop.run(configurables.resolve(), str(tmp_path / "run"), progress=False)
  # lr 0: valid accuracy never moves, so the third eval (step 6) is two evals past the best.
  plateau = ("OptimConfig.learning_rate = 0.0", "TrainConfig.stop_patience = 2")
  train(*plateau)
  run = str(tmp_path / "run")
  assert early_stop.stopped_at(run) == 6
  with open(os.path.join(run, early_stop.STOPPED)) as f:
    assert json.load(f)["rule"] == "plateau"
  assert train(*plateau) is None  # complete: nothing to train
  assert cli.main(["eval", "--workdir", run, "--split", "test"]) == 0
  with open(os.path.join(run, "eval_test.json")) as f:
    result = json.load(f)
  assert result["tokens"] == TASK.test_examples and result["mask_draws"] == 1
  with np.load(os.path.join(run, "eval_test_sequences.npz")) as f:
    assert f["tokens"].tolist() == [1.0] * TASK.test_examples
    assert f["correct_sum"].sum() == pytest.approx(result["accuracy"] * TASK.test_examples)


def test_too_few_distinct_expressions_stop_with_an_error(tmp_path):
  # Depth 2 with 2 arguments: 4 operators x 100 digit pairs, and 10 lone digits.
  task = listops.ListOpsConfig(train_examples=500, valid_examples=1, test_examples=1,
                               min_length=0, max_length=5, max_depth=2, max_args=2)
  start = time.perf_counter()
  with pytest.raises(UserError, match="only 410 of 502 distinct expressions .*none new in the last"):
    listops.prepare(task, str(tmp_path / "x"))
  assert time.perf_counter() - start < 60  # found all 410, then STALE_DRAWS more: seconds
  assert not (tmp_path / "x").exists()


def test_a_model_that_cannot_read_the_labels_is_refused_before_training(folder):
  base = [os.path.join(ROOT, "gin/listops/base.gin"), os.path.join(ROOT, "tests/tiny.gin")]
  data = [f"DataConfig.path = '{folder}'", f"DataConfig.seq_len = {TASK.max_length}"]
  for binding, message in (("ModelConfig.num_classes = 5", "num_classes = 10"),
                           ("ModelConfig.pooling = ''", "set ModelConfig.pooling")):
    configurables.parse(base, [*data, binding])
    with pytest.raises(UserError, match=message):
      configurables.resolve()


def test_a_classifier_on_a_language_modelling_dataset_is_refused(tmp_path):
  task = mqar.MQARConfig(vocab_size=16, seq_len=16, num_kv=2, eval_examples=4, train_pool=0)
  mqar.prepare(task, str(tmp_path / "mqar"))
  configurables.parse([os.path.join(ROOT, "gin/recall/base.gin")], [
      f"DataConfig.path = '{tmp_path / 'mqar'}'", "DataConfig.seq_len = 16",
      "ModelConfig.causal = False", "ModelConfig.pooling = 'mean'", "ModelConfig.num_classes = 4"])
  with pytest.raises(UserError, match="pooling makes a classifier, but .* language-modelling"):
    configurables.resolve()
