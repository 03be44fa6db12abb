"""A plan's unit of work: a typed job, sweeps that make many of them, and a job's fingerprint.

A job is one command, the jobs it needs and the outputs that mark it done."""

import dataclasses
import hashlib
import itertools
import json
import os

KINDS = ("data", "train", "eval", "archive", "probe", "figure")


@dataclasses.dataclass(frozen=True)
class Job:
  """One command of a plan.

  Attributes:
    name: unique in the plan; a train job's workdir is <runs>/<name>.
    kind: one of KINDS (SLURM resources and the status table go by it).
    command: argv; a leading "performer" is this package's command.
    needs: names of the jobs that must be done before this one starts.
    outputs: paths that exist once it is done (a train job: its workdir's
      config.json; the launcher also checks the fingerprint).
    study: the study that declared it (fig6, fig5, ..., data).
    settings: the sweep settings that tell it apart from its siblings
      (e.g. {"kernel": "relu"}); a train job records them in its
      config.json as TrainConfig.settings.
    gin, bindings: a train job's gin files and NAME=VALUE bindings (also in
      `command`); the fingerprint is taken over what they resolve to.
    workdir: a train job's run folder.
  """
  name: str
  kind: str
  command: tuple[str, ...]
  needs: tuple[str, ...] = ()
  outputs: tuple[str, ...] = ()
  study: str = ""
  settings: dict = dataclasses.field(default_factory=dict)
  gin: tuple[str, ...] = ()
  bindings: tuple[str, ...] = ()
  workdir: str = ""

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"job {self.name}: kind {self.kind!r} is not one of {', '.join(KINDS)}")


def train(name, runs, gin, bindings, *, needs=(), study="", settings=None):
  """A `performer train` job whose workdir is <runs>/<name>.

  `settings` go into the run's config.json (TrainConfig.settings), so that
  figures tell runs apart by them rather than by their names.
  """
  settings = dict(settings or {})
  bindings = tuple(bindings) + ((f"TrainConfig.settings={settings!r}",) if settings else ())
  workdir = os.path.join(runs, name)
  command = ("performer", "train", *_flags("--gin", gin), *_flags("--gin_param", bindings),
             "--workdir", workdir)
  return Job(name=name, kind="train", command=command, needs=tuple(needs),
             outputs=(os.path.join(workdir, "config.json"),), study=study, settings=settings,
             gin=tuple(gin), bindings=bindings, workdir=workdir)


def _flags(flag, values):
  return [word for value in values for word in (flag, value)]


def product(**axes):
  """Every combination of the axes' values: product(a=(1, 2), b=("x",)) -> [{a: 1, b: x}, ...].

  The order is the axes' order, the last axis varying fastest.
  """
  names = list(axes)
  return [dict(zip(names, values)) for values in itertools.product(*axes.values())]


def zipped(**axes):
  """The axes' values taken together: zipped(a=(1, 2), b=("x", "y")) -> [{a: 1, b: x}, {a: 2, b: y}].

  Raises:
    ValueError: axes of different lengths.
  """
  lengths = {name: len(values) for name, values in axes.items()}
  if len(set(lengths.values())) > 1:
    raise ValueError(f"zipped axes differ in length: {lengths}")
  names = list(axes)
  return [dict(zip(names, values)) for values in zip(*axes.values())]


def run_name(template, settings):
  """A readable, stable run name from settings: run_name("fig16_{kernel}", {"kernel": "relu"}).

  Names come from the values, never from positions in a sweep, so adding a
  value to a sweep adds runs without renaming the others. Booleans and
  floats are written so that the name stays one word ("True" -> "on").

  Raises:
    ValueError: a template field that is not a setting.
  """
  words = {k: _word(v) for k, v in settings.items()}
  try:
    return template.format(**words)
  except KeyError as e:
    raise ValueError(f"run name {template!r} names {e} but the settings are {sorted(settings)}") \
        from None


def replicate_name(template, settings):
  """run_name of a replicated run: seed 0 (or no seed) keeps the template's name, seed s > 0
  adds "_seed{s}", so adding replicates renames no run that came before them."""
  return run_name(template + ("_seed{seed}" if settings.get("seed") else ""), settings)


def _word(value):
  if isinstance(value, bool):
    return "on" if value else "off"
  return str(value).replace(".", "p").replace("-", "m").replace("/", "_")


def fingerprint(job, resolved, needs=()):
  """A hex digest of what the job computes: its kind, its resolved config, what it reads.

  Args:
    job: the Job.
    resolved: a train job's settings as configurables.settings() gives them
      (any JSON value); None for other kinds, whose command is what they do.
    needs: the fingerprints of the jobs it needs. A train job leaves them
      out: its workdir resumes, it is not redone when the run it starts from
      changes; the evals, probes and figures of a retrained run are redone.
  """
  what = {"kind": job.kind, "config": resolved if resolved is not None else list(job.command)}
  if job.kind != "train":
    what["needs"] = list(needs)
  text = json.dumps(what, sort_keys=True, default=str)
  return hashlib.sha256(text.encode()).hexdigest()[:16]
