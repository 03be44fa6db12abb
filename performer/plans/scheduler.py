"""What SLURM says of the jobs a plan's stamps record as submitted to it or running there.

A SLURM job that ended without recording its end in its stamp is found here, to be run again."""

import dataclasses
import shutil
import subprocess

from performer.plans import state

# Ended through no fault of the job's own: a rerun resumes it. Any other end without a
# record (FAILED, OUT_OF_MEMORY, COMPLETED without a stamp) is a failure.
INTERRUPTED = ("CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "DEADLINE", "BOOT_FAIL",
               "REVOKED")
ENDED = (*INTERRUPTED, "COMPLETED", "FAILED", "OUT_OF_MEMORY")
NEVER = "DependencyNeverSatisfied"  # squeue's reason for a job that waits on a need that failed
TIMEOUT_SECONDS = 60


@dataclasses.dataclass(frozen=True)
class Seen:
  """What SLURM said of one recorded SLURM job.

  Attributes:
    slurm_id: the SLURM job id in the stamp this answers.
    verdict: "queued" (pending or running there: left alone), "failed" or
      "interrupted" (gone without recording an end, or never to start), or
      "unchecked" (SLURM could not be asked; the stamp is taken as it is).
    detail: SLURM's state and why, for --status.
  """
  slurm_id: str
  verdict: str
  detail: str


def check(plan, *, cancel=False, say=None):
  """The plan with SLURM's answer about each job whose stamp holds a queued SLURM job.

  Args:
    plan: a resolved Plan.
    cancel: scancel the jobs that will never start (a need failed), as the
      launchers do before running them again; --status and dry runs look only.
    say: where one line goes for each job found gone and for SLURM that
      cannot be asked (None: nowhere).
  """
  say = say or (lambda _: None)
  ids = {}
  for job in plan.jobs:
    stamp = state.read(plan.ctx.runs, job.name) or {}
    if stamp.get("state") in state.ELSEWHERE and stamp.get("slurm_id"):
      ids[job.name] = str(stamp["slurm_id"])
  if not ids:
    return plan
  queued, why_not = _squeue(ids.values())
  ended, no_sacct = _sacct([i for i in ids.values() if i not in queued])
  seen = {}
  for name, slurm_id in ids.items():
    slurm_state, code = queued.get(slurm_id) or ended.get(slurm_id) or ("", "")
    if slurm_state and slurm_state.split()[0] not in ENDED:
      seen[name] = Seen(slurm_id, "queued", f"SLURM: {slurm_state}"
                        + (f" ({code})" if slurm_id in queued and code not in ("", "None") else ""))
    elif slurm_state:
      verdict = "interrupted" if slurm_state.split()[0] in INTERRUPTED else "failed"
      shared = (" (is the runs folder on a file system the nodes share?)"
                if slurm_state == "COMPLETED" else "")
      seen[name] = Seen(slurm_id, verdict, f"SLURM job {slurm_id} ended {slurm_state} (exit "
                        f"{code}) without recording an end{shared}")
    elif why_not:  # not in a queue that squeue could not list, nor in sacct
      seen[name] = Seen(slurm_id, "unchecked", f"not checked with SLURM: {why_not}; "
                        + (no_sacct or "sacct has no record of it"))
    else:
      seen[name] = Seen(slurm_id, "interrupted", f"SLURM job {slurm_id} left the queue without "
                        "recording an end; how it ended is unknown: "
                        + (no_sacct or "sacct has no record of it"))
  _never_to_start(plan, seen, queued, cancel)
  for name, s in seen.items():
    if s.verdict in ("failed", "interrupted"):
      say(f"{name}: {s.detail}; it is {s.verdict}, to run again")
  unchecked = [name for name, s in seen.items() if s.verdict == "unchecked"]
  if unchecked:
    say(f"not checked with SLURM ({why_not}; {no_sacct or 'sacct has no record of them'}): "
        f"{len(unchecked)} job(s) recorded as submitted there are taken as still queued: "
        + ", ".join(unchecked))
  return dataclasses.replace(plan, slurm=seen)


def _never_to_start(plan, seen, queued, cancel):
  """Marks failed the pending jobs that wait on a need that failed, scancel-ing them if asked."""
  gone = {n for n, s in seen.items() if s.verdict in ("failed", "interrupted")}
  for job in plan.jobs:
    s = seen.get(job.name)
    if not s or s.verdict != "queued" or queued.get(s.slurm_id, ("",))[0] != "PENDING":
      continue
    dead = [n for n in job.needs if n in gone or (state.read(plan.ctx.runs, n) or {}).get(
        "state") in ("failed", "interrupted")]
    reason = queued[s.slurm_id][1]
    if reason != NEVER and not dead:
      continue
    detail = (f"SLURM job {s.slurm_id} will never start: "
              + (f"{', '.join(dead)} failed or stopped" if dead else "a job it needs failed")
              + f" (PENDING, {reason})")
    if cancel:
      done = _run(["scancel", s.slurm_id])
      detail += ("; cancelled" if done and not done.returncode else
                 f"; scancel failed ({_last(done) if done else 'not on PATH'}): cancel it by hand")
    seen[job.name] = Seen(s.slurm_id, "failed", detail)
    gone.add(job.name)  # and what waits on it never starts either (plan order: needs first)


def _squeue(ids):
  """({id: (state, reason)} of the jobs still in SLURM's queue, why squeue could not say or '')."""
  done = _run(["squeue", "--noheader", "--format=%i|%T|%r", "--jobs=" + ",".join(ids)])
  if done is None:
    return {}, "squeue is not on PATH"
  if done.returncode:
    if "invalid job id" in done.stderr.lower():  # every id has left the queue
      return {}, ""
    return {}, f"squeue failed: {_last(done)}"
  rows = [[w.strip() for w in line.split("|")] for line in done.stdout.splitlines()
          if line.count("|") >= 2]
  # a job that has just ended may still be listed a while: sacct says how it ended
  return {r[0]: (r[1], r[2]) for r in rows if r[1] and r[1].split()[0] not in ENDED}, ""


def _sacct(ids):
  """({id: (state, exit code)} that SLURM's accounting knows, why it knows none of `ids`)."""
  if not ids:
    return {}, ""
  done = _run(["sacct", "--noheader", "--parsable2", "--allocations",
               "--format=JobID,State,ExitCode", "--jobs=" + ",".join(ids)])
  if done is None:
    return {}, "sacct is not on PATH"
  if done.returncode:
    return {}, f"sacct failed: {_last(done)}"
  rows = [line.split("|") for line in done.stdout.splitlines() if line.count("|") >= 2]
  found = {r[0].strip(): (r[1].strip(), r[2].strip()) for r in rows if r[1].strip()}
  return found, ""


def _run(argv):
  """The finished command, or None when it is not on PATH; a hung controller counts as a failure."""
  if shutil.which(argv[0]) is None:
    return None
  try:
    return subprocess.run(argv, capture_output=True, text=True, check=False,
                          timeout=TIMEOUT_SECONDS)
  except subprocess.TimeoutExpired:
    return subprocess.CompletedProcess(argv, 1, "", f"no answer in {TIMEOUT_SECONDS} s")
  except OSError as e:
    return subprocess.CompletedProcess(argv, 1, "", e.strerror or str(e))


def _last(done):
  return (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no output"])[-1]
