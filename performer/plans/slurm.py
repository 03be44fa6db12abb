"""The SLURM launcher: one `sbatch` per unfinished job, each waiting (afterok) for those it needs.

Each job runs scripts/slurm/job.sbatch, `performer reproduce ... --job NAME`, on its node."""

import os
import shlex
import shutil
import subprocess

from performer.errors import UserError
from performer.plans import local, state
from performer.plans.context import repo

TEMPLATE = repo("scripts/slurm/job.sbatch")
# Per job kind: sbatch options. One node each; a paper-size train takes its 8 GPUs (as
# scripts/slurm/train_one_node.sbatch), evals and probes one, figures and data CPUs only.
RESOURCES = {
    "train": ("--gpus-per-node=8", "--cpus-per-task=16", "--time=24:00:00"),
    "eval": ("--gpus-per-node=1", "--cpus-per-task=8", "--time=2:00:00"),
    "probe": ("--gpus-per-node=1", "--cpus-per-task=8", "--time=2:00:00"),
    "archive": ("--cpus-per-task=1", "--time=0:10:00"),
    "figure": ("--cpus-per-task=2", "--time=0:30:00"),
    "data": ("--cpus-per-task=16", "--time=6:00:00"),
}


def resources(overrides=()):
  """RESOURCES with KIND=ARGS overrides (--sbatch), e.g. "train=--gres=gpu:4 --time=48:00:00".

  Raises:
    UserError: a malformed override or an unknown kind.
  """
  out = dict(RESOURCES)
  for text in overrides:
    kind, sep, args = text.partition("=")
    if not sep or kind not in RESOURCES:
      raise UserError(f"--sbatch {text!r}: give KIND=ARGS with KIND one of {', '.join(RESOURCES)}")
    out[kind] = tuple(shlex.split(args))
  return out


def check_sbatch():
  """Raises UserError unless sbatch is on PATH: before any folder is made for the jobs."""
  if shutil.which("sbatch") is None:
    raise UserError("sbatch not found: the slurm launcher runs on a SLURM login node "
                    "(or use --launcher print)")


def commands(plan, plan_args, kinds):
  """(job, sbatch argv without the dependency, the needs to wait for) of each unfinished job."""
  out = []
  for job in plan.jobs:
    kind, detail = state.state(plan, job)
    if kind in state.FINISHED + state.ELSEWHERE:
      continue
    if kind == "missing":
      raise UserError(f"job {job.name}: {detail}")
    log = state.slurm_log(plan.ctx.runs, job.name, "%j")
    argv = ["sbatch", "--parsable", f"--job-name=performer-{job.name}", f"--output={log}",
            f"--export=ALL,PERFORMER={' '.join(local.executable())}", *kinds[job.kind], TEMPLATE,
            *plan_args, "--job", job.name]
    waits = [n for n in job.needs if state.state(plan, plan[n])[0] not in state.FINISHED]
    out.append((job, argv, waits))
  return out


def submit(plan, plan_args, *, kinds=None, dry_run=False, say=print):
  """Submits the plan's unfinished jobs (or, with dry_run, prints the sbatch commands).

  Args:
    plan: a resolved Plan, checked with SLURM (scheduler.check): jobs gone
      from SLURM without recording an end are submitted again.
    plan_args: the `performer reproduce` flags that rebuild this plan on a
      node (budget, folders, overrides), without the launcher's own.
    kinds: resources per kind (resources()); default RESOURCES.

  Returns:
    {job name: SLURM job id} of what was submitted ({} with dry_run).

  Raises:
    UserError: sbatch is not found or refuses a job (naming it and what it
      said), or a job needs one that runs outside SLURM.
  """
  kinds = kinds or RESOURCES
  if not dry_run:
    check_sbatch()
  ids = {}
  for job, argv, waits in commands(plan, plan_args, kinds):
    after = []
    for need in waits:
      # submitted in this call, or by an earlier one and still queued (its stamp has the id)
      known = ids.get(need) or (state.read(plan.ctx.runs, need) or {}).get("slurm_id")
      if known is None:
        raise UserError(f"job {job.name} needs {need}, which runs outside SLURM "
                        f"({state.state(plan, plan[need])[0]}); submit again when it is done")
      after.append(known)
    if after:
      argv.insert(argv.index(TEMPLATE), "--dependency=afterok:" + ":".join(after))
    if dry_run:
      say(" ".join(shlex.quote(w) for w in argv))
      ids[job.name] = f"<{job.name}>"
      continue
    folder = os.path.dirname(state.slurm_log(plan.ctx.runs, job.name, "%j"))
    os.makedirs(folder, exist_ok=True)
    try:
      done = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as e:
      done = subprocess.CompletedProcess(argv, 1, "", f"cannot run sbatch: {e.strerror}")
    if done.returncode:
      if not os.listdir(folder):
        os.rmdir(folder)  # no empty log folder for a job that never started
      last = (done.stderr.strip().splitlines() or ["no output"])[-1]
      raise UserError(f"sbatch refused job {job.name}: {last} ({len(ids)} jobs submitted "
                      "before it; --status shows them)")
    ids[job.name] = done.stdout.strip().split(";")[0]
    state.write(plan.ctx.runs, job.name, state="submitted", slurm_id=ids[job.name],
                fingerprint=plan.fingerprints[job.name])
    say(f"{job.name}: SLURM job {ids[job.name]}")
  return {} if dry_run else ids
