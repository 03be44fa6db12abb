"""What every study builds its jobs from: the budget, the folders, and bindings for every run."""

import dataclasses
import json
import os

from performer.plans import job as job_lib
from performer.plans.budgets import Budget

# The repository's root: gin/ and scripts/ are found there whatever the current folder.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def repo(path):
  """`path` (e.g. gin/trembl_u_exact.gin) in the repository."""
  return os.path.join(ROOT, path)


@dataclasses.dataclass(frozen=True)
class Context:
  """A budget placed on this machine's folders (absolute paths).

  Attributes:
    budget: the Budget.
    runs: the folder of run workdirs, logs and the plan's state (.plan/).
    data, text_data: the prepared protein (with an OOD split) and PG-19 datasets.
    results: where tables, figures and probe results go.
    fasta: the protein FASTA the data jobs label and prepare, and the
      attention maps read a protein from.
    extra: bindings added to every train job, last (--steps, --gin_param).
    given_data: True when `data` was prepared elsewhere (--data): no data jobs.
    swissprot_route: get_swissprot.sh's source, "debian" (2014_01) or "download".
  """
  budget: Budget
  runs: str
  data: str
  text_data: str
  results: str
  fasta: str
  extra: tuple[str, ...] = ()
  given_data: bool = False
  swissprot_route: str = "debian"

  def protein(self, name, config, bindings=(), *, seed=0, needs=(), study, settings=None):
    """A train job of gin/trembl_<config>.gin at this budget's size on the protein data."""
    gin = tuple(map(repo, (f"gin/trembl_{config}.gin", *self.budget.protein_gin)))
    return self._train(name, gin, self.data, bindings, seed, needs, study, settings)

  def text(self, name, config, bindings=(), *, needs=(), study, settings=None):
    """A train job of gin/<config>.gin (PG-19) at this budget's size on the text data."""
    gin = tuple(map(repo, (f"gin/{config}.gin", *self.budget.text_gin)))
    return self._train(name, gin, self.text_data, bindings, 0, needs, study, settings)

  def _train(self, name, gin, data, bindings, seed, needs, study, settings):
    bindings = (f"DataConfig.path={data!r}", f"TrainConfig.seed={seed}", *bindings, *self.extra)
    return job_lib.train(name, self.runs, gin, bindings, needs=(*needs, *self.data_jobs(data)),
                         study=study, settings=settings)

  def data_jobs(self, data):
    """The data job that prepares dataset folder `data` (data.py names them)."""
    return ("pg19",) if data == self.text_data else ("proteins",)

  def workdir(self, name):
    return os.path.join(self.runs, name)

  def result(self, filename):
    return os.path.join(self.results, filename)


  def decision(self, filename, read):
    """read(record) of the JSON twin of a decision file in results/ (a gate, the chosen rates),
    or {} while it is not written or cannot be read."""
    try:
      with open(self.result(os.path.splitext(filename)[0] + ".json")) as f:
        return read(json.load(f))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
      return {}
  def evaluated(self, train, splits=(), *, study):
    """The eval job of a train job on `splits` (per-sequence sums beside each result), if any,
    and the job that archives the run after it: [eval, archive] or [archive]."""
    if not splits:
      return [self.archive(train, None, study=study)]
    evaluate = job_lib.Job(
        name=f"{train.name}_eval", kind="eval", study=study, needs=(train.name,),
        command=("performer", "eval", "--workdir", train.workdir, "--split", ",".join(splits)),
        outputs=tuple(f"{train.workdir}/eval_{split}{suffix}" for split in splits
                      for suffix in (".json", "_sequences.npz")))
    return [evaluate, self.archive(train, evaluate, study=study)]

  def archive(self, train, evaluate, *, study):
    """The job that archives a train job's run once it (and `evaluate`, if any) is done:
    <results>/runs/<name>/ (archive.py), with its outputs' compact copies. It replaces the
    archive already there: the committed one of an earlier run, or of this one before it changed."""
    dest = self.result(os.path.join("runs", train.name))
    return job_lib.Job(
        name=f"{train.name}_archive", kind="archive", study=study,
        needs=(evaluate.name if evaluate else train.name,),
        command=("performer", "archive", train.workdir, "--to", os.path.dirname(dest),
                 "--replace"),
        outputs=(os.path.join(dest, "config.json"),
                 *(os.path.join(dest, os.path.basename(p)) for p in
                   (evaluate.outputs if evaluate else ()))))

  def archived(self, job):
    """The archived run folder of a train job (what `archive` writes)."""
    return self.result(os.path.join("runs", job if isinstance(job, str) else job.name))

  def figure(self, name, args, out, *, needs, study):
    """A `performer figure NAME ... --out <results>/<out>` job."""
    out = self.result(out)
    return job_lib.Job(name=name, kind="figure", command=("performer", "figure", *args, "--out", out),
                       needs=tuple(needs), outputs=(out,), study=study)


def short(steps):
  """Bindings of a run of `steps` steps (None: the config's): warm-up a tenth, validation every fifth."""
  if steps is None:
    return ()
  return (f"TrainConfig.steps={steps}", f"OptimConfig.warmup_steps={steps // 10}",
          f"TrainConfig.eval_every={steps // 5 if steps >= 5 else 1}")


def options(**values):
  """The binding of ModelConfig.attention_options to `values`."""
  return f"ModelConfig.attention_options={values!r}"
