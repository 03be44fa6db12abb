"""SLURM jobs checked against the scheduler: fake sbatch, squeue, sacct and scancel on PATH.

The fake cluster is one JSON file: each job's state, squeue's reason, exit
code, whether squeue still lists it and whether sacct knows it. The tests
set what SLURM did (cancelled, timed out, lost its node...) and check what
--status says and what is submitted again.
"""

import json
import os
import sys
import textwrap

import pytest

from performer import cli, plans
from performer.plans import local, scheduler, slurm, state

sys.path.insert(0, os.path.dirname(__file__))
import test_launchers as t  # pylint: disable=wrong-import-position

# One script, four commands (by the name it is called as), as SLURM 23 answers them.
FAKE = textwrap.dedent("""\
    #!{python}
    import json, os, sys
    path, command, args = os.environ["FAKE_SLURM"], os.path.basename(sys.argv[0]), sys.argv[1:]
    cluster = json.load(open(path)) if os.path.exists(path) else {{"jobs": {{}}, "calls": []}}
    cluster["calls"].append([command, *args])
    jobs = cluster["jobs"]
    asked = next((a.split("=", 1)[1].split(",") for a in args if a.startswith("--jobs=")), [])
    rc = 0
    if command == "sbatch":
      slurm_id = str(1000 + sum(c[0] == "sbatch" for c in cluster["calls"]) - 1)
      jobs[slurm_id] = {{"state": "PENDING", "reason": "Priority", "exit": "0:0", "queued": True,
                         "accounted": True, "argv": args}}
      print(f"{{slurm_id}};cluster")
    elif command == "squeue":
      rows = [f"{{i}}|{{jobs[i]['state']}}|{{jobs[i]['reason']}}" for i in asked
              if i in jobs and jobs[i]["queued"]]
      if rows:
        print("\\n".join(rows))
      else:
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        rc = 1
    elif command == "sacct":
      if cluster.get("no_accounting"):
        print("sacct: error: Slurm accounting storage is disabled", file=sys.stderr)
        rc = 1
      for i in asked:
        if i in jobs and jobs[i]["accounted"]:
          print(f"{{i}}|{{jobs[i]['state']}}|{{jobs[i]['exit']}}")
    elif command == "scancel":
      jobs[args[0]].update(state="CANCELLED by 1234", queued=False)
    json.dump(cluster, open(path, "w"))
    sys.exit(rc)
""").format(python=sys.executable)


class Cluster:
  """The fake SLURM: its commands first on PATH (and nothing else there), its state at hand."""

  def __init__(self, tmp_path, monkeypatch, commands=("sbatch", "squeue", "sacct", "scancel")):
    self.path = tmp_path / "cluster.json"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in commands:
      (bin_dir / name).write_text(FAKE)
      (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))  # no real SLURM, nor its absence, leaks in
    monkeypatch.setenv("FAKE_SLURM", str(self.path))

  def read(self):
    return json.loads(self.path.read_text())

  def set(self, slurm_id, **fields):
    cluster = self.read()
    cluster["jobs"][slurm_id].update(fields)
    self.path.write_text(json.dumps(cluster))

  def calls(self, command):
    return [c[1:] for c in self.read()["calls"] if c[0] == command]

  def submitted(self):
    """{job name: its sbatch argv} of every submission, in order (a name may come back)."""
    return [(c[-1], c) for c in self.calls("sbatch")]


@pytest.fixture(name="cluster")
def _cluster(tmp_path, monkeypatch):
  return Cluster(tmp_path, monkeypatch)


def _chain(tmp_path):
  """a -> b -> c, stand-in jobs; submitted as SLURM jobs 1000, 1001, 1002."""
  return t._plan(tmp_path, [t._job(tmp_path, "a", 0), t._job(tmp_path, "b", 0, needs=("a",)),
                            t._job(tmp_path, "c", 0, needs=("b",))])


def _submit(plan):
  return slurm.submit(scheduler.check(plan, cancel=True), ["--budget", "mini"],
                      say=lambda _: None)


def _ran_on_a_node(plan, name, slurm_id, end=None):
  """What job.sbatch's `performer reproduce --job` writes: a running stamp, then maybe its end."""
  runs, job = plan.ctx.runs, plan[name]
  state.write(runs, name, state="running", pid=4242, launcher=4241, slurm_id=slurm_id,
              log=os.path.join(runs, "logs", name, "1.log"), fingerprint=plan.fingerprints[name])
  if end == "done":
    for out in job.outputs:
      open(out, "w").close()
  if end:
    state.write(runs, name, state=end, rc=0 if end == "done" else 1, slurm_id=slurm_id,
                fingerprint=plan.fingerprints[name])
  stamp = json.load(open(state.stamp_path(runs, name)))
  stamp["host"] = "node7"  # another machine's stamp: only SLURM can say it is gone
  json.dump(stamp, open(state.stamp_path(runs, name), "w"))


def _states(plan):
  checked = scheduler.check(plan)
  return {j.name: state.state(checked, j) for j in plan.jobs}


def test_a_job_cancelled_while_queued_is_interrupted_and_submitted_again(tmp_path, cluster):
  plan = _chain(tmp_path)
  assert _submit(plan) == {"a": "1000", "b": "1001", "c": "1002"}
  cluster.set("1002", state="CANCELLED by 1234", queued=False)
  states = _states(plan)
  assert states["c"] == ("interrupted", "SLURM job 1002 ended CANCELLED by 1234 (exit 0:0) without "
                                        "recording an end")
  assert states["a"] == ("submitted", states["a"][1]) and states["a"][1].endswith(
      "; SLURM: PENDING (Priority)")
  assert _submit(plan) == {"c": "1003"}  # the queued a and b are left alone
  assert "--dependency=afterok:1001" in cluster.submitted()[-1][1]  # waits on b's queued job
  assert state.state(scheduler.check(plan), plan["c"])[0] == "submitted"


@pytest.mark.parametrize("ended", ["TIMEOUT", "NODE_FAIL"])
def test_a_job_that_ran_out_of_time_or_lost_its_node_is_interrupted_and_runs_again(
    tmp_path, cluster, ended):
  plan = _chain(tmp_path)
  _submit(plan)
  for name, slurm_id in (("a", "1000"), ("b", "1001")):
    _ran_on_a_node(plan, name, slurm_id, end="done")
    cluster.set(slurm_id, state="COMPLETED", queued=False)
  _ran_on_a_node(plan, "c", "1002")  # killed before it could write its end
  cluster.set("1002", state=ended, exit="0:15", queued=False)
  kind, detail = _states(plan)["c"]
  assert kind == "interrupted" and f"SLURM job 1002 ended {ended} (exit 0:15)" in detail
  table = "\n".join(state.table(scheduler.check(plan)))
  assert "1 interrupted" in table and f"c: {plan.ctx.runs}/logs/c/1.log" in table
  assert _submit(plan) == {"c": "1003"}
  assert not any(w.startswith("--dependency") for w in cluster.submitted()[-1][1])


def test_a_job_whose_need_failed_is_cancelled_and_submitted_again_after_it(tmp_path, cluster):
  plan = _chain(tmp_path)
  _submit(plan)
  _ran_on_a_node(plan, "a", "1000", end="failed")
  cluster.set("1000", state="FAILED", exit="1:0", queued=False)
  cluster.set("1001", reason="DependencyNeverSatisfied")  # SLURM keeps b pending for ever
  cluster.set("1002", reason="Dependency")  # c waits on b
  states = _states(plan)
  assert states["a"][0] == "failed" and states["a"][1].startswith("exit status 1")
  assert states["b"] == ("failed", "SLURM job 1001 will never start: a failed or stopped "
                                   "(PENDING, DependencyNeverSatisfied)")
  assert states["c"] == ("failed", "SLURM job 1002 will never start: b failed or stopped "
                                   "(PENDING, Dependency)")
  assert not cluster.calls("scancel")  # --status looks only
  assert _submit(plan) == {"a": "1003", "b": "1004", "c": "1005"}
  assert cluster.calls("scancel") == [["1001"], ["1002"]]
  assert "--dependency=afterok:1003" in cluster.submitted()[-2][1]
  assert "--dependency=afterok:1004" in cluster.submitted()[-1][1]


def test_a_running_job_is_left_alone_and_shows_slurms_state(tmp_path, cluster):
  plan = _chain(tmp_path)
  _submit(plan)
  _ran_on_a_node(plan, "a", "1000")
  cluster.set("1000", state="RUNNING", reason="None")
  kind, detail = _states(plan)["a"]
  assert kind == "running" and detail.startswith("pid 4242 on node7") and detail.endswith(
      "; SLURM: RUNNING")
  assert _submit(plan) == {}
  assert not cluster.calls("scancel")


def test_completed_jobs_with_their_records_are_done_and_slurm_is_not_asked(tmp_path, cluster):
  plan = _chain(tmp_path)
  _submit(plan)
  for name, slurm_id in (("a", "1000"), ("b", "1001"), ("c", "1002")):
    _ran_on_a_node(plan, name, slurm_id, end="done")
    cluster.set(slurm_id, state="COMPLETED", queued=False)
  calls = len(cluster.read()["calls"])
  assert [s for s, _ in _states(plan).values()] == ["done"] * 3
  assert _submit(plan) == {}
  assert len(cluster.read()["calls"]) == calls  # nothing left to ask about


def test_a_completed_job_without_its_record_is_failed(tmp_path, cluster):
  plan = _chain(tmp_path)
  _submit(plan)
  cluster.set("1000", state="COMPLETED", queued=False)  # its stamp went to a disk we do not see
  kind, detail = _states(plan)["a"]
  assert kind == "failed" and "is the runs folder on a file system the nodes share?" in detail


def test_a_job_gone_from_the_queue_without_accounting_is_interrupted(tmp_path, cluster):
  plan = _chain(tmp_path)
  _submit(plan)
  cluster.set("1002", state="CANCELLED", queued=False, accounted=False)
  cluster.path.write_text(json.dumps({**cluster.read(), "no_accounting": True}))
  assert _states(plan)["c"] == (
      "interrupted", "SLURM job 1002 left the queue without recording an end; how it ended is "
      "unknown: sacct failed: sacct: error: Slurm accounting storage is disabled")


def test_without_squeue_or_sacct_on_path_the_jobs_are_said_to_be_unchecked(tmp_path, monkeypatch):
  cluster = Cluster(tmp_path, monkeypatch, commands=("sbatch",))
  plan = _chain(tmp_path)
  _submit(plan)
  cluster.set("1002", state="CANCELLED", queued=False)  # unknowable here
  said = []
  checked = scheduler.check(plan, say=said.append)
  assert state.state(checked, plan["c"])[0] == "submitted"
  assert state.state(checked, plan["c"])[1].endswith(
      "; not checked with SLURM: squeue is not on PATH; sacct is not on PATH")
  assert said == ["not checked with SLURM (squeue is not on PATH; sacct is not on PATH): 3 "
                  "job(s) recorded as submitted there are taken as still queued: a, b, c"]


def test_the_local_launcher_runs_a_cancelled_job_and_leaves_a_queued_one(tmp_path, cluster):
  plan = t._plan(tmp_path, [t._job(tmp_path, "gone", 0), t._job(tmp_path, "queued", 0)])
  _submit(plan)
  cluster.set("1000", state="CANCELLED by 1234", queued=False)
  said = []
  assert local.run(scheduler.check(plan, cancel=True, say=said.append), say=said.append) == 0
  assert [e["job"] for e in t._events(tmp_path) if e["what"] == "start"] == ["gone"]
  assert "running or queued elsewhere, not started here: queued" in said
  assert said[-1] == ("nothing left to run here; still running or queued elsewhere: queued "
                      "(`--status`)")


def test_reproduce_and_status_ask_slurm(tmp_path, cluster, capsys):
  runs = tmp_path / "runs"
  args = ["reproduce", "--launcher", "slurm", "--only", "fig16_relu", "--runs", str(runs),
          "--results", str(tmp_path / "results")]
  assert cli.main(args) == 0
  ids = {name: str(1000 + i) for i, (name, _) in enumerate(cluster.submitted())}
  assert sorted(ids) == ["fig16_relu", "pfam_labels", "proteins", "swissprot"]
  cluster.set(ids["fig16_relu"], state="TIMEOUT", exit="0:15", queued=False)
  capsys.readouterr()
  assert cli.main(args + ["--status"]) == 0
  out = capsys.readouterr().out
  row = next(line for line in out.splitlines() if line.startswith("fig16_relu "))
  assert "interrupted" in row and f"SLURM job {ids['fig16_relu']} ended TIMEOUT" in row
  assert "SLURM: PENDING (Priority)" in out  # the others, as SLURM has them
  assert cli.main(args) == 0
  assert [name for name, _ in cluster.submitted()] == [*ids, "fig16_relu"]
  assert f"--dependency=afterok:{ids['proteins']}" in cluster.submitted()[-1][1]
  assert "fig16_relu: SLURM job 1003 ended TIMEOUT" in capsys.readouterr().out
