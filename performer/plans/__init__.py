"""Experiment plans: every reproduction run declared once, as typed jobs, and the studies' registry.

A study is a module with STUDY, SUMMARY and jobs(ctx), listed in STUDIES."""

import dataclasses
import difflib
import os

from performer.errors import UserError
from performer.plans import (data, fig5, fig6, fig7, fig15, fig16, fig17, listops, probes,
                             recall, recall_conv, recall_kv)
from performer.plans.budgets import BUDGETS
from performer.plans.context import Context
from performer.plans.job import Job, fingerprint

STUDIES = {m.STUDY: m for m in (fig6, fig5, fig7, fig15, fig16, probes, recall, recall_conv,
                                 recall_kv, listops, fig17)}


@dataclasses.dataclass(frozen=True)
class Plan:
  """The jobs of one budget in an order that respects needs, with their fingerprints.

  `slurm` holds what SLURM said of the jobs recorded as submitted there
  ({name: scheduler.Seen}; scheduler.check), and `restorable` the jobs that
  archive.restore would bring back ({name: detail}; archive.preview, for
  --status and dry runs, which copy nothing); state.state reads both.
  """
  ctx: Context
  jobs: tuple[Job, ...]
  fingerprints: dict
  slurm: dict = dataclasses.field(default_factory=dict)
  restorable: dict = dataclasses.field(default_factory=dict)

  def __getitem__(self, name):
    return next(j for j in self.jobs if j.name == name)


def context(budget="mini", *, runs=None, results=None, data=None, steps=None, bindings=(),
            swissprot_route="debian"):
  """The Context of a budget with the CLI's folders and overrides (None: the budget's defaults).

  Raises:
    UserError: an unknown budget, a bad --steps or a --data folder that is not
      a prepared protein dataset with an OOD split.
  """
  if budget not in BUDGETS:
    raise UserError(f"--budget must be one of {', '.join(BUDGETS)}, got {budget!r}")
  b = BUDGETS[budget]
  runs = os.path.abspath(runs or os.path.join("runs", "reproduce", budget))
  fill = lambda path: os.path.abspath(path.format(runs=runs))
  extra = tuple(bindings)
  if steps is not None:
    if steps < 1:
      raise UserError(f"--steps must be a positive integer, got {steps}")
    extra = (f"TrainConfig.steps={steps}", *extra)
  if data is not None:
    _check_dataset(data)
  if b.sample_fasta:
    from performer.data import samples  # pylint: disable=import-outside-toplevel
    fasta = samples.fetch("protein")
  else:
    fasta = os.path.abspath(os.path.join("runs", "data", "swissprot.fasta.gz"))
  return Context(budget=b, runs=runs, data=os.path.abspath(data) if data else fill(b.data),
                 text_data=fill(b.text_data), results=fill(results or b.results), fasta=fasta,
                 extra=extra, given_data=data is not None, swissprot_route=swissprot_route)


def _check_dataset(path):
  import json  # pylint: disable=import-outside-toplevel
  try:
    with open(os.path.join(path, "stats.json")) as f:
      ood = json.load(f)["single"]["ood"]["count"]
  except (OSError, ValueError, KeyError, TypeError):
    ood = 0
  if not ood:
    raise UserError(f"--data {path} is not a prepare-trembl dataset with an OOD split (prepare it "
                    "with --families; see data/README.md)")


def build(ctx):
  """Every job of the budget: data first, then the studies in STUDIES' order.

  Raises:
    ValueError: two jobs of one name or a need that no job provides (a
      defect of a study module, not of the user's input).
  """
  jobs = [*data.jobs(ctx), *(j for study in STUDIES.values() for j in study.jobs(ctx))]
  # The archive of a run that a train or probe starts from keeps its checkpoint (archive.py).
  started_from = {n for j in jobs if j.kind in ("train", "probe") for n in j.needs}
  jobs = [dataclasses.replace(j, command=(*j.command, "--checkpoint"))
          if j.kind == "archive" and j.name.removesuffix("_archive") in started_from else j
          for j in jobs]
  names = [j.name for j in jobs]
  twice = sorted({n for n in names if names.count(n) > 1})
  if twice:
    raise ValueError(f"jobs declared twice: {', '.join(twice)}")
  missing = sorted({f"{j.name} needs {n}" for j in jobs for n in j.needs if n not in names})
  if missing:
    raise ValueError(f"needs without a job: {'; '.join(missing)}")
  return jobs


def select(jobs, only=None, *, flag="--only"):
  """The jobs `only` names (None: every study) and every job they need, in plan order.

  Args:
    jobs: the plan's jobs (build).
    only: names of studies or jobs (--only), or of one job (--job).
    flag: the flag that gave `only`, named in errors; "--job" takes job
      names alone, not studies.

  Raises:
    UserError: an unknown name, naming `flag` and the closest known names; studies
      named that have no jobs.
  """
  by_name = {j.name: j for j in jobs}
  studies = [*STUDIES, data.STUDY] if flag != "--job" else []
  wanted = set()
  for name in only or list(STUDIES):
    if name in studies:
      wanted |= {j.name for j in jobs if j.study == name}
    elif name in by_name:
      wanted.add(name)
    else:
      raise UserError(_unknown(name, flag, studies, by_name))
  if only and not wanted:
    raise UserError(f"{flag} {','.join(only)}: no jobs in this budget yet (none declared, or "
                    "waiting for another study's decision, as recall_kv waits for recall_conv's "
                    "learning rates: add that study to --only)")
  todo = list(wanted)
  while todo:
    for need in by_name[todo.pop()].needs:
      if need not in wanted:
        wanted.add(need)
        todo.append(need)
  return [j for j in ordered(jobs) if j.name in wanted]


def _unknown(name, flag, studies, jobs):
  """One line for an unknown name: the closest names, not all of them (hundreds of jobs)."""
  if not studies and name in STUDIES:
    return f"{flag}: {name} is a study, not a job; --only {name} runs it with the jobs it needs"
  close = difflib.get_close_matches(name, [*studies, *jobs], n=5)
  return (f"{flag}: no {'study or job' if studies else 'job'} {name!r}; "
          + (f"closest: {', '.join(close)}; " if close else "")
          + (f"studies: {', '.join(STUDIES)}; " if studies else "")
          + "`performer reproduce --status` lists every job")


def ordered(jobs):
  """The jobs in an order where each comes after the jobs it needs (stable otherwise).

  Raises:
    ValueError: a cycle of needs.
  """
  placed, out, pending = set(), [], list(jobs)
  while pending:
    ready = [j for j in pending if all(n in placed for n in j.needs)]
    if not ready:
      raise ValueError(f"a cycle of needs among {', '.join(j.name for j in pending)}")
    for j in ready:
      out.append(j)
      placed.add(j.name)
    pending = [j for j in pending if j.name not in placed]
  return out


def resolve(ctx, jobs):
  """Checks every job before any work and returns the Plan with each job's fingerprint.

  A train job's gin files and bindings are parsed and its configs built (an
  unknown binding or a bad value fails here, not after hours of data
  preparation); its fingerprint is taken over the resolved settings that
  differ from the configs' defaults (configurables.settings). Paths
  inside the runs folder, the data folders and the repository are written
  relative to them first, so a plan moved to another checkout or machine
  (with its runs folder or archive, `archive.py`) keeps its fingerprints.

  Raises:
    UserError: naming the job whose configuration is invalid.
  """
  from performer import configurables  # pylint: disable=import-outside-toplevel
  prints = {}
  for j in ordered(jobs):
    resolved = None
    if j.kind == "train":
      try:
        configurables.parse(list(j.gin), list(j.bindings))
        resolved = configurables.settings(changed_only=True)
      except UserError as e:
        raise UserError(f"job {j.name}: {e}") from None
    prints[j.name] = fingerprint(_portable(ctx, j), _portable(ctx, resolved),
                                 [prints[n] for n in j.needs if n in prints])
  return Plan(ctx=ctx, jobs=tuple(ordered(jobs)), fingerprints=prints)


def _portable(ctx, value):
  """`value` (a Job or JSON-like settings) with this machine's folders replaced by names."""
  from performer.plans.context import ROOT  # pylint: disable=import-outside-toplevel
  places = sorted({ctx.runs: "{runs}", ctx.data: "{data}", ctx.text_data: "{text_data}",
                   ctx.results: "{results}", ROOT: "{root}"}.items(), key=lambda p: -len(p[0]))
  def fix(v):
    if isinstance(v, str):
      for path, name in places:
        v = v.replace(path, name)
      return v
    if isinstance(v, dict):
      return {k: fix(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
      return type(v)(fix(x) for x in v)
    if isinstance(v, Job):
      return dataclasses.replace(v, command=fix(v.command))
    return v
  return fix(value)


def summaries():
  """'name: summary' lines of the studies, for --help."""
  return [f"{name}: {study.SUMMARY}" for name, study in STUDIES.items()]
