"""`performer reproduce`: build the plan of a budget, check it, and hand it to a launcher."""

import dataclasses
import importlib.util
import os
import shlex
import time

from performer import plans
from performer.atomic import writable_folder
from performer.errors import UserError
from performer.flags import binding, flag, folder
from performer.plans import archive, local, scheduler, slurm, state

LAUNCHERS = ("local", "slurm", "print")
NAME = "reproduce"  # the command
SUMMARY = "every study of the paper as one plan, run here or on a SLURM cluster"
DESCRIPTION = ("Builds the plan of a budget: data, training runs, evals, probes, tables and "
               "figures, each a job that starts when the jobs it needs are done. Finished jobs are "
               "skipped (a job is done when its outputs exist and its stamp has the same "
               "fingerprint of its resolved config), a killed run resumes from its checkpoint: run "
               "the same command again after an interruption. SIGTERM, SIGHUP or Ctrl-C makes "
               "every running train save, then stops. Jobs submitted to SLURM are checked with "
               "squeue and sacct first: one gone without recording an end runs again.")


def epilog():
  """The studies and budgets, for --help."""
  return ("studies (--only takes these, or job names; --status lists the jobs):\n  "
          + "\n  ".join(plans.summaries()) + "\n\nbudgets: tiny (the sample proteome, a few "
          "steps: a check), mini (Swiss-Prot 2014_01, 2-layer models, a 2-core CPU; results/), "
          "paper (36 layers, L = 1024: GPUs or a cluster)")


@dataclasses.dataclass(frozen=True)
class Flags:
  """The flags of `performer reproduce`."""
  budget: str = flag("mini", "tiny, mini or paper")
  only: tuple[str, ...] | None = flag(None, "studies or jobs to run, with the jobs they need",
                                      metavar="NAME[,NAME...]", shown="every study")
  launcher: str = flag("local", "local: run here, --jobs at a time; slurm: one sbatch per job, "
                       "with afterok dependencies (scripts/slurm/job.sbatch); print: the "
                       "commands, in an order that respects needs, for any other scheduler (each "
                       "`performer reproduce ... --job NAME`, which records the job)",
                       choices=LAUNCHERS)
  jobs: int | None = flag(None, "local: jobs at a time, each pinned to its share of the cores",
                          shown="2 for tiny and mini, 1 for paper")
  status: bool = flag(False, "show each job's state (done, restorable from its archive, running, "
                             "submitted with SLURM's own state, failed with its log's last lines, "
                             "pending) and stop; changes nothing")
  dry_run: bool = flag(False, "show what would run (slurm: the sbatch commands) and stop; changes "
                              "nothing")
  runs: str | None = flag(None, "folder of run workdirs, logs and the plan's state",
                          shown="runs/reproduce/BUDGET", parse=folder)
  results: str | None = flag(None, "tables, figures and probe results",
                             shown="results/ for mini, RUNS/results otherwise", parse=folder)
  data: str | None = flag(None, "a prepare-trembl dataset with an OOD split to use instead of "
                                "preparing Swiss-Prot")
  steps: int | None = flag(None, "TrainConfig.steps of every run")
  gin_param: tuple[str, ...] = flag((), "a gin binding added to every run, e.g. "
                                        "DataConfig.batch_size=1 (repeatable)", action="append",
                                    name="--gin_param", parse=binding)
  sbatch: tuple[str, ...] = flag(
      (), "slurm: sbatch options of one job kind (train, eval, archive, probe, figure, data) instead of "
      "the defaults, e.g. --sbatch 'train=--gres=gpu:4 --time=48:00:00'", action="append",
      metavar="KIND=ARGS")
  swissprot_route: str = flag("debian", "Swiss-Prot 2014_01 from Debian's archive (as results/) "
                              "or the current release from UniProt (scripts/get_swissprot.sh)",
                              choices=("debian", "download"))
  job: str | None = flag(None, "run this one job here in the foreground (what each SLURM job "
                               "runs)", metavar="NAME")


FLAGS = (Flags,)


def main(args):
  """Runs `performer reproduce` with parsed flags (cli.py); returns the exit status.

  Raises:
    UserError: bad or conflicting flags, an unknown study or job, an invalid
      job configuration (naming the job), an input that is missing, or
      folders that cannot be written; all before any work starts.
  """
  _check_flags(args)
  kinds = slurm.resources(args.sbatch)
  ctx = plans.context(args.budget, runs=args.runs, results=args.results, data=args.data,
                      steps=args.steps, bindings=args.gin_param,
                      swissprot_route=args.swissprot_route)
  only = [args.job] if args.job else list(args.only or ())
  if args.only is not None and not only:
    raise UserError("--only needs a value: studies or jobs, comma-separated")
  say = lambda text: print(f"[reproduce {ctx.budget.name} {time.strftime('%H:%M:%S')}] {text}",
                           flush=True)
  flag = "--job" if args.job else "--only"
  plan = plans.resolve(ctx, plans.select(plans.build(ctx), only or None, flag=flag))
  if args.status or args.dry_run:
    plan = archive.preview(plan)  # what a run would restore, copied nowhere
  elif args.launcher != "print":
    archive.restore(plan, say=say)
  if args.status:
    print("\n".join(state.table(scheduler.check(plan))))
    return 0
  if args.job:  # a SLURM job's step: its needs have ended, and it is its own SLURM job
    return local.run_one(plan, args.job, say=say)
  if args.launcher == "print":
    print("\n".join(commands(plan, plan_args(args, ctx))))
    return 0
  if args.launcher == "slurm" and not args.dry_run:
    slurm.check_sbatch()  # before any folder is made
  plan = scheduler.check(plan, cancel=not args.dry_run, say=say)
  _check_before_work(plan, dry_run=args.dry_run)
  if args.launcher == "slurm":
    slurm.submit(plan, plan_args(args, ctx), kinds=kinds,
                 dry_run=args.dry_run, say=print if args.dry_run else say)
    return 0
  if args.dry_run:
    print("\n".join(commands(plan)))
    return 0
  while True:
    status = local.run(plan, jobs=args.jobs or ctx.budget.jobs, say=say)
    grown = scheduler.check(plans.resolve(ctx, plans.select(plans.build(ctx), only or None)),
                            cancel=True, say=say)
    added = [j.name for j in grown.jobs if j.name not in plan.fingerprints]
    if status or not added:
      return status
    say(f"a decision of the plan added {len(added)} jobs (fig6's gate or seeds, "
        "performer/plans/fig6.py, or the recall study's learning rates, recall.py); going on")
    plan = grown


def _check_flags(args):
  """Refuses flags that the others make meaningless: one line, before any work."""
  for name, path in (("--runs", args.runs), ("--results", args.results)):
    if path is not None and os.path.exists(path) and not os.path.isdir(path):
      raise UserError(f"{name} {path} is a file, not a folder")
  if args.jobs is not None and args.jobs < 1:
    raise UserError(f"--jobs must be a positive integer, got {args.jobs}")
  if args.status and args.dry_run:
    raise UserError("--status and --dry-run: give one (both show and stop)")
  if args.sbatch and args.launcher != "slurm":
    raise UserError(f"--sbatch applies to --launcher slurm, not {args.launcher}")
  if args.jobs is not None and args.launcher != "local":
    raise UserError(f"--jobs applies to --launcher local, not {args.launcher}")
  if args.dry_run and args.launcher == "print":
    raise UserError("--launcher print runs nothing already: drop --dry-run")
  if args.job:  # what each SLURM job runs: the plan's flags and --job alone
    extra = [name for name, given in (("--only", args.only is not None),
                                      ("--dry-run", args.dry_run),
                                      ("--jobs", args.jobs is not None),
                                      (f"--launcher {args.launcher}", args.launcher != "local"))
             if given]
    if extra:
      raise UserError(f"--job runs one job here, in the foreground: drop {', '.join(extra)}")


def commands(plan, plan_flags=None):
  """The shell command of each unfinished job, in an order that respects needs.

  With `plan_flags` (`plan_args`; --launcher print), each is `performer reproduce <plan_flags>
  --job NAME`, as a SLURM job runs it: the job writes its stamp and log, so `--status` and the
  launchers know it ran. Without (--dry-run), the job's own command.
  """
  lines = [f"# {len(plan.jobs)} jobs of the {plan.ctx.budget.name} plan; finished ones are left out"]
  for job in plan.jobs:
    kind, detail = state.state(plan, job)
    if kind in state.FINISHED:
      continue
    if not job.command:
      lines.append(f"# {job.name}: {detail or 'prepared elsewhere'}")
      continue
    argv = (local.argv(job) if plan_flags is None else  # this interpreter's performer
            [*local.executable(), "reproduce", *plan_flags, "--job", job.name])
    lines.append(" ".join(shlex.quote(w) for w in argv))
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
  for path in (plan.ctx.runs, plan.ctx.results):
    writable_folder(path)  # UserError naming the folder
  if "pfam_labels" in states and states["pfam_labels"][0] not in state.FINISHED:
    if importlib.util.find_spec("pyhmmer") is None:
      raise UserError("the Pfam labels of the OOD split need pyhmmer: pip install "
                      "'performer[labels]' (scripts/reproduce.sh installs it)")
