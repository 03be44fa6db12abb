"""Launchers on small plans of stand-in jobs: local scheduling, signals, status, print, SLURM."""

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from performer import cli, plans
from performer.plans import budgets, local, state
from performer.plans.context import Context
from performer.plans.job import Job
from testlib import ROOT


# A stand-in job: logs when it starts and ends, sleeps (or, given "until:PATH", waits for that
# file for up to 60 s), writes its output; on SIGTERM it logs the signal, "saves" and exits 130
# as `performer train` does. Every TERM it gets is logged.
STAND_IN = textwrap.dedent("""
    import json, os, signal, sys, time
    name, seconds, out, events = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    until, seconds = (seconds[6:], 60.0) if seconds.startswith("until:") else (None, float(seconds))
    def log(what):
      with open(events, "a") as f:
        f.write(json.dumps({"job": name, "what": what, "t": time.time(),
                            "cores": sorted(os.sched_getaffinity(0))}) + "\\n")
    def stop(signum, frame):
      log("TERM")
      signal.signal(signal.SIGTERM, lambda *_: log("TERM"))  # a second one would be counted
      time.sleep(0.5)  # the checkpoint
      log("saved")
      sys.exit(130)
    signal.signal(signal.SIGTERM, stop)
    log("start")
    if seconds < 0:
      print("a helpful last line"); sys.exit(3)
    if until:  # another job's output, or `seconds` at most: no timing race under load
      deadline = time.time() + seconds
      while not os.path.exists(until) and time.time() < deadline:
        time.sleep(0.05)
    else:
      time.sleep(seconds)
    open(out, "w").write(name)
    log("end")
""")


def _job(tmp_path, name, seconds, needs=(), kind="probe"):
  script = tmp_path / "stand_in.py"
  script.write_text(STAND_IN)
  out = str(tmp_path / f"{name}.out")
  return Job(name=name, kind=kind, needs=tuple(needs), outputs=(out,),
             command=(sys.executable, str(script), name, str(seconds), out,
                      str(tmp_path / "events.jsonl")))


def _plan(tmp_path, jobs):
  ctx = Context(budget=budgets.BUDGETS["mini"], runs=str(tmp_path / "runs"), data="", text_data="",
                results=str(tmp_path / "results"), fasta="")
  return plans.resolve(ctx, jobs)


def _events(tmp_path):
  path = tmp_path / "events.jsonl"
  return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _when(events, job, what):
  return next(e["t"] for e in events if e["job"] == job and e["what"] == what)


def test_a_job_starts_as_soon_as_its_needs_are_done_not_in_waves(tmp_path):
  # slow runs until after_quick has finished: a launcher in waves would hold after_quick back
  # until slow ended (60 s), whatever the machine's load.
  slow = _job(tmp_path, "slow", f"until:{tmp_path / 'after_quick.out'}")
  plan = _plan(tmp_path, [slow, _job(tmp_path, "quick", 0.2),
                          _job(tmp_path, "after_quick", 0.2, needs=("quick",))])
  assert local.run(plan, jobs=2, say=lambda _: None) == 0
  events = _events(tmp_path)
  assert _when(events, "after_quick", "start") < _when(events, "slow", "end")
  assert _when(events, "after_quick", "start") > _when(events, "quick", "end")
  assert [state.state(plan, j)[0] for j in plan.jobs] == ["done"] * 3
  for name in ("slow", "quick", "after_quick"):  # one log per attempt
    assert (tmp_path / "runs" / "logs" / name / "1.log").read_text().startswith("$ ")


def test_a_free_slot_takes_a_ready_eval_before_the_next_train(tmp_path):
  # The plan's order puts every train before the evals that need them; the launcher does not.
  plan = _plan(tmp_path, [_job(tmp_path, "a", 0.2, kind="train"),
                          _job(tmp_path, "b", 0.2, kind="train"),
                          _job(tmp_path, "a_eval", 0.2, needs=("a",), kind="eval")])
  assert [j.name for j in plan.jobs] == ["a", "b", "a_eval"]
  assert local.run(plan, jobs=1, say=lambda _: None) == 0
  starts = [e["job"] for e in _events(tmp_path) if e["what"] == "start"]
  assert starts == ["a", "a_eval", "b"]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to share out")
def test_two_jobs_at_a_time_are_pinned_to_disjoint_cores(tmp_path):
  plan = _plan(tmp_path, [_job(tmp_path, "a", 0.5), _job(tmp_path, "b", 0.5)])
  assert local.run(plan, jobs=2, say=lambda _: None) == 0
  cores = [e["cores"] for e in _events(tmp_path) if e["what"] == "start"]
  assert len(cores) == 2 and not set(cores[0]) & set(cores[1])
  assert local.core_shares(2, cores=range(4)) == [[0, 1], [2, 3]]
  assert local.core_shares(3, cores=range(2)) == []  # fewer cores than jobs: no pinning


def test_finished_jobs_are_skipped_and_a_changed_job_runs_again(tmp_path):
  jobs = [_job(tmp_path, "a", 0), _job(tmp_path, "b", 0, needs=("a",))]
  assert local.run(_plan(tmp_path, jobs), jobs=1, say=lambda _: None) == 0
  assert local.run(_plan(tmp_path, jobs), jobs=1, say=lambda _: None) == 0
  assert len([e for e in _events(tmp_path) if e["what"] == "start"]) == 2  # nothing rerun
  changed = [jobs[0], _job(tmp_path, "b", 0.01, needs=("a",))]
  plan = _plan(tmp_path, changed)
  assert state.state(plan, plan["b"]) == ("pending", "changed since its last attempt")
  # an interrupted attempt of another configuration is named, not shown as a plain pending
  state.write(str(tmp_path / "runs"), "b", state="interrupted", fingerprint="another")
  kind, detail = state.state(plan, plan["b"])
  assert kind == "pending" and detail.startswith("its last attempt (interrupted, 20"), detail
  assert detail.endswith("had another configuration (other flags or code)")
  os.remove(tmp_path / "a.out")  # a done job whose outputs went is to do again
  assert state.state(plan, plan["a"]) == ("pending", "outputs missing")
  assert local.run(plan, jobs=1, say=lambda _: None) == 0
  assert len([e for e in _events(tmp_path) if e["what"] == "start"]) == 4
  assert sorted(os.listdir(tmp_path / "runs" / "logs" / "b")) == ["1.log", "2.log"]


def test_a_failed_job_blocks_what_needs_it_and_the_status_shows_its_log(tmp_path):
  plan = _plan(tmp_path, [_job(tmp_path, "broken", -1), _job(tmp_path, "child", 0, ("broken",)),
                          _job(tmp_path, "other", 0)])
  said = []
  assert local.run(plan, jobs=1, say=said.append) == 1
  assert {e["job"] for e in _events(tmp_path)} == {"broken", "other"}
  assert "failed: broken; not started, as they need them: child" in said[-1]
  assert "run the same command" not in " ".join(said)  # a re-run does not fix a defect
  table = "\n".join(state.table(plan))
  assert "broken" in table and "failed" in table and "exit status 3" in table
  assert "  | a helpful last line" in table
  assert "1 done, 1 failed, 1 pending" in table


LAUNCH = textwrap.dedent("""
    import sys
    sys.path[:0] = [{tests!r}, {shared!r}]  # this module, and testlib beside the folders
    import test_launchers as t
    from pathlib import Path
    from performer.plans import local
    tmp = Path({tmp!r})
    plan = t._plan(tmp, [t._job(tmp, "first", 60), t._job(tmp, "second", 60),
                         t._job(tmp, "third", 60, needs=("first",))])
    sys.exit(local.run(plan, jobs=2, say=lambda s: print(s, flush=True)))
""")


def _launch(tmp_path):
  """The LAUNCH launcher in a session of its own, once its first two jobs have started."""
  launcher = subprocess.Popen(
      [sys.executable, "-c", LAUNCH.format(tests=os.path.dirname(__file__),
                                           shared=os.path.join(ROOT, "tests"), tmp=str(tmp_path))],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
  deadline = time.time() + 60
  while len([e for e in _events(tmp_path) if e["what"] == "start"]) < 2:
    assert launcher.poll() is None and time.time() < deadline, launcher.stdout.read()
    time.sleep(0.1)
  return launcher


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP],
                         ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_to_the_process_group_stops_every_job_once_and_waits(tmp_path, signum):
  launcher = _launch(tmp_path)
  os.killpg(launcher.pid, signum)  # the whole group, as a scheduler or a terminal's Ctrl-C does
  out, _ = launcher.communicate(timeout=30)
  assert launcher.returncode == 130, out
  events = _events(tmp_path)
  for name in ("first", "second"):
    assert [e["what"] for e in events if e["job"] == name] == ["start", "TERM", "saved"], events
  assert "interrupted: first, second; run the same command to resume" in out
  plan = _plan(tmp_path, [_job(tmp_path, n, 60) for n in ("first", "second")])
  assert [state.state(plan, j)[0] for j in plan.jobs] == ["interrupted"] * 2
  pids = [state.read(str(tmp_path / "runs"), n)["pid"] for n in ("first", "second")]
  for pid in pids:  # nothing keeps running
    with pytest.raises(ProcessLookupError):
      os.kill(pid, 0)


def test_a_closed_terminal_stops_every_job_once_though_nothing_can_be_printed(tmp_path):
  launcher = _launch(tmp_path)
  launcher.stdout.close()  # the terminal is gone: every write now fails
  os.killpg(launcher.pid, signal.SIGHUP)
  assert launcher.wait(timeout=30) == 130
  events = _events(tmp_path)
  for name in ("first", "second"):
    assert [e["what"] for e in events if e["job"] == name] == ["start", "TERM", "saved"], events
  plan = _plan(tmp_path, [_job(tmp_path, n, 60) for n in ("first", "second")])
  assert [state.state(plan, j)[0] for j in plan.jobs] == ["interrupted"] * 2


def test_the_jobs_of_a_killed_launcher_are_interrupted_not_pending(tmp_path):
  launcher = _launch(tmp_path)
  launcher.kill()  # no handler: only the kernel's SIGTERM to its jobs (PR_SET_PDEATHSIG)
  launcher.communicate(timeout=30)
  plan = _plan(tmp_path, [_job(tmp_path, n, 60) for n in ("first", "second")])
  deadline = time.time() + 30
  while any(state.state(plan, j)[0] == "running" for j in plan.jobs):  # while they save
    assert time.time() < deadline
    time.sleep(0.1)
  for job in plan.jobs:
    kind, detail = state.state(plan, job)
    assert kind == "interrupted" and detail.startswith("its launcher stopped before recording an "
                                                       "end"), (kind, detail)
  assert "first: " + str(tmp_path / "runs" / "logs" / "first" / "1.log") in state.table(plan)


def test_a_job_whose_launcher_died_runs_again(tmp_path):
  plan = _plan(tmp_path, [_job(tmp_path, "a", 0)])
  gone = subprocess.Popen(["true"])
  gone.wait()
  state.write(plan.ctx.runs, "a", state="running", pid=gone.pid, launcher=gone.pid, log="",
              fingerprint=plan.fingerprints["a"])
  assert state.state(plan, plan["a"])[0] == "interrupted"
  assert local.run(plan, jobs=1, say=lambda _: None) == 0
  assert [e["job"] for e in _events(tmp_path) if e["what"] == "start"] == ["a"]
  assert state.state(plan, plan["a"])[0] == "done"


def test_print_lists_each_unfinished_job_after_what_it_needs_as_a_recorded_job(tmp_path, capsys):
  flags = ["--only", "fig5_u_trig", "--runs", str(tmp_path), "--results", str(tmp_path / "r")]
  status = cli.main(["reproduce", "--launcher", "print", *flags])
  lines = capsys.readouterr().out.splitlines()
  assert status == 0 and lines[0].startswith("# 5 jobs of the mini plan")
  commands = [shlex.split(line) for line in lines[1:]]
  prefix = local.executable()  # the venv's performer script, else python -m performer.cli
  assert os.path.isabs(prefix[0]) and all(c[:len(prefix)] == prefix for c in commands)
  # Each runs one job the way a SLURM job does (`--job`: stamp and log, so --status sees it).
  assert [c[-2:] for c in commands] == [["--job", n] for n in (
      "swissprot", "pfam_labels", "proteins", "u_exact", "fig5_u_trig")]
  assert all(c[len(prefix)] == "reproduce" and f"--runs={tmp_path}" not in c and
             c[c.index("--runs") + 1] == str(tmp_path) for c in commands)
  assert subprocess.run([*prefix, "--version"], capture_output=True, check=False).returncode == 0
  # The dry run still shows each job's own command.
  assert cli.main(["reproduce", "--dry-run", *flags]) == 0
  raw = capsys.readouterr().out.splitlines()
  assert shlex.split(raw[-1])[len(prefix)] == "train" and raw[-2].endswith(f"--workdir {tmp_path}/u_exact")


FAKE_SBATCH = textwrap.dedent("""\
    #!/usr/bin/env python3
    import json, os, sys
    log = os.environ["FAKE_SBATCH_LOG"]
    n = sum(1 for _ in open(log)) if os.path.exists(log) else 0
    with open(log, "a") as f:
      f.write(json.dumps(sys.argv[1:]) + "\\n")
    print(f"{1000 + n};cluster")
""")


@pytest.fixture(name="sbatch")
def _sbatch(tmp_path, monkeypatch):
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  (bin_dir / "sbatch").write_text(FAKE_SBATCH)
  (bin_dir / "sbatch").chmod(0o755)
  monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
  monkeypatch.setenv("FAKE_SBATCH_LOG", str(tmp_path / "calls.jsonl"))
  return tmp_path / "calls.jsonl"


def _calls(log):
  return [json.loads(line) for line in log.read_text().splitlines()]


def test_slurm_submits_one_job_each_with_afterok_on_what_it_needs(tmp_path, sbatch):
  runs = tmp_path / "runs"
  args = ["reproduce", "--launcher", "slurm", "--only", "fig15", "--runs", str(runs),
          "--results", str(tmp_path / "results"),
          "--steps", "40", "--sbatch", "train=--gres=gpu:4 --time=48:00:00"]
  assert cli.main(args) == 0
  calls = _calls(sbatch)
  ids = {call[call.index("--job") + 1]: str(1000 + i) for i, call in enumerate(calls)}
  # the same results folder as the command: which Fig. 6 seeds exist (Fig. 15 draws them) follows
  # the decision files there
  ctx = plans.context("mini", runs=str(runs), results=str(tmp_path / "results"), steps=40)
  plan = plans.resolve(ctx, plans.select(plans.build(ctx), ["fig15"]))
  assert sorted(ids) == sorted(j.name for j in plan.jobs)  # nothing was done: every job
  for call in calls:
    job = plan[call[call.index("--job") + 1]]
    after = [w for w in call if w.startswith("--dependency=")]
    wanted = sorted(ids[n] for n in job.needs)
    assert sorted(after[0].split(":")[1:]) == wanted if wanted else not after, call
    assert call[call.index("--parsable")] and f"--job-name=performer-{job.name}" in call
    template = call.index(os.path.join(ROOT, "scripts", "slurm", "job.sbatch"))
    assert call[template + 1:template + 3] == ["--budget", "mini"]
    assert ["--steps", "40"] == call[call.index("--steps"):call.index("--steps") + 2]
    if job.kind == "train":
      assert "--gres=gpu:4" in call and "--time=48:00:00" in call
      assert not any(w.startswith("--gpus-per-node") for w in call)
    elif job.kind == "figure":
      assert "--cpus-per-task=2" in call
  kind, detail = state.state(plan, plan["fig15_redraw"])
  assert kind == "submitted" and detail.startswith(f"SLURM job {ids['fig15_redraw']}")
  # submitted again: queued jobs are not submitted twice
  assert cli.main(args) == 0
  assert len(_calls(sbatch)) == len(calls)
  # a job that failed is submitted again, waiting on its queued needs by their SLURM ids
  state.write(str(runs), "fig15_redraw_f1", state="failed", rc=1,
              fingerprint=plan.fingerprints["fig15_redraw_f1"])
  assert cli.main(args) == 0
  again = _calls(sbatch)[len(calls):]
  assert len(again) == 1 and again[0][-1] == "fig15_redraw_f1"
  assert f"--dependency=afterok:{ids['proteins']}" in again[0]


def test_slurm_dry_run_prints_the_commands_and_submits_nothing(tmp_path, sbatch, capsys):
  assert cli.main(["reproduce", "--launcher", "slurm", "--dry-run", "--only", "fig16_relu",
                   "--runs", str(tmp_path / "runs")]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert not sbatch.exists()
  assert [line.split()[0] for line in lines] == ["sbatch"] * 4
  assert "'--dependency=afterok:<proteins>'" in lines[-1] and lines[-1].endswith("--job fig16_relu")


def test_slurm_without_sbatch_is_one_line_and_makes_no_folder(tmp_path, monkeypatch, capsys):
  monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no sbatch there
  assert cli.main(["reproduce", "--launcher", "slurm", "--only", "fig16_relu", "--runs",
                   str(tmp_path / "runs"), "--results", str(tmp_path / "results")]) == 2
  assert capsys.readouterr().err == ("performer reproduce: error: sbatch not found: the slurm "
                                     "launcher runs on a SLURM login node (or use --launcher "
                                     "print)\n")
  assert os.listdir(tmp_path) == []


def test_the_job_template_runs_the_plan_command(tmp_path):
  text = open(os.path.join(ROOT, "scripts", "slurm", "job.sbatch")).read()
  assert "#SBATCH --signal=B:TERM@300" in text and 'reproduce "$@"' in text
  assert "#SBATCH --kill-on-invalid-dep=yes" in text  # no job left pending for ever


def test_a_job_refuses_to_run_before_what_it_needs(tmp_path, capsys):
  assert cli.main(["reproduce", "--job", "fig16_relu", "--runs", str(tmp_path / "runs"),
                   "--results", str(tmp_path / "results")]) == 2
  assert capsys.readouterr().err == ("performer reproduce: error: job fig16_relu needs jobs that "
                                     "have not finished: proteins (pending)\n")


def test_bad_flags_are_one_line_errors(tmp_path, capsys):
  for args, message in [
      (["--budget", "huge"], "--budget must be one of tiny, mini, paper"),
      (["--only", "fig99"], "--only: no study or job 'fig99'"),
      (["--job", "nope"], "--job: no job 'nope'; `performer reproduce --status` lists every job\n"),
      (["--only", ""], "--only needs a value"),
      (["--jobs", "0"], "--jobs must be a positive integer"),
      (["--gin_param", "ModelConfig.nonsense=1", "--only", "u_exact"], "job u_exact: gin: "),
      (["--sbatch", "gpu=8", "--launcher", "slurm"], "--sbatch 'gpu=8': give KIND=ARGS"),
      (["--runs", "/proc/x"], "cannot"),
  ]:
    status = cli.main(["reproduce", *args, "--results", str(tmp_path / "results")] + (
        [] if "--runs" in args else ["--runs", str(tmp_path / "r")]))
    err = capsys.readouterr().err
    assert status == 2 and err.startswith(f"performer reproduce: error: {message}"), (args, err)


def test_bad_folders_and_lists_are_refused_by_the_parser(tmp_path, capsys):
  (tmp_path / "a_file").write_text("")
  for args, message in [
      (["--only", "fig6,,fig5"], "argument --only: expected comma-separated values, got an "
                                 "empty item in 'fig6,,fig5'"),
      (["--only", "fig6,fig6"], "argument --only: fig6 is given twice in 'fig6,fig6'"),
      (["--runs", ""], "argument --runs: expected a folder, got an empty name"),
      (["--results", " "], "argument --results: expected a folder, got an empty name"),
      (["--runs", str(tmp_path / "a_file")], f"--runs {tmp_path / 'a_file'} is a file, not a "
                                             "folder"),
      (["--results", str(tmp_path / "a_file"), "--status"],
       f"--results {tmp_path / 'a_file'} is a file, not a folder"),
  ]:
    with pytest.raises(SystemExit) if "argument" in message else contextlib.nullcontext():
      status = cli.main(["reproduce", *args])
      assert status == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(message), args
  assert os.listdir(tmp_path) == ["a_file"]


@pytest.mark.parametrize("args, message", [
    (["--sbatch", "train=--time=1:00:00"], "--sbatch applies to --launcher slurm, not local"),
    (["--sbatch", "gpu=8", "--launcher", "print"], "--sbatch applies to --launcher slurm, not print"),
    (["--status", "--dry-run"], "--status and --dry-run: give one (both show and stop)"),
    (["--jobs", "2", "--launcher", "slurm"], "--jobs applies to --launcher local, not slurm"),
    (["--dry-run", "--launcher", "print"], "--launcher print runs nothing already: drop --dry-run"),
    (["--job", "u_exact", "--only", "fig6"], "--job runs one job here, in the foreground: drop --only"),
    (["--job", "u_exact", "--dry-run", "--jobs", "2"],
     "--job runs one job here, in the foreground: drop --dry-run, --jobs"),
    (["--job", "u_exact", "--launcher", "print"],
     "--job runs one job here, in the foreground: drop --launcher print"),
])
def test_flags_that_the_others_make_meaningless_are_refused(args, message, tmp_path, monkeypatch,
                                                            capsys):
  from performer.plans import slurm  # pylint: disable=import-outside-toplevel
  for module, name in ((local, "run"), (local, "run_one"), (slurm, "submit")):
    monkeypatch.setattr(module, name, lambda *a, **k: pytest.fail("ran with a flag ignored"))
  assert cli.main(["reproduce", *args, "--runs", str(tmp_path / "runs"),
                   "--results", str(tmp_path / "results")]) == 2
  assert capsys.readouterr().err == f"performer reproduce: error: {message}\n"
  assert not os.listdir(tmp_path)


def test_the_local_launcher_goes_on_when_a_fig6_decision_adds_jobs(tmp_path, monkeypatch):
  from performer.plans import command  # pylint: disable=import-outside-toplevel
  results, seen = tmp_path / "results", []
  def run(plan, *, jobs, say):
    del jobs, say
    seen.append({j.name for j in plan.jobs})
    if len(seen) == 1:  # the first pass ends with the gate decided: (U) passed, (B) did not
      results.mkdir()
      (results / "fig6_gate.json").write_text(json.dumps(
          {"gates": {"U": {"passed": True}, "B": {"passed": False}}}))
    if len(seen) == 2:  # the second with the seeds decided: two more of (U) Reformer
      (results / "fig6_seeds.json").write_text(json.dumps({"more_seeds": [
          {"direction": "U", "attention": ["reformer"], "seeds": 5}]}))
    return 0
  monkeypatch.setattr(local, "run", run)
  monkeypatch.setattr(command, "_check_before_work", lambda plan, dry_run: None)
  assert cli.main(["reproduce", "--only", "fig6", "--runs", str(tmp_path / "runs"),
                   "--results", str(results)]) == 0
  assert len(seen) == 3  # once more with each grown plan, then no growth: done
  assert sorted(seen[1] - seen[0]) == sorted(["fig6_seeds", *(
      f"u_{a}_seed{s}{job}" for a in ("performer_relu", "performer_softmax", "reformer")
      for s in (1, 2) for job in ("", "_eval", "_archive"))])
  assert sorted(seen[2] - seen[1]) == sorted(
      f"u_reformer_seed{s}{job}" for s in (3, 4) for job in ("", "_eval", "_archive"))
