"""The real training loop on the real sample: logs, checkpoints, resume, divergence, eval."""

import dataclasses
import json
import os
import re
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from performer import cli, configurables, memory
from performer.data import gutenberg, masking, pg19, pipeline, samples
from performer.errors import UserError
from performer.figures import runs
from performer.train import evaluate, loop, metrics, sharding, steps
from performer.train import state as state_lib
from performer.train.checkpoint import Checkpoints
from performer.train.config import Config
import testlib
from testlib import ROOT

# Over tests/tiny.gin (testlib.gin): a Performer's features and a cadence that logs, evaluates
# and saves within a few steps.
TINY = ["ModelConfig.attention_options = {'num_features': 8}", "TrainConfig.log_every = 2",
        "TrainConfig.eval_every = 3", "TrainConfig.checkpoint_every = 3",
        "TrainConfig.eval_batches = 2"]



def _train(data, workdir, *extra, config="gin/mini/trembl_u_performer_relu.gin"):
  configurables.parse(testlib.gin(config),
                      [f"DataConfig.path = '{data}'", *TINY, *extra])
  return loop.run(configurables.resolve(), str(workdir), progress=False,
                  records={"config.gin": configurables.operative_config()})  # as the CLI does


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
  config = json.load(open(tmp_path / "config.json"))  # the same run, as if its rate were huge
  config["optim"]["learning_rate"] = 1e30
  (tmp_path / "config.json").write_text(json.dumps(config))
  with pytest.raises(loop.TrainingDiverged, match="non-finite loss or gradient at step .*last "
                     "good checkpoint is step 3, from which re-running resumes"):
    _train(data, tmp_path, "TrainConfig.steps = 9", "OptimConfig.learning_rate = 1e30")
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["3"]
  result = evaluate.run(str(tmp_path), "valid")  # the kept checkpoint still loads and works
  assert result["step"] == 3 and np.isfinite(result["loss"])
  with pytest.raises(loop.TrainingDiverged, match=r"step [12] \(checked steps 0-[12]\); stopped; there is no checkpoint "
                     "yet, so re-running starts from scratch"):
    _train(data, tmp_path / "fresh", "TrainConfig.steps = 9", "OptimConfig.learning_rate = 1e30")
  # Past favor.MAX_NORM a Performer-softmax gives NaN: the message says so.
  with pytest.raises(loop.TrainingDiverged, match="passes favor.MAX_NORM = 100"):
    _train(data, tmp_path / "softmax", "TrainConfig.steps = 9", "OptimConfig.learning_rate = 1e30",
           config="gin/mini/trembl_u_performer_softmax.gin")


@pytest.mark.parametrize("causal", [True, False])
def test_eval_metrics_match_a_hand_computation(data, tmp_path, causal):
  config = "gin/mini/trembl_u_performer_relu.gin" if causal else "gin/mini/trembl_b_performer_relu.gin"
  configurables.parse(testlib.gin(config), [f"DataConfig.path = '{data}'", *TINY])
  cfg = configurables.resolve()
  model, _ = state_lib.build(cfg)
  batch = next(pipeline.batches(cfg.data, "valid", causal=causal).eval_batches())
  model.eval()
  mlm = cfg.data.mlm
  total, each = jax.device_get(steps.eval_step(model, batch, steps.eval_key(0), vocab=cfg.vocab,
                                               causal=causal, mlm=mlm))
  got = metrics.summarize(total)
  inputs, mask, targets, weights = (np.asarray(x) for x in steps.model_inputs(
      batch, cfg.vocab, jax.random.key(1), causal=causal, mlm=mlm))
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
    assert 0.05 < w.sum() / (targets != cfg.vocab.pad).sum() < 0.3
  # Per example: the same sums, sequence by sequence (what eval's per-sequence file holds).
  np.testing.assert_array_equal(each["ids"], batch["ids"])
  np.testing.assert_array_equal(each["tokens"], w.sum(-1))
  np.testing.assert_allclose(each["loss_sum"], (nll * w).sum(-1), rtol=1e-4, atol=1e-4)
  np.testing.assert_array_equal(each["correct_sum"], ((logits.argmax(-1) == targets) & w).sum(-1))


def test_unknown_gin_parameters_are_errors(tmp_path):
  result = subprocess.run([sys.executable, "-m", "performer.cli", "train", "--gin",
                           "gin/mini/trembl_u_performer_relu.gin", "--gin_param",
                           "ModelConfig.num_layerz = 3", "--workdir", str(tmp_path)],
                          capture_output=True, text=True,
                          cwd=ROOT)
  assert result.returncode == 2 and "num_layerz" in result.stderr
  assert "Traceback" not in result.stderr


def test_resuming_another_run_names_the_difference_and_allowed_changes_are_recorded(data, tmp_path):
  _train(data, tmp_path, "TrainConfig.steps = 3")
  with pytest.raises(UserError, match=r"holds another run: optim.clip_norm is 0.5 there and 0.0 here; "
                                      "resume it with its own config"):
    _train(data, tmp_path, "TrainConfig.steps = 6", "OptimConfig.clip_norm = 0.0")
  # a Performer-ReLU run resumed as Performer-softmax: refused, naming both differences
  # (a seed is the whole replicate: the data order and the features W follow it)
  with pytest.raises(UserError, match=r"data.seed is 0 there and 4 here \(and 3 more: "
                                      r"model.attention, model.attention_options, train.seed\)"):
    _train(data, tmp_path, "TrainConfig.steps = 6", "ModelConfig.attention = 'performer_softmax'",
           "TrainConfig.seed = 4")
  assert not (tmp_path / "resumes.jsonl").exists()
  _train(data, tmp_path, "TrainConfig.steps = 6", "TrainConfig.log_every = 3")  # how long, how often
  record = json.loads((tmp_path / "resumes.jsonl").read_text())
  assert record["step"] == 3 and record["changed"] == {"train.log_every": [2, 3],
                                                       "train.steps": [3, 6]}
  assert json.load(open(tmp_path / "config.json"))["train"]["steps"] == 6


def test_eval_of_a_folder_that_is_not_a_run(tmp_path):
  with pytest.raises(UserError, match="no config.json"):
    evaluate.run(str(tmp_path), "test")
  (tmp_path / "file").write_text("")
  with pytest.raises(UserError, match="file is a file, not a `performer train` workdir"):
    evaluate.run(str(tmp_path / "file"), "test")


def test_a_performer_starts_from_a_trained_transformer(data, tmp_path):
  """Backward compatibility (paper Fig. 5): same weights, attention swapped."""
  _train(data, tmp_path / "exact", "TrainConfig.steps = 3", "ModelConfig.attention = 'exact'",
         "ModelConfig.attention_options = {}")
  exact_valid = [r for r in _rows(tmp_path / "exact") if r["split"] == "valid"][-1]
  _train(data, tmp_path / "favor", "TrainConfig.steps = 3",
         "ModelConfig.attention_options = {'num_features': 256, 'redraw_every': 1000}",
         f"TrainConfig.init_from = '{tmp_path / 'exact'}'", "OptimConfig.learning_rate = 0.0")
  favor_rows = [r for r in _rows(tmp_path / "favor") if r["split"] == "valid"]
  favor_valid = favor_rows[-1]
  # With learning rate 0 the Performer keeps the Transformer's weights: its loss is close.
  assert abs(favor_valid["loss"] - exact_valid["loss"]) < 0.05
  # The transferred model is scored before its first step (Fig. 5's starting point); with
  # learning rate 0 and no redraw yet, step 3 scores the same model again.
  assert [r["step"] for r in favor_rows] == [0, 3]
  assert favor_rows[0]["loss"] == pytest.approx(favor_valid["loss"], abs=1e-5)
  assert all(r["step"] > 0 for r in _rows(tmp_path / "exact"))  # not a transfer: no step 0
  scratch = _train(data, tmp_path / "scratch", "TrainConfig.steps = 3",
                   "OptimConfig.learning_rate = 0.0")
  assert abs(scratch["loss"] - exact_valid["loss"]) > abs(favor_valid["loss"] - exact_valid["loss"])
  source_files = sorted(str(p) for p in (tmp_path / "exact").rglob("*"))
  with pytest.raises(UserError, match=r"step 3: model/blocks/0/mlp_in/bias has shape \(32,\) in "
                     r"the checkpoint, \(48,\) in the model; only the attention may differ"):
    _train(data, tmp_path / "bad", "TrainConfig.steps = 3", "ModelConfig.d_ff = 48",
           f"TrainConfig.init_from = '{tmp_path / 'exact'}'")
  assert sorted(str(p) for p in (tmp_path / "exact").rglob("*")) == source_files  # untouched
  with pytest.raises(UserError, match="has no checkpoints/ folder"):
    _train(data, tmp_path / "bad", "TrainConfig.steps = 3",
           f"TrainConfig.init_from = '{tmp_path / 'nowhere'}'")
  assert not (tmp_path / "nowhere").exists()


@pytest.mark.slow  # ~40 s; test_run_logs_checkpoints_and_resumes_exactly covers exact resume by default
def test_kill_9_then_resume_equals_the_uninterrupted_run(data, tmp_path):
  import signal  # pylint: disable=import-outside-toplevel
  import time  # pylint: disable=import-outside-toplevel
  params = [f"DataConfig.path = '{data}'", *TINY, "TrainConfig.steps = 60",
            "TrainConfig.checkpoint_every = 5", "TrainConfig.eval_every = 60"]
  cmd = [sys.executable, "-m", "performer.cli", "train", "--gin",
         "gin/mini/trembl_u_performer_relu.gin", "--gin", testlib.TINY,
         "--workdir", str(tmp_path / "killed")]
  for p in params:
    cmd += ["--gin_param", p]
  proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  checkpoints = tmp_path / "killed" / "checkpoints"
  deadline = time.time() + 120
  while time.time() < deadline and not (checkpoints.exists() and any(
      n.isdigit() and int(n) >= 10 for n in os.listdir(checkpoints))):
    time.sleep(0.05)
  proc.send_signal(signal.SIGKILL)  # mid-run, possibly mid-save
  proc.wait()
  assert proc.returncode == -signal.SIGKILL
  assert subprocess.run(cmd, cwd=ROOT, capture_output=True).returncode == 0  # resumes
  _train(data, tmp_path / "straight", *params[1:])
  last = lambda w: [r for r in _rows(w) if r["split"] == "valid"][-1]
  assert last(tmp_path / "killed") == last(tmp_path / "straight")
  train_steps = lambda w: [r["step"] for r in _rows(w) if r["split"] == "train"]
  assert train_steps(tmp_path / "killed") == train_steps(tmp_path / "straight") == list(
      range(2, 61, 2))  # no rows twice


@pytest.fixture(scope="module")
def book(tmp_path_factory):
  root = tmp_path_factory.mktemp("pg19")
  source = gutenberg.sample_folder(samples.fetch("book"), str(root / "source"))
  pg19.prepare(pg19.PG19Config(source=source, vocab_size=500), str(root / "out"), progress=False)
  return str(root / "out")


def test_pg19_logs_token_and_word_perplexity_and_eval_keeps_one_file_per_split(book, tmp_path):
  _train(book, tmp_path, "TrainConfig.steps = 3", "ModelConfig.attention_options = {}",
         config="gin/mini/pg19_u_exact.gin")
  stats = json.load(open(os.path.join(book, "stats.json")))["splits"]
  rows = {(r["split"], r["step"]): r for r in _rows(tmp_path)}
  for split, row in (("train", rows["train", 2]), ("valid", rows["valid", 3])):
    assert row["multiplier"] == stats[split]["multiplier"] > 1
    assert row["perplexity"] == pytest.approx(np.exp(row["loss"]))  # per SentencePiece token
    assert row["word_perplexity"] == pytest.approx(np.exp(row["multiplier"] * row["loss"]))
  valid, test = evaluate.run(str(tmp_path), "valid"), evaluate.run(str(tmp_path), "test")
  assert test["multiplier"] == stats["test"]["multiplier"]
  assert test["word_perplexity"] == pytest.approx(np.exp(test["multiplier"] * test["loss"]))
  for split, result in (("valid", valid), ("test", test)):
    assert json.load(open(tmp_path / f"eval_{split}.json")) == json.loads(json.dumps(result))
    with np.load(tmp_path / result["sequences_file"]) as each:  # one row per window, summing up
      assert each["tokens"].sum() == result["tokens"] and len(each["ids"]) == len(set(each["ids"]))
      assert each["loss_sum"].sum() / result["tokens"] == pytest.approx(result["loss"], rel=1e-5)
  assert not (tmp_path / "eval.json").exists()


@pytest.mark.parametrize("binding, message", [
    ("TrainConfig.log_every = 0", "TrainConfig.log_every must be an integer >= 1, got 0"),
    ("TrainConfig.eval_every = 0", "TrainConfig.eval_every must be an integer >= 1"),
    ("TrainConfig.checkpoint_every = 0", "TrainConfig.checkpoint_every must be an integer >= 1"),
    ("TrainConfig.steps = -5", "TrainConfig.steps must be an integer >= 1, got -5"),
    ("DataConfig.batch_size = 0", "DataConfig.batch_size must be an integer >= 1, got 0"),
    ("OptimConfig.learning_rate = -1e-3",
     "OptimConfig.learning_rate must be a finite number >= 0"),
    ("OptimConfig.learning_rate = 1e400", "OptimConfig.learning_rate must be a finite number >= 0, "
                                          "got inf"),
    ("OptimConfig.learning_rate = float('nan')",
     r"gin: OptimConfig.learning_rate = float\('nan'\): not a gin value"),
    ("OptimConfig.b1 = 1.0", r"OptimConfig.b1 must be a finite number in \[0, 1\), got 1.0"),
    ("OptimConfig.weight_decay = -0.1", "OptimConfig.weight_decay must be a finite number >= 0"),
    ("OptimConfig.clip_norm = -1.0", "OptimConfig.clip_norm must be a finite number >= 0"),
    ("DataConfig.mlm_rate = 0.0", r"DataConfig.mlm_rate must be in \(0, 1\]"),
    ("DataConfig.mlm_random = 0.3", "mlm_mask and mlm_random must be >= 0 with a sum <= 1"),
    ("DataConfig.task = 'foo'", "unknown DataConfig.task 'foo': the dataset at .* has 'single', "
                                "'concat'"),
])
def test_bad_configurations_stop_before_any_work(data, tmp_path, binding, message):
  with pytest.raises(UserError, match=message):
    _train(data, tmp_path / "w", binding)
  assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("fresh", [False, True])
def test_a_step_bigger_than_memory_stops_before_training_and_leaves_no_folders(
    data, tmp_path, monkeypatch, fresh):
  # As much memory as the state and batch's lower bound (state_lib.check_size passes): XLA's
  # plan of the step holds more (activations, gradients), and is refused.
  configurables.parse(testlib.gin("gin/mini/trembl_u_performer_relu.gin"),
                      [f"DataConfig.path = '{data}'", *TINY])
  cfg = configurables.resolve()
  floor = state_lib.least_bytes(cfg, sharding.make_mesh(cfg.mesh))[0]
  monkeypatch.setattr(memory, "available_bytes", lambda: floor)
  workdir = tmp_path / "w"
  if not fresh:
    os.makedirs(workdir)
    (workdir / "notes.txt").write_text("mine")
  with pytest.raises(UserError, match=r"one train step needs [\d.]+ [KM]iB \(XLA's buffer plan\), "
                     rf"more than the {re.escape(memory.format_bytes(floor))} available on cpu; "
                     r"lower DataConfig.batch_size"):
    _train(data, workdir, "TrainConfig.steps = 3")
  # no empty checkpoints/ or tensorboard/, and no empty workdir made just for the lock
  assert os.listdir(tmp_path) == ([] if fresh else ["w"])
  assert fresh or os.listdir(workdir) == ["notes.txt"]


def test_a_seq_len_too_long_for_memory_is_refused_in_one_line_before_any_allocation(
    data, tmp_path):
  # L = 2 x 10^9: the position table alone is 119 GiB, its AdamW moments and gradient three
  # times that, the batch's ids and embeddings 507 GiB. Before the check the table was
  # allocated first and the OS killed the run; an address-space limit (8 GiB) keeps such a run
  # from the machine.
  limited = ("import resource, runpy, sys; "
             "resource.setrlimit(resource.RLIMIT_AS, (2**33, 2**33)); sys.argv[0] = 'performer'; "
             "runpy.run_module('performer.cli', run_name='__main__')")
  cmd = [sys.executable, "-c", limited, "train", "--gin", "gin/mini/trembl_u_performer_relu.gin",
         "--gin", testlib.TINY, "--workdir", str(tmp_path / "w")]
  for p in [f"DataConfig.path = '{data}'", "DataConfig.seq_len = 2000000000"]:
    cmd += ["--gin_param", p]
  start = time.time()
  result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=300)
  assert result.returncode == 2, result.stderr[-2000:]
  assert time.time() - start < 60
  err = result.stderr.strip().splitlines()
  assert len(err) == 1 and re.fullmatch(
      r"performer train: error: DataConfig.seq_len 2000000000 and batch_size 4: one train step "
      r"needs at least 983.48 GiB \(parameters, AdamW state and the largest gradient 476.84 GiB, "
      r"the batch's ids and embeddings 506.64 GiB\), more than the [\d.]+ [GMT]iB available on "
      r"cpu; lower DataConfig.seq_len or batch_size", err[0]), err
  assert not (tmp_path / "w").exists()


def test_resuming_another_shape_names_the_array_and_a_damaged_checkpoint_names_its_file(
    data, tmp_path):
  _train(data, tmp_path, "TrainConfig.steps = 3")

  def train(*extra):  # the CLI's whole stderr: one line, and no asyncio tracebacks after it
    cmd = [sys.executable, "-m", "performer.cli", "train", "--gin",
           "gin/mini/trembl_u_performer_relu.gin", "--gin", testlib.TINY,
           "--workdir", str(tmp_path)]
    for p in [f"DataConfig.path = '{data}'", *TINY, "TrainConfig.steps = 6", *extra]:
      cmd += ["--gin_param", p]
    result = subprocess.run(cmd, capture_output=True, text=True,
                            cwd=ROOT)
    assert result.returncode == 2, result.stderr
    said.append(result.stdout)
    return result.stderr.strip().splitlines()

  said = []
  assert train("ModelConfig.d_ff = 48") == [
      f"performer train: error: --workdir {tmp_path} holds another run: model.d_ff is 32 there "
      f"and 48 here; resume it with its own config ({tmp_path}/config.json) or use another "
      "--workdir"]
  assert said == [""]  # refused before it says what it would train (the trial's D4)
  os.remove(tmp_path / "config.json")  # an older run's workdir: the checkpoint's shapes tell
  assert train("ModelConfig.d_ff = 48") == [
      f"performer train: error: checkpoint 3 in {tmp_path}/checkpoints does not fit this "
      "configuration (model or optimizer changed since it was saved): model/blocks/0/mlp_in/bias "
      "has shape (32,) in the checkpoint, (48,) in the model; and 8 more. Use another --workdir, "
      "or the configuration in its config.gin"]
  data_files = sorted((tmp_path / "checkpoints" / "3" / "state").rglob("d/*"),
                      key=lambda p: p.stat().st_size)
  with open(data_files[-1], "r+b") as f:  # the largest array file, cut short
    f.truncate(100)
  # The error comes first. Once in six runs more stderr lines followed it
  # (not captured; tensorstore's late reads are the suspect).
  line = train()[0]
  assert re.fullmatch(f"performer train: error: checkpoint 3 is damaged \\({tmp_path}/checkpoints/"
                      r'3: ValueError: .*Error reading "[\w.]+/.*delete that folder to start '
                      r"afresh", line), line


def test_a_run_records_absolute_paths_and_its_workdir_works_from_anywhere(data, tmp_path,
                                                                         monkeypatch):
  monkeypatch.chdir(os.path.dirname(data))
  _train(os.path.basename(data), tmp_path / "w", "TrainConfig.steps = 3")
  assert f"'{data}'" in (tmp_path / "w" / "config.gin").read_text()  # gin may wrap the line
  assert json.load(open(tmp_path / "w" / "config.json"))["data"]["path"] == data
  monkeypatch.chdir(tmp_path)
  assert evaluate.run("w", "valid")["step"] == 3


def test_relative_data_and_init_from_paths_are_bound_absolute(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  configurables.parse([os.path.join(ROOT, "gin/mini/trembl_u_exact.gin")],
                      ["DataConfig.path = 'data/x'", "TrainConfig.init_from = 'runs/src'"])
  configurables.resolve_paths()
  assert configurables.build("DataConfig").path == str(tmp_path / "data" / "x")
  assert configurables.build("TrainConfig").init_from == str(tmp_path / "runs" / "src")
  assert f"'{tmp_path / 'runs' / 'src'}'" in configurables.operative_config()


def test_a_resume_drops_rows_of_the_killed_run_and_a_finished_workdir_says_so(data, tmp_path,
                                                                             capsys):
  _train(data, tmp_path, "TrainConfig.steps = 3")
  with open(tmp_path / "metrics.jsonl", "a") as f:  # what a run killed after step 5 left
    f.write(json.dumps({"step": 4, "split": "train", "loss": 9.0}) + "\n")
    f.write('{"step": 5, "split": "tr')
  _train(data, tmp_path, "TrainConfig.steps = 6")
  assert [(r["step"], r["split"]) for r in _rows(tmp_path)] == [
      (2, "train"), (3, "train"), (3, "valid"), (4, "train"), (6, "train"), (6, "valid")]
  assert all(r["loss"] != 9.0 for r in _rows(tmp_path))
  capsys.readouterr()
  assert _train(data, tmp_path, "TrainConfig.steps = 6") is None
  assert "is complete: its latest checkpoint is step 6 (TrainConfig.steps = 6)" in \
      capsys.readouterr().out
  assert len(_rows(tmp_path)) == 6
  resumes = (tmp_path / "resumes.jsonl").read_text()  # 3 -> 6 took effect; 6 -> 4 takes none
  assert _train(data, tmp_path, "TrainConfig.steps = 4") is None
  out = capsys.readouterr().out
  assert "is complete: its latest checkpoint is step 6 (TrainConfig.steps = 4)" in out
  assert "resuming with" not in out and (tmp_path / "resumes.jsonl").read_text() == resumes


def test_progress_bar_in_a_log_file_draws_at_most_every_30_s(data, tmp_path, capfd):
  configurables.parse(testlib.gin("gin/mini/trembl_u_performer_relu.gin"),
                      [f"DataConfig.path = '{data}'", *TINY, "TrainConfig.steps = 12",
                       "TrainConfig.log_every = 4"])
  loop.run(configurables.resolve(), str(tmp_path), progress=True)
  err = capfd.readouterr().err  # not a terminal: the start and the end, as this run took
  draws = [d for d in err.split("\r") if "train:" in d]  # under 30 s (log steps do not draw)
  assert [d.split("|")[2].split()[0] for d in draws] == ["0/12", "12/12"]


def test_eval_draws_a_progress_bar_over_its_batches_and_bounds_mask_draws(data, tmp_path, capfd):
  _train(data, tmp_path, "TrainConfig.steps = 1")
  capfd.readouterr()
  evaluate.run(str(tmp_path), "test")
  batches = pipeline.batches(Config.load(str(tmp_path)).data, "test", causal=True)
  count = sum(1 for _ in batches.eval_batches())
  draws = [d for d in capfd.readouterr().err.split("\r") if "eval test:" in d]
  assert draws and draws[-1].split("|")[2].split()[0] == f"{count}/{count}", draws
  assert batches.eval_batch_count() == count
  assert cli.main(["eval", "--workdir", str(tmp_path), "--mask-draws",
                   str(evaluate.MAX_MASK_DRAWS + 1)]) == 2
  assert capfd.readouterr().err == (
      f"performer eval: error: --mask-draws must be at most {evaluate.MAX_MASK_DRAWS} (more draws "
      f"only multiply the cost; train/evaluate.py says why), got {evaluate.MAX_MASK_DRAWS + 1}\n")


def test_mlm_proportions_come_from_the_data_config(data):
  configurables.parse(testlib.gin("gin/mini/trembl_b_performer_relu.gin"),
                      [f"DataConfig.path = '{data}'", *TINY, "DataConfig.mlm_rate = 0.5",
                       "DataConfig.mlm_mask = 0.25", "DataConfig.mlm_random = 0.0"])
  cfg = configurables.resolve()
  assert cfg.data.mlm == masking.MLM(rate=0.5, mask=0.25, random=0.0)
  batch = next(pipeline.batches(cfg.data, "train", causal=False).eval_batches())
  inputs, _, targets, weights = (np.asarray(x) for x in steps.model_inputs(
      batch, cfg.vocab, jax.random.key(0), causal=False, mlm=cfg.data.mlm))
  selected = weights > 0
  assert abs(selected.sum() / (targets != cfg.vocab.pad).sum() - 0.5) < 0.05
  masked = (inputs == cfg.vocab.mask)[selected].mean()
  assert abs(masked - 0.25) < 0.05 and (inputs[selected & (inputs != cfg.vocab.mask)] ==
                                        targets[selected & (inputs != cfg.vocab.mask)]).all()


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])  # Ctrl-C; a scheduler or a launcher
def test_ctrl_c_saves_a_checkpoint_and_a_second_run_on_the_workdir_is_refused(data, tmp_path, signame):
  import signal  # pylint: disable=import-outside-toplevel
  import time  # pylint: disable=import-outside-toplevel
  cmd = [sys.executable, "-m", "performer.cli", "train", "--gin",
         "gin/mini/trembl_u_performer_relu.gin", "--gin", testlib.TINY,
         "--workdir", str(tmp_path)]
  for p in [f"DataConfig.path = '{data}'", *TINY, "TrainConfig.steps = 100000",
            "TrainConfig.checkpoint_every = 100000", "TrainConfig.eval_every = 100000"]:
    cmd += ["--gin_param", p]
  proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    deadline = time.time() + 120
    while time.time() < deadline and not ((tmp_path / "metrics.jsonl").exists()
                                          and (tmp_path / "metrics.jsonl").read_text()):
      time.sleep(0.05)
    second = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert second.returncode == 2
    assert f"--workdir {tmp_path} is in use by pid {proc.pid} " in second.stderr.splitlines()[-1]
    proc.send_signal(getattr(signal, signame))
    _, err = proc.communicate(timeout=60)
  finally:
    proc.kill()  # a no-op once it has exited
  assert proc.returncode == 130, err
  saved = int(re.search(r"saved checkpoint (\d+); the same command resumes from step \1", err)[1])
  assert os.listdir(tmp_path / "checkpoints") == [str(saved)]
  assert max(r["step"] for r in _rows(tmp_path)) in (saved, saved - 1)  # logged every 2 steps
  done = subprocess.run(cmd + ["--gin_param", f"TrainConfig.steps = {saved}"], cwd=ROOT,
                        capture_output=True, text=True)
  assert f"is complete: its latest checkpoint is step {saved} " in done.stdout, done.stderr


@pytest.mark.slow  # ~40 s; per-step rotations are tested by tests/attention/test_reformer.py
def test_reformer_rotations_are_redrawn_each_step_and_restored_on_resume(data, tmp_path):
  reformer = ["ModelConfig.num_layers = 2",
              "ModelConfig.attention_options = {'chunk_size': 8, 'n_buckets': 4}"]
  _train(data, tmp_path, "TrainConfig.steps = 2", *reformer, config="gin/mini/trembl_u_reformer.gin")
  configurables.parse([os.path.join(tmp_path, "config.gin")], [])
  model, optimizer = state_lib.build(configurables.resolve())
  with Checkpoints(os.path.join(tmp_path, "checkpoints")) as ckpt:
    ckpt.restore(2, model, optimizer)
  for block in model.blocks:  # each layer holds its draw of the last step, 1
    saved = np.asarray(block.attn.rotations[...])
    np.testing.assert_allclose(saved, block.attn.draw(1), atol=1e-6)
    assert np.abs(saved - np.asarray(block.attn.draw(0))).max() > 0.1
  # A resumed run ends where an uninterrupted one does.
  _train(data, tmp_path, "TrainConfig.steps = 4", *reformer, config="gin/mini/trembl_u_reformer.gin")
  _train(data, tmp_path / "whole", "TrainConfig.steps = 4", *reformer,
         config="gin/mini/trembl_u_reformer.gin")
  last = lambda w: [r for r in _rows(w) if r["split"] == "valid"][-1]
  assert last(tmp_path) == last(tmp_path / "whole")


def test_favorpp_running_moments_are_trained_state_checkpointed_and_resumed(data, tmp_path):
  favorpp = ["ModelConfig.attention = 'performer_favorpp'", "TrainConfig.steps = 2"]
  config = "gin/mini/trembl_u_performer_softmax.gin"
  _train(data, tmp_path, *favorpp, config=config)
  configurables.parse([os.path.join(tmp_path, "config.gin")], [])
  model, optimizer = state_lib.build(configurables.resolve())
  with Checkpoints(os.path.join(tmp_path, "checkpoints")) as ckpt:
    ckpt.restore(2, model, optimizer)
  attn = model.blocks[0].attn
  # Two training steps recorded (weights 1 - 0.99^2), not the evaluations between them.
  np.testing.assert_allclose(attn.moments["weight"][...], 1 - 0.99 ** 2, rtol=1e-5)
  queries, keys = attn.statistics()
  assert np.all(np.trace(np.asarray(keys.second), axis1=-2, axis2=-1) > 0)
  assert np.isfinite(np.asarray(queries.mean)).all()
  _train(data, tmp_path, *favorpp[:1], "TrainConfig.steps = 4", config=config)
  _train(data, tmp_path / "whole", *favorpp[:1], "TrainConfig.steps = 4", config=config)
  last = lambda w: [r for r in _rows(w) if r["split"] == "valid"][-1]
  assert last(tmp_path) == last(tmp_path / "whole")


def test_a_replicate_seed_varies_init_data_order_and_random_features(data):
  apart = "ModelConfig.attention_options = {'num_features': 8, 'seed': 5}"
  resolved = []
  for seed, extra in ((0, []), (1, []), (1, [apart]), (0, [apart])):
    configurables.parse(testlib.gin("gin/mini/trembl_u_performer_softmax.gin"),
                        [f"DataConfig.path = '{data}'", *TINY, f"TrainConfig.seed = {seed}", *extra])
    cfg = configurables.resolve()
    model, _ = state_lib.build(cfg)
    order = pipeline.batches(cfg.data, "train", causal=True).train_batch(0)["inputs"]
    resolved.append((cfg, np.asarray(model.blocks[0].attn.W[...]), order))
  (c0, w0, o0), (c1, w1, o1), (c5, w5, _), (_, w5_seed0, _) = resolved
  assert (c0.data.seed, c1.data.seed) == (0, 1)  # recorded in config.json as numbers
  assert (c0.model.attention_options["seed"], c1.model.attention_options["seed"]) == (0, 1)
  assert not np.array_equal(o0, o1) and not np.allclose(w0, w1)
  assert c5.model.attention_options["seed"] == 5 and c5.data.seed == 1
  np.testing.assert_array_equal(w5, w5_seed0)  # a feature seed set apart (Fig. 15) stays apart
  assert Config.from_json(c1.to_json()) == c1


def test_eval_of_a_diverged_model_writes_a_file_marked_so(data, tmp_path, monkeypatch, capsys):
  _train(data, tmp_path, "TrainConfig.steps = 3")
  real = evaluate.evaluate

  def nan_metrics(*args, **kwargs):  # as a model with NaN weights scores
    result, each = real(*args, **kwargs)
    return {**result, "loss": float("nan"), "accuracy": 0.0, "perplexity": float("nan")}, each
  monkeypatch.setattr(evaluate, "evaluate", nan_metrics)
  result = evaluate.run(str(tmp_path), "test")
  assert result["diverged"] is True
  with open(tmp_path / "eval_test.json") as f:  # strict JSON: no bare NaN
    record = json.load(f, parse_constant=lambda name: pytest.fail(f"bare {name} in the file"))
  assert record["diverged"] is True and record["loss"] is None and record["perplexity"] is None
  assert runs.load_run(str(tmp_path)).failed == "diverged"  # and the figures read it as such
  assert "non-finite test loss: the model diverged" in capsys.readouterr().err


def test_b_eval_sums_several_mask_draws_and_the_baseline_uses_the_same(data, tmp_path):
  configurables.parse(testlib.gin("gin/mini/trembl_b_performer_relu.gin"),
                      [f"DataConfig.path = '{data}'", *TINY, "TrainConfig.steps = 3"])
  loop.run(configurables.resolve(), str(tmp_path), progress=False)
  one = evaluate.run(str(tmp_path), "test", mask_draws=1)
  with np.load(tmp_path / one["sequences_file"]) as f:
    one_tokens = f["tokens"].copy()
  three = evaluate.run(str(tmp_path), "test", mask_draws=3)
  with np.load(tmp_path / three["sequences_file"]) as f:
    three_tokens, ids = f["tokens"].copy(), f["ids"].copy()
  assert (one["mask_draws"], three["mask_draws"]) == (1, 3)
  assert 2.5 < three["tokens"] / one["tokens"] < 3.5  # about three times the masked positions
  assert three_tokens.sum() == three["tokens"] and len(ids) == len(set(ids)) == len(one_tokens)
  assert np.all(three_tokens >= one_tokens)  # draw 0 is the single-draw eval, plus two more
  assert three["baseline_accuracy"] != one["baseline_accuracy"]  # over the same draws as the model
  with pytest.raises(UserError, match="--mask-draws must be >= 1"):
    evaluate.run(str(tmp_path), "test", mask_draws=0)


def test_a_recall_run_with_deterministic_taylor_features_checkpoints_resumes_and_evaluates(
    tmp_path):
  # MQAR batches through the loop: logits at the queries only, a W-less attention checkpointed.
  from performer.data import mqar  # pylint: disable=import-outside-toplevel
  task = mqar.MQARConfig(vocab_size=64, seq_len=16, num_kv=2, eval_examples=10)
  mqar.prepare(task, str(tmp_path / "mqar"))
  small = [f"DataConfig.path = '{tmp_path / 'mqar'}'", "DataConfig.seq_len = 16",
           "DataConfig.batch_size = 4", "ModelConfig.d_model = 16",
           "ModelConfig.attention = 'performer_relu'",
           "ModelConfig.attention_options = {'kernel': 'taylor', 'features': 'deterministic', "
           "'feature_dim': 4}", "TrainConfig.log_every = 2", "TrainConfig.eval_every = 3",
           "TrainConfig.checkpoint_every = 3",
           "OptimConfig.schedule = 'constant'"]  # a cosine over 3 steps, then 6, would differ
  def train(workdir, steps):
    configurables.parse([os.path.join(ROOT, "gin/recall/base.gin")],
                        [*small, f"TrainConfig.steps = {steps}"])
    return loop.run(configurables.resolve(), str(workdir), progress=False)
  train(tmp_path / "a", 6)
  train(tmp_path / "b", 3)
  train(tmp_path / "b", 6)
  assert [r for r in _rows(tmp_path / "b") if r["split"] == "valid"][-1] == [
      r for r in _rows(tmp_path / "a") if r["split"] == "valid"][-1]
  assert [r["tokens"] for r in _rows(tmp_path / "a") if r["split"] == "train"][0] == 2 * 4 * 2
  result = evaluate.run(str(tmp_path / "a"), "test")
  assert result["tokens"] == 10 * 2 and "baseline_accuracy" not in result
  with np.load(tmp_path / "a" / "eval_test_sequences.npz") as f:
    assert f["tokens"].tolist() == [2.0] * 10 and f["ids"].tolist() == list(range(10))
  # The folder prepared again under the same path with another seed: eval and resume refuse it,
  # naming the field, where they would otherwise read another test set without a word.
  mqar.prepare(dataclasses.replace(task, seed=1), str(tmp_path / "mqar"), force=True)
  with pytest.raises(UserError, match="another dataset than .* seed is 1 there and was 0"):
    evaluate.run(str(tmp_path / "a"), "test")
  with pytest.raises(UserError, match="another dataset"):
    train(tmp_path / "b", 9)


def test_a_run_stops_where_validation_accuracy_reaches_stop_accuracy_and_stays_complete(tmp_path):
  from performer.data import mqar  # pylint: disable=import-outside-toplevel
  from performer.train import early_stop  # pylint: disable=import-outside-toplevel
  task = mqar.MQARConfig(vocab_size=16, seq_len=16, num_kv=2, eval_examples=200, train_pool=50)
  mqar.prepare(task, str(tmp_path / "mqar"))
  def train(workdir, *extra):
    configurables.parse([os.path.join(ROOT, "gin/recall/base.gin")], [
        f"DataConfig.path = '{tmp_path / 'mqar'}'", "DataConfig.seq_len = 16",
        "DataConfig.batch_size = 4", "ModelConfig.d_model = 16", "ModelConfig.conv_kernel = 3",
        "TrainConfig.steps = 9", "TrainConfig.log_every = 3", "TrainConfig.eval_every = 3",
        "TrainConfig.checkpoint_every = 9", *extra])
    return loop.run(configurables.resolve(), str(workdir), progress=False)
  train(tmp_path / "a")
  valid = [r for r in _rows(tmp_path / "a") if r["split"] == "valid"]
  assert valid[0]["accuracy"] > 0  # values come from 8 tokens: chance is 1/8
  target = max(r["accuracy"] for r in valid[:2])
  stop = next(r["step"] for r in valid if r["accuracy"] >= target)  # 3 or 6, before the end
  train(tmp_path / "b", f"TrainConfig.stop_accuracy = {target!r}")
  assert early_stop.stopped_at(str(tmp_path / "b")) == stop
  assert Checkpoints(str(tmp_path / "b" / "checkpoints")).latest_step() == stop
  assert [r for r in _rows(tmp_path / "b") if r["split"] == "valid"][-1] == valid[stop // 3 - 1]
  assert train(tmp_path / "b", f"TrainConfig.stop_accuracy = {target!r}") is None  # complete
  assert Checkpoints(str(tmp_path / "b" / "checkpoints")).latest_step() == stop
  with pytest.raises(ValueError, match=r"stop_accuracy must be a finite number in \[0, 1\]"):
    train(tmp_path / "c", "TrainConfig.stop_accuracy = 99.0")


def test_a_run_trained_before_new_options_existed_resumes_and_keeps_its_dataset(tmp_path):
  from performer.data import mqar  # pylint: disable=import-outside-toplevel
  from performer.train import resume  # pylint: disable=import-outside-toplevel
  old = mqar.MQARConfig(vocab_size=64, seq_len=16, num_kv=2, eval_examples=10, filler="zero",
                        train_pool=0)
  mqar.prepare(old, str(tmp_path / "old"))
  configurables.parse([os.path.join(ROOT, "gin/recall/base.gin")], [
      f"DataConfig.path = '{tmp_path / 'old'}'", "DataConfig.seq_len = 16"])
  cfg = configurables.resolve()
  run = tmp_path / "run"
  run.mkdir()
  written = cfg.to_json()  # as a run of the last version wrote it: without the new fields
  for group, name in (("model", "conv_kernel"), ("model", "qk_dim"), ("model", "tie_embeddings"),
                      ("model", "position_embeddings"), ("train", "stop_accuracy")):
    del written[group][name]
  (run / "config.json").write_text(json.dumps(written))
  assert resume.check(str(run), cfg, 3) == []
  record = json.loads(resume.dataset_record(str(tmp_path / "old"))[resume.DATASET])
  for name in mqar.LEGACY:
    del record["fingerprint"][name]
  (run / resume.DATASET).write_text(json.dumps(record))
  resume.check_dataset(str(run), str(tmp_path / "old"))  # the same data
  mqar.prepare(dataclasses.replace(old, filler="random"), str(tmp_path / "new"))
  with pytest.raises(UserError, match="filler is 'random' there and was 'zero'"):
    resume.check_dataset(str(run), str(tmp_path / "new"))


def test_eval_reads_an_mqar_tasks_own_test_splits_and_refuses_what_it_lacks(tmp_path, capsys):
  from performer.data import mqar  # pylint: disable=import-outside-toplevel
  task = mqar.MQARConfig(vocab_size=32, seq_len=16, num_kv=2, eval_examples=6, test_kv=(3,))
  mqar.prepare(task, str(tmp_path / "mqar"))
  configurables.parse([os.path.join(ROOT, "gin/recall/base.gin")], [
      f"DataConfig.path = '{tmp_path / 'mqar'}'", "DataConfig.seq_len = 16",
      "DataConfig.batch_size = 4", "ModelConfig.d_model = 16", "TrainConfig.steps = 2",
      "TrainConfig.eval_every = 2", "TrainConfig.checkpoint_every = 2"])
  loop.run(configurables.resolve(), str(tmp_path / "run"), progress=False)
  run = str(tmp_path / "run")
  assert cli.main(["eval", "--workdir", run, "--split", "test,test_shuffled,test_kv3"]) == 0
  for split, queries in (("test", 2), ("test_shuffled", 2), ("test_kv3", 3)):
    assert json.load(open(f"{run}/eval_{split}.json"))["tokens"] == 6 * queries
  capsys.readouterr()
  assert cli.main(["eval", "--workdir", run, "--split", "test_kv9"]) == 2
  assert "no 'test_kv9' split" in capsys.readouterr().err
  assert cli.main(["eval", "--workdir", run, "--split", "train"]) == 2
  assert "names no evaluation split" in capsys.readouterr().err


def test_a_run_a_nan_stopped_may_resume_with_a_gentler_optimizer_and_nothing_else(data, tmp_path):
  from performer.train import resume  # pylint: disable=import-outside-toplevel
  configurables.parse([os.path.join(ROOT, "gin/mini/trembl_u_performer_relu.gin")],
                      [f"DataConfig.path = '{data}'"])
  cfg = configurables.resolve()
  (tmp_path / "config.json").write_text(json.dumps(cfg.to_json()))
  gentler = dataclasses.replace(cfg, optim=dataclasses.replace(
      cfg.optim, learning_rate=cfg.optim.learning_rate / 10, clip_norm=0.1, warmup_steps=100))
  with pytest.raises(UserError, match="holds another run: optim.clip_norm"):
    resume.check(str(tmp_path), gentler, 4)
  (tmp_path / resume.DIVERGED).write_text("{}")
  assert [c[0] for c in resume.check(str(tmp_path), gentler, 4)] == [
      "optim.clip_norm", "optim.learning_rate", "optim.warmup_steps"]
  record = json.loads((tmp_path / resume.RESUMES).read_text())
  assert record["step"] == 4 and record["changed"]["optim.clip_norm"] == [cfg.optim.clip_norm, 0.1]
  other = dataclasses.replace(gentler, optim=dataclasses.replace(gentler.optim, b2=0.999))
  with pytest.raises(UserError, match="holds another run: optim.b2 is 0.98 there and 0.999 here"):
    resume.check(str(tmp_path), other, 4)
