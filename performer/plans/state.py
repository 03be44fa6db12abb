"""Where each job of a plan stands: stamps written by the launchers, logs, the status table.

A job is done when its stamp says done with the plan's fingerprint and its outputs exist."""

import json
import os
import socket
import time

from performer.atomic import atomic_path

# A job in one of these is not run again; restorable: a run would restore it from its
# archive first (archive.preview, for --status and dry runs).
FINISHED = ("done", "diverged", "skipped", "restorable")
ELSEWHERE = ("running", "submitted")  # nor one that another launcher runs or has queued


def stamp_path(runs, name):
  return os.path.join(runs, ".plan", f"{name}.json")


def read(runs, name):
  try:
    with open(stamp_path(runs, name)) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def write(runs, name, **fields):
  """Replaces the job's stamp with `fields` plus the time and host."""
  path = stamp_path(runs, name)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  stamp = {**fields, "time": time.strftime("%Y-%m-%d %H:%M:%S"), "host": socket.gethostname()}
  with atomic_path(path) as tmp, open(tmp, "w") as f:
    json.dump(stamp, f, indent=1, sort_keys=True)


def new_log(runs, name):
  """The path of a new attempt's log: <runs>/logs/<name>/<n>.log, n counting from 1."""
  folder = os.path.join(runs, "logs", name)
  os.makedirs(folder, exist_ok=True)
  taken = [int(f.split(".")[0]) for f in os.listdir(folder) if f.split(".")[0].isdigit()]
  return os.path.join(folder, f"{max(taken, default=0) + 1}.log")


def slurm_log(runs, name, slurm_id):
  """Where SLURM writes job `name`'s output: the launcher's lines and SLURM's own (a time limit)."""
  return os.path.join(runs, "logs", name, f"slurm-{slurm_id}.log")


def state(plan, job):
  """(state, detail) of a job: done, diverged, skipped, restorable, running, submitted, failed,
  interrupted, pending, or missing (an input prepared elsewhere that is not there).

  A running stamp whose processes are gone (a launcher killed before it
  could record the end) is interrupted. A stamp of a SLURM job is read
  with what SLURM said of it (plan.slurm, scheduler.check): gone without
  recording an end, it is failed or interrupted."""
  outputs = all(os.path.exists(p) for p in job.outputs)
  if not job.command:
    return ("done", "") if outputs else ("missing", "prepare it first: " + ", ".join(job.outputs))
  if job.name in plan.restorable:  # restore would replace its stamp
    return "restorable", plan.restorable[job.name]
  stamp = read(plan.ctx.runs, job.name) or {}
  kind = stamp.get("state")
  slurm = plan.slurm.get(job.name)
  if not (slurm and kind in ELSEWHERE and slurm.slurm_id == str(stamp.get("slurm_id"))):
    slurm = None  # SLURM's answer was about an earlier stamp
  gone = slurm is not None and slurm.verdict in ("failed", "interrupted")
  if kind == "running" and (not gone if slurm else _alive(stamp)):
    where = f"pid {stamp.get('pid')} on {stamp.get('host')}, since {stamp.get('time')}"
    return "running", _joined(where, slurm)
  if job.kind == "data" and outputs:  # its command checks its own inputs (data.py)
    return "done", ""
  if not stamp:
    return "pending", ""
  same = stamp.get("fingerprint") == plan.fingerprints[job.name]
  if kind == "submitted" and same and not gone:
    return "submitted", _joined(f"SLURM job {stamp['slurm_id']}, {stamp['time']}", slurm)
  if not same:
    return "pending", ("changed since its last attempt" if kind in FINISHED else
                       f"its last attempt ({kind}, {stamp.get('time')}) had another "
                       "configuration (other flags or code)")
  if gone:
    return slurm.verdict, slurm.detail
  if kind in FINISHED and (outputs or kind != "done"):
    return kind, stamp.get("detail", "")
  if kind in ("failed", "interrupted"):
    return kind, f"exit status {stamp.get('rc')}, {stamp['time']}"
  if kind == "running":
    return "interrupted", (f"its launcher stopped before recording an end (pid {stamp.get('pid')} "
                           f"is gone), {stamp['time']}")
  return "pending", "outputs missing" if kind == "done" else ""


def _joined(detail, slurm):
  return f"{detail}; {slurm.detail}" if slurm else detail


def _alive(stamp):
  """Whether the job's process or the launcher that records its end still runs (True for
  another machine's: it says running until it says otherwise)."""
  if stamp.get("host") != socket.gethostname():
    return True
  return any(_runs(pid) for pid in (stamp.get("pid"), stamp.get("launcher")))


def _runs(pid):
  try:
    os.kill(pid, 0)
  except (OSError, TypeError):
    return False
  try:  # a zombie has ended: an orphan that its new parent (a container's init) never reaps
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0] != "Z"
  except (OSError, IndexError):
    return True


def last_lines(path, n=5):
  try:
    with open(path, errors="replace") as f:
      lines = [line.rstrip() for line in f.read().replace("\r", "\n").splitlines() if line.strip()]
  except OSError:
    return []
  return lines[-n:]


def table(plan):
  """The status table's lines: one per job (state, kind, study, detail), failed jobs' log tails."""
  rows, tails, counts = [], [], {}
  for job in plan.jobs:
    kind, detail = state(plan, job)
    counts[kind] = counts.get(kind, 0) + 1
    rows.append((job.name, kind, job.kind, job.study, detail))
    if kind in ("failed", "interrupted"):
      stamp = read(plan.ctx.runs, job.name) or {}
      log = stamp.get("log") or (slurm_log(plan.ctx.runs, job.name, stamp["slurm_id"])
                                 if stamp.get("slurm_id") else "")
      tails.append(f"{job.name}: {log}")
      tails += [f"  | {line}" for line in last_lines(log)]
  width = max(len(r[0]) for r in rows)
  lines = [f"{'job':{width}}  {'state':11} {'kind':7} {'study':7} detail"]
  lines += [f"{n:{width}}  {s:11} {k:7} {st:7} {d}".rstrip() for n, s, k, st, d in rows]
  order = (*FINISHED, "running", "submitted", "failed", "interrupted", "pending", "missing")
  lines.append(", ".join(f"{counts[k]} {k}" for k in order if k in counts)
               + f"; runs in {plan.ctx.runs}")
  return lines + tails
