"""`performer reproduce`: build the plan of a budget, check it, and hand it to a launcher."""

import importlib.util
import shlex
import time

from performer import plans
from performer.atomic import writable_folder
from performer.errors import UserError
from performer.plans import local, slurm, state

LAUNCHERS = ("local", "slurm", "print")


def main(args):
  """Runs `performer reproduce` with parsed flags (cli.py); returns the exit status.

  Raises:
    UserError: bad flags, an invalid job configuration (naming the job), an
      input that is missing, or folders that cannot be written; all before
      any work starts.
  """
  if args.jobs is not None and args.jobs < 1:
    raise UserError(f"--jobs must be a positive integer, got {args.jobs}")
  ctx = plans.context(args.budget, runs=args.runs, results=args.results, data=args.data,
                      steps=args.steps, bindings=args.gin_param,
                      swissprot_route=args.swissprot_route)
  jobs = plans.build(ctx)
  only = [args.job] if args.job else [n.strip() for n in (args.only or "").split(",") if n.strip()]
  if args.only is not None and not only:
    raise UserError("--only needs a value: studies or jobs, comma-separated")
  plan = plans.resolve(ctx, plans.select(jobs, only or None))
  say = lambda text: print(f"[reproduce {ctx.budget.name} {time.strftime('%H:%M:%S')}] {text}",
                           flush=True)
  if args.status:
    print("\n".join(state.table(plan)))
    return 0
  if args.job:
    return local.run_one(plan, args.job, say=say)
  if args.launcher == "print":
    print("\n".join(commands(plan)))
    return 0
  _check_before_work(plan, dry_run=args.dry_run)
  if args.launcher == "slurm":
    slurm.submit(plan, plan_args(args, ctx), kinds=slurm.resources(args.sbatch),
                 dry_run=args.dry_run, say=print if args.dry_run else say)
    return 0
  if args.dry_run:
    print("\n".join(commands(plan)))
    return 0
  return local.run(plan, jobs=args.jobs or ctx.budget.jobs, say=say)


def commands(plan):
  """The shell command of each unfinished job, in an order that respects needs."""
  lines = [f"# {len(plan.jobs)} jobs of the {plan.ctx.budget.name} plan; finished ones are left out"]
  for job in plan.jobs:
    kind, detail = state.state(plan, job)
    if kind in state.FINISHED:
      continue
    if not job.command:
      lines.append(f"# {job.name}: {detail or 'prepared elsewhere'}")
      continue
    lines.append(" ".join(shlex.quote(w) for w in job.command))
  return lines


def plan_args(args, ctx):
  """The flags that rebuild this plan on another machine (absolute folders)."""
  out = ["--budget", ctx.budget.name, "--runs", ctx.runs, "--results", ctx.results,
         "--swissprot-route", ctx.swissprot_route]
  if ctx.given_data:
    out += ["--data", ctx.data]
  if args.steps is not None:
    out += ["--steps", str(args.steps)]
  for binding in args.gin_param:
    out += ["--gin_param", binding]
  return out


def _check_before_work(plan, *, dry_run):
  """What hours of work would otherwise find late: missing inputs, folders, label-pfam's pyhmmer."""
  states = {j.name: state.state(plan, j) for j in plan.jobs}
  missing = [f"{name}: {detail}" for name, (kind, detail) in states.items() if kind == "missing"]
  if missing:
    raise UserError("; ".join(missing))
  if dry_run:
    return
  for folder in (plan.ctx.runs, plan.ctx.results):
    writable_folder(folder)  # UserError naming the folder
  if "pfam_labels" in states and states["pfam_labels"][0] not in state.FINISHED:
    if importlib.util.find_spec("pyhmmer") is None:
      raise UserError("the Pfam labels of the OOD split need pyhmmer: pip install "
                      "'performer[labels]' (scripts/reproduce.sh installs it)")
