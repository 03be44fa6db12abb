"""Archives: a run's compact outputs copied out to commit, and restored into a fresh runs folder."""

import glob
import json
import os

import pytest

from performer import cli, plans
from performer.errors import UserError
from performer.plans import archive, state
from testlib import ROOT


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
  state.write(str(runs), "u_exact_rows", state="done", fingerprint="f3")
  state.write(str(runs), "u_exact_other", state="done", fingerprint="f4")
  assert cli.main(["archive", str(run), "--to", str(tmp_path / "kept")]) == 0
  assert "kept/u_exact (" in capsys.readouterr().out
  kept = tmp_path / "kept" / "u_exact"
  assert sorted(os.listdir(kept)) == ["archive.json", "config.gin", "config.json",
                                      "eval_ood.json", "eval_ood_sequences.npz", "eval_test.json",
                                      "eval_test_sequences.npz", "metrics.jsonl", "stamps"]
  assert sorted(os.listdir(kept / "stamps")) == ["u_exact.json", "u_exact_eval.json",
                                                 "u_exact_rows.json"]
  # again with the last checkpoint, replacing the first archive whole
  archive.save(str(run), str(kept), checkpoint=True, replace=True)
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


def test_archive_keeps_an_archive_s_stamps_and_refuses_jobs_with_no_stamp(tmp_path, capsys):
  runs = tmp_path / "runs"
  run = _run_folder(runs / "u_exact")
  state.write(str(runs), "u_exact", state="done", fingerprint="f1")
  state.write(str(runs), "u_exact_eval", state="done", fingerprint="f2")
  assert cli.main(["archive", str(run), "--to", str(tmp_path / "a")]) == 0
  # an archive archived again (moved to another results folder) keeps its stamps
  assert cli.main(["archive", str(tmp_path / "a" / "u_exact"), "--to", str(tmp_path / "b")]) == 0
  capsys.readouterr()
  assert sorted(os.listdir(tmp_path / "b" / "u_exact" / "stamps")) == ["u_exact.json",
                                                                       "u_exact_eval.json"]
  assert ((tmp_path / "b" / "u_exact" / "stamps" / "u_exact.json").read_text()
          == (runs / ".plan" / "u_exact.json").read_text())
  # a job named with --jobs must have a stamp: nothing is written
  _refused([run, "--to", tmp_path / "c", "--jobs", "u_exact", "u_exact_rows"], capsys,
           f"{run}: no stamp of job u_exact_rows (looked for {runs / '.plan' / 'u_exact_rows.json'}"
           f" and {run / 'stamps' / 'u_exact_rows.json'})")
  assert not os.path.exists(tmp_path / "c")


def _files(folder):
  return sorted(os.path.relpath(os.path.join(r, f), folder) for r, _, fs in os.walk(folder)
                for f in fs)


def _refused(args, capsys, match):
  assert cli.main(["archive", *map(str, args)]) == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and match in err, err


@pytest.mark.parametrize("replace", [[], ["--replace"]])
def test_archive_refuses_to_write_over_the_run_itself_or_into_it_or_around_it(
    tmp_path, capsys, replace):
  run = _run_folder(tmp_path / "a" / "qs")  # e.g. `cp -r runs/quickstart/x /tmp/a/qs`
  before = _files(run)
  _refused([run, "--to", tmp_path / "a", *replace], capsys, "that is the run")
  _refused([run, "--to", run, *replace], capsys, "that lies inside the run")
  _refused([tmp_path / "a" / "." / "qs", "--to", os.path.join(tmp_path, "a", "qs", ".."),
            *replace], capsys, "that is the run")  # however the paths are spelt
  os.symlink(tmp_path / "a", tmp_path / "link")
  _refused([run, "--to", tmp_path / "link", *replace], capsys, "that is the run")
  inner = _run_folder(tmp_path / "b" / "x" / "x")  # DEST/x would be the run's parent
  _refused([inner, "--to", tmp_path / "b", *replace], capsys, "that holds the run")
  assert _files(run) == before and os.listdir(tmp_path / "a") == ["qs"]
  assert os.listdir(tmp_path / "b" / "x") == ["x"]


def test_archive_replaces_an_archive_only_with_replace_and_never_two_runs_of_one_name(
    tmp_path, capsys):
  run = _run_folder(tmp_path / "runs" / "u_exact")
  kept = tmp_path / "kept"
  os.makedirs(kept / "u_exact")
  (kept / "u_exact" / "notes.txt").write_text("mine")
  _refused([run, "--to", kept], capsys, "u_exact exists; pass --replace to replace it")
  assert _files(kept) == ["u_exact/notes.txt"]
  # two runs of one name: refused before anything is written, with --replace too
  other = _run_folder(tmp_path / "elsewhere" / "u_exact")
  for replace in ([], ["--replace"]):
    _refused([run, other, "--to", tmp_path / "fresh", *replace], capsys,
             "would both be archived as")
    assert not (tmp_path / "fresh").exists()
  (tmp_path / "kept" / "file").write_text("a file")
  os.makedirs(tmp_path / "r" / "file")
  (tmp_path / "r" / "file" / "config.json").write_text("{}")
  _refused([tmp_path / "r" / "file", "--to", kept, "--replace"], capsys, "is not a folder")
  assert (tmp_path / "kept" / "file").read_text() == "a file"
  # --replace (documented) swaps a new archive in whole over an archive, leaving nothing beside it
  with pytest.raises(SystemExit):
    cli.main(["archive", "--help"])
  assert "--replace" in capsys.readouterr().out
  os.remove(kept / "u_exact" / "notes.txt")
  assert cli.main(["archive", str(run), "--to", str(kept), "--replace"]) == 0  # an empty folder
  (run / "metrics.jsonl").write_text("newer")
  assert cli.main(["archive", str(run), "--to", str(kept), "--replace"]) == 0
  assert (kept / "u_exact" / "metrics.jsonl").read_text() == "newer"
  assert sorted(os.listdir(kept)) == ["file", "u_exact"]


def test_replace_refuses_a_training_workdir_or_a_folder_of_other_files_and_deletes_nothing(
    tmp_path, capsys):
  run = _run_folder(tmp_path / "runs" / "u_exact")
  kept = tmp_path / "kept"
  live = _run_folder(kept / "u_exact")  # DEST/<name> is a live training workdir
  before = _files(live)
  _refused([run, "--to", kept, "--replace"], capsys,
           f"performer archive: error: {live} is not an archive (it holds tensorboard/: a "
           f"training workdir); --replace replaces only archives: move it away or give --to "
           f"another folder")
  os.rename(live / "tensorboard", tmp_path / "tb")  # a workdir without its events: still refused
  _refused([run, "--to", kept, "--replace"], capsys,
           "(it holds 2 checkpoints: a training workdir (an archive keeps one))")
  os.rename(tmp_path / "tb", live / "tensorboard")
  assert _files(live) == before
  # a folder of the user's files, and an archive the user added a file to
  os.makedirs(kept / "mine")
  (kept / "mine" / "notes.txt").write_text("mine")
  (kept / "mine" / "config.json").write_text("{}")
  mine = _run_folder(tmp_path / "other" / "mine")
  _refused([mine, "--to", kept, "--replace"], capsys,
           "mine is not an archive (it holds notes.txt, which `performer archive` does not write)")
  assert _files(kept / "mine") == ["config.json", "notes.txt"]
  assert cli.main(["archive", str(run), "--to", str(tmp_path / "a")]) == 0
  (tmp_path / "a" / "u_exact" / "analysis.ipynb").write_text("mine")
  _refused([run, "--to", tmp_path / "a", "--replace"], capsys,
           "(it holds analysis.ipynb, which no archive wrote)")
  (tmp_path / "a" / "u_exact" / "archive.json").write_text("{}")
  _refused([run, "--to", tmp_path / "a", "--replace"], capsys,
           "(its archive.json is not the manifest `performer archive` writes)")
  assert (tmp_path / "a" / "u_exact" / "analysis.ipynb").read_text() == "mine"
  with pytest.raises(UserError, match="is not an archive"):  # as `reproduce`'s jobs call it
    archive.save(str(run), str(live), replace=True)
  assert _files(live) == before and not [f for f in os.listdir(kept) if ".tmp-" in f]


def test_replace_takes_an_archive_written_before_the_manifest_as_results_runs_holds_them(
    tmp_path, capsys):
  run = _run_folder(tmp_path / "runs" / "b_exact")
  state.write(str(tmp_path / "runs"), "b_exact", state="done", fingerprint="f1")
  old = tmp_path / "results" / "runs" / "b_exact"  # as committed: no archive.json
  os.makedirs(old / "stamps")
  os.makedirs(old / "checkpoints" / "1200")
  for name in ("config.gin", "config.json", "metrics.jsonl", "eval_test.json",
               "eval_test_sequences.npz", "stamps/b_exact.json", "checkpoints/1200/state"):
    (old / name).write_text("old")
  assert archive.not_an_archive(str(old)) is None
  assert cli.main(["archive", str(run), "--to", str(old.parent), "--replace", "--checkpoint"]) == 0
  capsys.readouterr()
  assert (old / "config.json").read_text() == "config.json"
  assert os.listdir(old / "checkpoints") == ["500"]
  # without stamps/ (a restored run folder has none) or with files archive never writes: refused
  for committed in glob.glob(os.path.join(ROOT, "results", "runs", "*")):
    assert archive.not_an_archive(committed) is None, committed
  os.makedirs(tmp_path / "restored")
  for name in ("config.json", "metrics.jsonl", "eval_test.json"):
    (tmp_path / "restored" / name).write_text("kept")
  assert archive.not_an_archive(str(tmp_path / "restored")) == (
      "it has neither archive.json nor the stamps/ of an archive")


def test_a_replacement_that_fails_leaves_the_old_archive_whole(tmp_path, monkeypatch):
  run = _run_folder(tmp_path / "runs" / "u_exact")
  dest = str(tmp_path / "kept" / "u_exact")
  archive.save(str(run), dest)
  (run / "metrics.jsonl").write_text("newer")
  rename = os.rename

  def failing(src, dst):  # the new archive cannot be renamed into place (a full disk, a crash)
    if dst == dest and not src.endswith("-old"):
      raise OSError("no space left")
    rename(src, dst)
  monkeypatch.setattr(os, "rename", failing)
  with pytest.raises(UserError, match="no space left"):
    archive.save(str(run), dest, replace=True)
  assert (tmp_path / "kept" / "u_exact" / "metrics.jsonl").read_text() == "metrics.jsonl"
  assert os.listdir(tmp_path / "kept") == ["u_exact"]


def test_archiving_the_current_folder_names_the_archive_after_it(tmp_path, monkeypatch, capsys):
  run = _run_folder(tmp_path / "runs" / "u_exact")
  monkeypatch.chdir(run)
  assert cli.main(["archive", ".", "--to", str(tmp_path / "kept")]) == 0
  assert os.listdir(tmp_path / "kept") == ["u_exact"]


def test_every_job_that_writes_into_a_run_folder_has_its_stamp_archived():
  """The committed results' plan (with its recall row probes): a job that writes into a run's
  folder and whose stamp the archive did not keep would be redone on a restored run."""
  plan = plans.build(plans.context("mini", runs="/runs", results=os.path.join(ROOT, "results")))
  trains = {j.workdir: j.name for j in plan if j.kind == "train"}
  writers = [(j.name, trains[os.path.dirname(o)]) for j in plan for o in j.outputs
             if os.path.dirname(o) in trains and j.kind != "train"]
  assert any(name.endswith("_rows") for name, _ in writers)
  for name, run in writers:
    assert name in archive.stamped_jobs(run), name


def test_the_plan_archives_a_run_again_over_its_archive(tmp_path):
  ctx = plans.context("mini", runs=str(tmp_path / "runs"), results=str(tmp_path / "results"))
  job = next(j for j in plans.build(ctx) if j.name == "u_identity_archive")
  _run_folder(tmp_path / "runs" / "u_identity")
  assert cli.main(list(job.command[1:])) == 0
  (tmp_path / "runs" / "u_identity" / "metrics.jsonl").write_text("retrained")
  assert cli.main(list(job.command[1:])) == 0  # e.g. over the committed archive of an older run
  assert (tmp_path / "results" / "runs" / "u_identity" / "metrics.jsonl").read_text() == "retrained"


def test_restore_brings_back_runs_whose_fingerprint_matches_and_the_plan_counts_them_done(tmp_path):
  ctx = plans.context("mini", runs=str(tmp_path / "old"), results=str(tmp_path / "results"))
  plan = plans.resolve(ctx, plans.select(plans.build(ctx), ["u_identity_archive",
                                                            "b_identity_archive"]))
  for name in ("u_identity", "b_identity"):
    _run_folder(tmp_path / "old" / name)
    for job in (name, f"{name}_eval"):
      fingerprint = plan.fingerprints[job] if name == "u_identity" else "stale"
      state.write(ctx.runs, job, state="done", fingerprint=fingerprint, detail="resumed")
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
  # nor the manifest: a run folder marked as an archive would be one --replace may delete
  assert not (tmp_path / "new" / "u_identity" / "archive.json").exists()
  # b_identity was archived from another config: it is trained again, not restored
  assert state.state(plan, plan["b_identity"])[0] == "pending"
  assert not (tmp_path / "new" / "b_identity").exists()
  # a run folder already there is left as it is
  assert archive.restore(plan, say=said.append) == []


def test_an_unfinished_run_archived_with_its_checkpoint_comes_back_to_resume(tmp_path):
  ctx = plans.context("mini", runs=str(tmp_path / "old"), results=str(tmp_path / "results"))
  names = ["u_identity", "b_identity"]
  plan = plans.resolve(ctx, plans.select(plans.build(ctx), [f"{n}_archive" for n in names]))
  for name in names:  # both still training when their machine went; b_identity's checkpoint
    _run_folder(tmp_path / "old" / name, steps=(250, 500) if name == "u_identity" else ())
    state.write(ctx.runs, name, state="running", fingerprint=plan.fingerprints[name])
    archive.save(os.path.join(ctx.runs, name), os.path.join(ctx.results, "runs", name),
                 checkpoint=name == "u_identity", jobs=(name,))
  fresh = plans.context("mini", runs=str(tmp_path / "new"), results=ctx.results)
  plan = plans.resolve(fresh, plans.select(plans.build(fresh), [f"{n}_archive" for n in names]))
  assert archive.restorable(plan) == []
  said = []
  assert archive.restore(plan, say=said.append) == ["u_identity"]
  assert said == ["copied back 1 unfinished run(s) with their last checkpoint, to resume: "
                  "u_identity"]
  run = tmp_path / "new" / "u_identity"
  assert (run / "checkpoints" / "500" / "state").read_text() == "step 500"
  assert not (run / "checkpoints" / "250").exists() and (run / "metrics.jsonl").exists()
  # no stamp: the train job runs again (and `performer train` resumes), the archive waits
  for job in ("u_identity", "u_identity_archive"):
    assert state.state(plan, plan[job])[0] == "pending", job
  # an unfinished run archived without a checkpoint has nothing to resume from: trained anew
  assert not (tmp_path / "new" / "b_identity").exists()
  assert archive.restore(plan, say=said.append) == []  # a run folder there is left as it is


def test_status_and_dry_runs_show_what_a_run_would_restore_and_copy_nothing(tmp_path, capsys):
  results = str(tmp_path / "results")
  ctx = plans.context("mini", runs=str(tmp_path / "old"), results=results)
  plan = plans.resolve(ctx, plans.select(plans.build(ctx), ["u_identity_archive"]))
  _run_folder(tmp_path / "old" / "u_identity")
  for job in ("u_identity", "u_identity_eval"):
    state.write(ctx.runs, job, state="done", fingerprint=plan.fingerprints[job])
  archive.save(os.path.join(ctx.runs, "u_identity"), os.path.join(results, "runs", "u_identity"),
               jobs=("u_identity", "u_identity_eval"))
  fresh = tmp_path / "new"  # a fresh machine's runs folder: a run would restore u_identity
  plan_flags = ["--only", "u_identity_archive", "--runs", str(fresh), "--results", results]
  # --status added to a run's command line: its launcher's flags are fine
  assert cli.main(["reproduce", "--status", "--jobs", "2", *plan_flags]) == 0
  lines = capsys.readouterr().out.splitlines()
  states = {line.split()[0]: line.split()[1] for line in lines[1:-1]}
  for job in ("u_identity", "u_identity_eval", "u_identity_archive"):
    assert states[job] == "restorable", lines
  assert states["proteins"] == "pending" and "3 restorable" in lines[-1]
  assert "archived in " + os.path.join(results, "runs", "u_identity") in "\n".join(lines)
  # dry runs show what a run would do once it has restored: the data jobs alone
  assert cli.main(["reproduce", "--dry-run", *plan_flags]) == 0
  local_lines = capsys.readouterr().out.splitlines()
  assert cli.main(["reproduce", "--dry-run", "--launcher", "slurm", *plan_flags]) == 0
  slurm_lines = capsys.readouterr().out.splitlines()
  assert local_lines[1:] and not [line for line in local_lines if "u_identity" in line]
  assert [line.split()[-1] for line in slurm_lines] == ["swissprot", "pfam_labels", "proteins"]
  assert not fresh.exists()  # nothing restored, no folder made


def test_every_committed_archive_is_restorable_by_todays_plan(tmp_path):
  # An option added to a backend without configurables.LATER_OPTIONS changes the fingerprint
  # of every run that resolves it, and a reproduction would train them all again: span and
  # renormalize once did (248 of 329 archives). Each archived stamp must carry its job's
  # fingerprint in the mini plan, the one the archives come from.
  ctx = plans.context("mini", runs=str(tmp_path / "runs"),
                      results=os.path.join(ROOT, "results"))
  plan = plans.resolve(ctx, plans.build(ctx))
  archived = sorted(glob.glob(os.path.join(ROOT, "results", "runs", "*", "stamps", "*.json")))
  assert len(archived) > 600
  stale = [os.path.relpath(p, ROOT) for p in archived
           if json.load(open(p)).get("fingerprint") != plan.fingerprints.get(
               os.path.basename(p)[:-len(".json")])]
  assert not stale, f"{len(stale)} archived stamps do not match the plan, e.g. {stale[:3]}"
  # so a reproduction restores every archived run rather than training it again
  runs = {os.path.basename(os.path.dirname(os.path.dirname(p))) for p in archived}
  back = archive.restorable(plan) + archive.resumable(plan)  # finished, and carried to resume
  assert {job.name for job, *_ in back} == runs
