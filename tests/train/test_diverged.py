"""A NaN stops `performer train` with a one-line error and leaves diverged.json for the figures."""

import json
import os
import re

import pytest

from performer import cli
from performer.errors import UserError
from performer.figures import runs
import testlib
from testlib import ROOT

# Over tests/tiny.gin: a Performer's features and a cadence of one or two steps.
TINY = ["ModelConfig.attention_options = {'num_features': 8}", "TrainConfig.log_every = 1",
        "TrainConfig.eval_every = 2", "TrainConfig.checkpoint_every = 2",
        "TrainConfig.eval_batches = 1"]



def _train(data, workdir, *bindings):
  argv = ["train", "--gin", os.path.join(ROOT, "gin/mini/trembl_u_performer_relu.gin"),
          "--gin", testlib.TINY, "--workdir", str(workdir)]
  for binding in [f"DataConfig.path = '{data}'", *TINY, *bindings]:
    argv += ["--gin_param", binding]
  return cli.main(argv)


def _record(workdir):
  with open(workdir / "diverged.json") as f:
    return json.load(f)


def _error_lines(capsys):
  """The command's error lines on stderr (the progress bar writes there too)."""
  return [line for line in capsys.readouterr().err.splitlines() if "error:" in line]


def test_a_nan_writes_diverged_json_and_stops_with_one_line(data, tmp_path, capsys):
  # Adam moves every weight by ~lr per step whatever the gradient: 1e30 overflows at once.
  assert _train(data, tmp_path, "TrainConfig.steps = 4", "OptimConfig.learning_rate = 1e30") == 2
  err = _error_lines(capsys)
  assert len(err) == 1, err
  match = re.fullmatch(r"performer train: error: non-finite loss or gradient at step ([01]) "
                       r"\(checked steps? [0-9-]+\); "
                       r"stopped; there is no checkpoint yet, so re-running starts from scratch",
                       err[0].split("\r")[-1])
  assert match, err[0]
  step = int(match.group(1))
  record = _record(tmp_path)
  assert record == {"step": step, "last_checkpoint": None, "reason": record["reason"]}
  assert re.fullmatch(r"non-finite (loss \S+|gradient norm \S+|loss \S+ and gradient norm \S+)",
                      record["reason"]), record["reason"]
  assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]  # written atomically
  run = runs.load_run(str(tmp_path))  # the figures see where it stopped
  assert run.diverged_at == step and run.diverged["last_checkpoint"] is None
  assert all(r["step"] <= step for r in run.metrics)  # logged rows end before it


def _nan_valid_from_step_4(monkeypatch):
  """Makes the second evaluation (step 4 at eval_every = 2) score a NaN valid loss."""
  from performer.train import evaluate  # pylint: disable=import-outside-toplevel
  real, calls = evaluate.evaluate, []

  def nan_from_step_4(model, batches, **kwargs):  # the train loss stays finite
    result = real(model, batches, **kwargs)
    calls.append(1)
    return {**result, "loss": float("nan")} if len(calls) >= 2 else result
  monkeypatch.setattr(evaluate, "evaluate", nan_from_step_4)


@pytest.mark.slow  # ~60 s: three runs; the tests around it cover the record by default
def test_a_stopped_run_resumes_from_its_last_good_checkpoint_with_a_lower_learning_rate(
    data, tmp_path, capsys, monkeypatch):
  with monkeypatch.context() as patched:
    _nan_valid_from_step_4(patched)
    assert _train(data, tmp_path, "TrainConfig.steps = 6") == 2
  (line,) = _error_lines(capsys)
  assert "the last good checkpoint is step 2" in line, line
  assert "a lower OptimConfig.learning_rate may be given" in line
  with open(tmp_path / "config.json") as f:
    learning_rate = json.load(f)["optim"]["learning_rate"]
  # Resumed with a lower learning rate, the run is no longer stopped: the record goes, and
  # resumes.jsonl says what changed at which step.
  assert _train(data, tmp_path, "TrainConfig.steps = 6", "OptimConfig.learning_rate = 3e-5") == 0
  assert not os.path.exists(tmp_path / "diverged.json")
  assert runs.load_run(str(tmp_path)).diverged_at is None
  with open(tmp_path / "resumes.jsonl") as f:
    changed = json.loads(f.readlines()[-1])
  assert changed["step"] == 2 and changed["changed"]["optim.learning_rate"] == [learning_rate, 3e-5]
  # No longer stopped, the run is held to its learning rate again.
  assert _train(data, tmp_path, "TrainConfig.steps = 8", "OptimConfig.learning_rate = 1e-5") == 2
  (line,) = _error_lines(capsys)
  assert "holds another run: optim.learning_rate is 3e-05 there and 1e-05 here" in line, line


def test_a_malformed_record_is_a_one_line_error(tmp_path):
  folder = tmp_path / "run"
  folder.mkdir()
  (folder / "config.json").write_text(json.dumps({"model": {"attention": "exact", "causal": True}}))
  (folder / "metrics.jsonl").write_text("")
  (folder / "diverged.json").write_text(json.dumps({"step": "soon"}))
  with pytest.raises(UserError, match=r"diverged.json: step = 'soon' is not a step number"):
    runs.load_run(str(folder))


def test_weights_that_score_nan_on_valid_are_not_saved_as_a_good_checkpoint(data, tmp_path, capsys,
                                                                             monkeypatch):
  _nan_valid_from_step_4(monkeypatch)
  assert _train(data, tmp_path, "TrainConfig.steps = 6") == 2
  (line,) = _error_lines(capsys)
  assert "non-finite validation loss at step 4; stopped before saving it" in line
  assert "the last good checkpoint is step 2" in line, line
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["2"]
  assert _record(tmp_path)["step"] == 4 and "valid loss nan" in _record(tmp_path)["reason"]
