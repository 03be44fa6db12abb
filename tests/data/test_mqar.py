"""MQAR (performer/data/mqar.py): answers recoverable, Zoology's placement law, pure in (seed, step)."""

import json

import numpy as np
import pytest
from scipy import stats

from performer import cli, memory
from performer.data import mqar, pipeline
from performer.errors import UserError

TASK = mqar.MQARConfig(vocab_size=512, seq_len=64, num_kv=4, eval_examples=50, seed=3)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
  out = str(tmp_path_factory.mktemp("mqar") / "L64_kv4")
  mqar.prepare(TASK, out)
  return out


def _data(folder, **kw):
  return pipeline.DataConfig(**{"path": folder, "seq_len": 64, "batch_size": 8, "seed": 0, **kw})


def _read_answers(inputs, kv):
  """A brute-force reader: each query key's value from the context, by search."""
  context = {int(inputs[i]): int(inputs[i + 1]) for i in range(0, 2 * kv, 2)}
  return {p: context[int(inputs[p])] for p in range(2 * kv, len(inputs)) if inputs[p] in context}


def test_every_answer_is_in_the_context_and_only_queries_are_scored(folder):
  batch = pipeline.batches(_data(folder), "train", causal=True).train_batch(5)
  kv, half = TASK.num_kv, TASK.vocab_size // 2
  for inputs, targets, positions in zip(batch["inputs"], batch["targets"], batch["positions"]):
    answers = _read_answers(inputs, kv)
    assert sorted(answers) == sorted(positions.tolist()) and len(answers) == kv
    assert {p: int(targets[p]) for p in positions} == answers
    assert np.count_nonzero(targets) == kv  # every other target is filler, unscored
    keys, values = inputs[0:2 * kv:2], inputs[1:2 * kv:2]
    assert len(set(keys)) == kv and len(set(values)) == kv  # distinct within the example
    assert keys.min() >= 1 and keys.max() < half and values.min() >= half
    assert values.max() < TASK.vocab_size
    query_part = inputs[2 * kv:]
    assert np.count_nonzero(query_part) == kv and set(query_part[query_part > 0]) == set(keys)
    assert all((p - 2 * kv) % 2 == 0 for p in positions)  # first token of a two-token slot
    assert int(inputs[positions[0]]) == int(keys[0])  # the j-th key at the j-th drawn slot


def test_query_slots_follow_zoologys_power_law():
  # The first key's slot is the first draw, distributed exactly as p_i ~ a i^(a-1).
  n = 3000
  slots = np.array([(mqar.example(TASK, 11, "train", i)[2][0] - 2 * TASK.num_kv) // 2
                    for i in range(n)])
  p = mqar.slot_probabilities(TASK.slots, TASK.power_a)
  assert p[0] / p[1] == pytest.approx(2 ** (1 - TASK.power_a))
  observed = np.bincount(slots, minlength=TASK.slots)

  def fit(counts):  # chi-square goodness of fit, bins merged from the tail until expected >= 5
    expected = p * n
    keep = max(k for k in range(1, TASK.slots + 1) if expected[k - 1:].sum() >= 5)
    obs = np.append(counts[:keep - 1], counts[keep - 1:].sum())
    exp = np.append(expected[:keep - 1], expected[keep - 1:].sum())
    return stats.chisquare(obs, exp).pvalue

  assert fit(observed) > 1e-3
  uniform = np.bincount(np.random.default_rng(0).integers(0, TASK.slots, n), minlength=TASK.slots)
  assert fit(uniform) < 1e-6  # the test can tell another law


def test_batches_are_pure_functions_of_seed_and_step_and_process_split(folder):
  cfg = _data(folder)
  one, again = (pipeline.batches(cfg, "train", causal=True) for _ in range(2))
  streamed = list(one.train_batches(3, 6))
  for step, batch in zip(range(3, 6), streamed):
    for k in ("inputs", "targets", "ids", "positions"):
      np.testing.assert_array_equal(batch[k], again.train_batch(step)[k])
  parts = [pipeline.batches(cfg, "train", causal=True, process_index=i, process_count=2)
           .train_batch(4) for i in range(2)]
  np.testing.assert_array_equal(np.concatenate([p["inputs"] for p in parts]),
                                one.train_batch(4)["inputs"])
  other = pipeline.batches(_data(folder, seed=1), "train", causal=True).train_batch(4)
  assert not np.array_equal(other["inputs"], one.train_batch(4)["inputs"])


def test_eval_sets_are_fixed_whatever_the_run_seed_and_padded_past_the_end(folder):
  passes = [list(pipeline.batches(_data(folder, seed=s, batch_size=16), "test",
                                  causal=True).eval_batches()) for s in (0, 9)]
  assert len(passes[0]) == 4  # ceil(50 / 16)
  for a, b in zip(*passes):
    np.testing.assert_array_equal(a["inputs"], b["inputs"])
  last = passes[0][-1]
  assert last["ids"].tolist() == [48, 49] + [-1] * 14
  assert not last["targets"][2:].any()  # padding rows score nothing
  valid = next(pipeline.batches(_data(folder), "valid", causal=True).eval_batches())
  assert not np.array_equal(valid["inputs"], passes[0][0]["inputs"][:8])
  assert pipeline.vocab_ids(_data(folder)) == (512, 0, 0, 0, 1)


def test_bad_input_gets_one_line_errors(folder, tmp_path, capsys):
  with pytest.raises(UserError, match="train a \\(U\\) model"):
    pipeline.batches(_data(folder), "train", causal=False)
  with pytest.raises(UserError, match="seq_len 128 differs from the MQAR task's L = 64"):
    pipeline.batches(_data(folder, seq_len=128), "train", causal=True)
  with pytest.raises(UserError, match="no 'ood' split"):
    pipeline.batches(_data(folder), "ood", causal=True)
  out = str(tmp_path / "t")
  assert cli.main(["prepare-mqar", "--out", out, "--seq-len", "10", "--num-kv", "4"]) == 2
  assert "--seq-len 10 leaves 1 two-token query slots" in capsys.readouterr().err
  assert cli.main(["prepare-mqar", "--out", out, "--seq-len", "4", "--num-kv", "4"]) == 2
  assert "leaves 0 two-token" in capsys.readouterr().err  # not a negative count
  assert cli.main(["prepare-mqar", "--out", out, "--vocab-size", str(2**31)]) == 2  # int32 ids
  assert "at most 2147483647" in capsys.readouterr().err
  assert cli.main(["prepare-mqar", "--out", out, "--power-a", "0"]) == 2
  assert cli.main(["prepare-mqar", "--out", out, "--vocab-size", "6", "--num-kv", "4"]) == 2
  assert cli.main(["prepare-mqar", "--out", out, "--seq-len", "32"]) == 0
  with open(f"{out}/stats.json") as f:
    assert json.load(f)["chance_accuracy"] == 1 / 4096
  assert cli.main(["prepare-mqar", "--out", out, "--seq-len", "48"]) == 2  # another task there
  assert "already holds a different dataset" in capsys.readouterr().err


def test_a_task_too_long_for_int32_or_for_memory_is_refused_before_any_array(tmp_path, capsys,
                                                                              monkeypatch):
  out = tmp_path / "t"
  assert cli.main(["prepare-mqar", "--out", str(out), "--seq-len", "100000000000"]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "--seq-len must be at most 2147483647" in err, err
  # 1 MiB of memory: L = 10^6 needs about 15 MiB. raising=False: the old code had no such
  # function and, ignoring memory, numpy stopped with a MemoryError traceback.
  monkeypatch.setattr(memory, "host_available_bytes", lambda: 2**20, raising=False)
  assert cli.main(["prepare-mqar", "--out", str(out), "--seq-len", "1000000"]) == 2
  err = capsys.readouterr().err
  assert err == ("performer prepare-mqar: error: --seq-len 1000000: generating an example needs "
                 "about 15.3 MiB, more than the 1.0 MiB of memory available\n")
  assert not out.exists()
