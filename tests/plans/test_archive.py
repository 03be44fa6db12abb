"""Archives: a run's compact outputs copied out to commit, and restored into a fresh runs folder."""

import os

import pytest

from performer import cli, plans
from performer.errors import UserError
from performer.plans import archive, state


def _run_folder(path, steps=(250, 500)):
  os.makedirs(path / "tensorboard")
  for name in ("config.json", "config.gin", "metrics.jsonl", "eval_test.json",
               "eval_test_sequences.npz", "eval_ood.json", "eval_ood_sequences.npz",
               "train.lock", "tensorboard/events"):
    (path / name).write_text(name)
  for step in steps:
    os.makedirs(path / "checkpoints" / str(step))
    (path / "checkpoints" / str(step) / "state").write_text(f"step {step}")
  return path


def test_archive_copies_what_figures_read_and_the_stamps_not_the_checkpoints(tmp_path, capsys):
  runs = tmp_path / "runs"
  run = _run_folder(runs / "u_exact")
  state.write(str(runs), "u_exact", state="done", fingerprint="f1")
  state.write(str(runs), "u_exact_eval", state="done", fingerprint="f2")
  assert cli.main(["archive", str(run), "--to", str(tmp_path / "kept")]) == 0
  assert "kept/u_exact (" in capsys.readouterr().out
  kept = tmp_path / "kept" / "u_exact"
  assert sorted(os.listdir(kept)) == ["config.gin", "config.json", "eval_ood.json",
                                      "eval_ood_sequences.npz", "eval_test.json", "eval_test_sequences.npz", "metrics.jsonl",
                                      "stamps"]
  assert sorted(os.listdir(kept / "stamps")) == ["u_exact.json", "u_exact_eval.json"]
  # again with the last checkpoint, replacing the first archive whole
  archive.save(str(run), str(kept), checkpoint=True)
  assert os.listdir(kept / "checkpoints") == ["500"]
  assert (kept / "checkpoints" / "500" / "state").read_text() == "step 500"
  assert not [f for f in os.listdir(tmp_path / "kept") if ".tmp-" in f]
  with pytest.raises(UserError, match="no config.json"):
    archive.save(str(tmp_path), str(tmp_path / "x"))
  os.makedirs(tmp_path / "bare")
  (tmp_path / "bare" / "config.json").write_text("{}")
  with pytest.raises(UserError, match="no checkpoint to archive"):
    archive.save(str(tmp_path / "bare"), str(tmp_path / "y"), checkpoint=True)
  assert not os.path.exists(tmp_path / "y")


def test_restore_brings_back_runs_whose_fingerprint_matches_and_the_plan_counts_them_done(tmp_path):
  ctx = plans.context("mini", runs=str(tmp_path / "old"), results=str(tmp_path / "results"))
  plan = plans.resolve(ctx, plans.select(plans.build(ctx), ["u_identity_archive",
                                                            "b_identity_archive"]))
  for name in ("u_identity", "b_identity"):
    _run_folder(tmp_path / "old" / name)
    for job in (name, f"{name}_eval"):
      fingerprint = plan.fingerprints[job] if name == "u_identity" else "stale"
      state.write(ctx.runs, job, state="done", fingerprint=fingerprint)
    archive.save(os.path.join(ctx.runs, name), os.path.join(ctx.results, "runs", name),
                 jobs=(name, f"{name}_eval"))
  # A fresh machine: another runs folder (and checkout: fingerprints name folders, not paths).
  fresh = plans.context("mini", runs=str(tmp_path / "new"), results=ctx.results)
  plan = plans.resolve(fresh, plans.select(plans.build(fresh), ["u_identity_archive",
                                                                "b_identity_archive"]))
  said = []
  assert archive.restore(plan, say=said.append) == ["u_identity"]
  assert said == ["restored 1 finished run(s) from their archives: u_identity"]
  for job in ("u_identity", "u_identity_eval", "u_identity_archive"):
    assert state.state(plan, plan[job])[0] == "done", job
  assert (tmp_path / "new" / "u_identity" / "eval_test_sequences.npz").exists()
  assert not (tmp_path / "new" / "u_identity" / "stamps").exists()
  # b_identity was archived from another config: it is trained again, not restored
  assert state.state(plan, plan["b_identity"])[0] == "pending"
  assert not (tmp_path / "new" / "b_identity").exists()
  # a run folder already there is left as it is
  assert archive.restore(plan, say=said.append) == []
