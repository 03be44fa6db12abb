"""Run folders (`performer train` workdirs) as the protein tables and curves read them.

Nothing here recomputes a metric: (B) runs are scored on masked positions, (U) on all (App. A.1)."""

import dataclasses
import json
import math
import os

from performer import attention
from performer.errors import UserError
from performer.figures import paper

# Row and legend order: the paper's models (Fig. 6 / Table 2), then ours; labels from the registry.
ORDER = tuple(attention.info(name).label for name in (
    "exact", "performer_softmax", "performer_relu", "reformer", "linformer", "linear", "identity"))
DIRECTIONS = {"U": "(U) unidirectional", "B": "(B) bidirectional"}
EVAL_SPLITS = ("test", "ood")
SCORED = ("(B) runs are scored on the masked positions and (U) runs on all positions, as "
          "train/eval do (App. A.1).")


@dataclasses.dataclass(frozen=True)
class Run:
  """One run folder, read once.

  Attributes:
    path: the folder as given.
    direction: "U" (model.causal) or "B".
    attention: the config's model.attention registry name.
    label: the model's name (the attention registry's label; the name itself if unknown).
    extra: True for a (direction, model) the paper did not train (Fig. 6).
    seed: train.seed.
    metrics: metrics.jsonl rows, the last one per (split, step), by step.
    evals: split ("test", "ood", and MQAR's "test_shuffled", "test_kv8", ...)
      -> that eval_<split>.json; absent splits were not evaluated.
    config: the whole config.json (model, train, optim, data), for what a
      run did (attention options, init_from).
    settings: the sweep values its plan recorded (TrainConfig.settings, e.g.
      {"kernel": "gelu"}); figures tell runs apart and group them by these.
      Empty for a run trained by hand: then by its config.
    diverged: diverged.json (train/loop.py writes it when a NaN or Inf
      stops the run: step, last_checkpoint, reason), or None.
  """
  path: str
  direction: str
  attention: str
  label: str
  extra: bool
  seed: int
  metrics: tuple
  evals: dict
  config: dict = dataclasses.field(default_factory=dict)
  diverged: dict | None = None

  @property
  def settings(self):
    return (self.config.get("train") or {}).get("settings") or {}

  def setting(self, name, fallback):
    """The recorded sweep value `name`, else `fallback` (from the config) for runs without it."""
    return self.settings.get(name, fallback)

  @property
  def identity(self):
    """What makes this run a point of its study: its recorded settings, else the config's
    attention options, depth, init_from, data and seed (a run trained by hand)."""
    if self.settings:
      return json.dumps(self.settings, sort_keys=True, default=str)
    derived = [self.config.get(group, {}).get(field) for group, field in (
        ("model", "attention_options"), ("model", "num_layers"), ("train", "init_from"),
        ("data", "path"), ("data", "task"))]
    return json.dumps([derived, self.seed], sort_keys=True, default=str)

  @property
  def diverged_at(self):
    """The step a NaN or Inf stopped the run at (good updates before it), or None."""
    return None if self.diverged is None else self.diverged["step"]

  @property
  def name(self):
    """The folder's own name, for table cells."""
    return os.path.basename(os.path.normpath(self.path))

  @property
  def step(self):
    """The step the results are of: the test (else OOD) eval's, else the last logged one."""
    for split in EVAL_SPLITS:
      if split in self.evals:
        return self.evals[split].get("step")
    return self.metrics[-1]["step"] if self.metrics else None

  def value(self, split, key):
    """evals[split][key] (a finite number) or None when not evaluated or diverged."""
    return self.evals.get(split, {}).get(key)

  @property
  def failed(self):
    """Why this run's numbers are missing: 'diverged at step N', 'diverged', or ''."""
    if self.diverged is not None:
      return f"diverged at step {self.diverged_at}"
    return "diverged" if any(e.get("diverged") for e in self.evals.values()) else ""


def _json(path):
  try:
    with open(path) as f:
      return json.load(f)
  except OSError as e:
    raise UserError(f"{path}: {e.strerror}") from None
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise UserError(f"{path}: not valid JSON ({e})") from None


def _number(value):
  return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _metrics(path):
  """metrics.jsonl rows with a numeric step and a split; a resumed run's repeats keep the last."""
  rows = {}
  try:
    with open(path) as f:
      lines = f.readlines()
  except OSError as e:
    raise UserError(f"{path}: {e.strerror}") from None
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    try:
      row = json.loads(line)
    except json.JSONDecodeError:
      if number == len(lines):  # a run killed mid-write leaves half a last line
        continue
      raise UserError(f"{path}: line {number} is not JSON") from None
    if not isinstance(row, dict) or not _number(row.get("step")) or not isinstance(
        row.get("split"), str):
      raise UserError(f"{path}: line {number} lacks a numeric step and a split")
    rows[(row["split"], row["step"])] = row
  return tuple(sorted(rows.values(), key=lambda r: (r["step"], r["split"])))


def _eval(path):
  record = _json(path)
  if not isinstance(record, dict):
    raise UserError(f"{path}: expected an eval result object")
  if record.get("diverged") or any(
      isinstance(record.get(k), float) and not math.isfinite(record[k])
      for k in ("loss", "accuracy", "perplexity")):
    # A diverged model (NaN or Inf): shown as such, its numbers left out.
    return {"diverged": True, "step": record.get("step")}
  for key in ("accuracy", "perplexity"):
    if not _number(record.get(key)):
      raise UserError(f"{path}: {key} = {record.get(key)!r} is not a finite number")
  for key in ("accuracy", "baseline_accuracy"):
    if key in record and _number(record[key]) and not 0 <= record[key] <= 1:
      raise UserError(f"{path}: {key} = {record[key]!r} is not a fraction in [0, 1]")
  return {k: v for k, v in record.items() if not isinstance(v, float) or math.isfinite(v)}


def load_run(path):
  """Reads one run folder.

  Raises:
    UserError: not a folder, no config.json or metrics.jsonl, invalid JSON,
      a config without model.attention / model.causal, a malformed eval
      file or diverged.json, or an eval older than the run's last logged step.
  """
  if not os.path.isdir(path):
    raise UserError(f"{path}: no such run folder")
  files = {name: os.path.join(path, name) for name in ("config.json", "metrics.jsonl")}
  for name, file in files.items():
    if not os.path.isfile(file):
      raise UserError(f"{path}: no {name}; is it a `performer train` workdir?")
  config = _json(files["config.json"])
  model = config.get("model") if isinstance(config, dict) else None
  if not isinstance(model, dict) or not isinstance(model.get("attention"), str) or not isinstance(
      model.get("causal"), bool):
    raise UserError(f"{files['config.json']}: lacks model.attention or model.causal")
  seed = (config.get("train") or {}).get("seed", 0)
  direction = "U" if model["causal"] else "B"
  label = (attention.info(model["attention"]).label if model["attention"] in attention.names()
           else model["attention"])
  splits = [name[len("eval_"):-len(".json")] for name in sorted(os.listdir(path))
            if name.startswith("eval_") and name.endswith(".json")]
  evals = {split: _eval(os.path.join(path, f"eval_{split}.json")) for split in splits
           if split in EVAL_SPLITS or split.startswith("test_")}
  metrics = _metrics(files["metrics.jsonl"])
  diverged = _diverged(os.path.join(path, "diverged.json"))
  _check_evals_current(path, evals, metrics, diverged)
  return Run(path=path, direction=direction, attention=model["attention"], label=label,
             extra=label not in paper.FIG6[direction], seed=seed, metrics=metrics, evals=evals,
             config=config, diverged=diverged)


def _check_evals_current(path, evals, metrics, diverged):
  """Raises UserError for an eval of an earlier step than the run's last logged one: the run
  went on after it (a resume), so its numbers are not the run's. A diverged run's eval is of
  its last good checkpoint, before the logged NaN, and is kept."""
  last = max((row["step"] for row in metrics), default=None)
  for split, record in evals.items():
    step = record.get("step")
    if diverged is None and last is not None and _number(step) and step < last:
      raise UserError(f"{path}/eval_{split}.json is of step {step:g} but the run has logged "
                      f"step {last:g}: evaluate it again (`performer eval --workdir {path} "
                      f"--split {split}`), or resume it if it stopped without a checkpoint")


def _diverged(path):
  """diverged.json as a dict with an integer step, or None when the run never diverged."""
  if not os.path.isfile(path):
    return None
  record = _json(path)
  step = record.get("step") if isinstance(record, dict) else None
  if not _number(step) or step != int(step) or step < 0:
    raise UserError(f"{path}: step = {step!r} is not a step number")
  return {**record, "step": int(step)}


def load_runs(paths):
  """Reads run folders; returns the Runs in the order given.

  Raises:
    UserError: no folders, a folder given twice (it would count as two
      seeds), two folders of one model with the same `Run.identity` (the
      same recorded settings, or for runs without them the same attention
      options, depth, init_from, data and seed), or any load_run error.
  """
  if not paths:
    raise UserError("no run folders given (--runs RUN [RUN ...])")
  seen = set()
  for path in paths:
    real = os.path.realpath(path)
    if real in seen:
      raise UserError(f"{path}: run folder given twice")
    seen.add(real)
  runs = [load_run(path) for path in paths]
  keys = {}
  for run in runs:
    key = (run.direction, run.label, run.identity)
    if key in keys:
      what = (f"recorded settings {run.identity}" if run.settings else f"seed {run.seed}")
      raise UserError(f"{run.path} and {keys[key]}: both are {model_label(run)} with {what}; "
                      "give one run per model and setting")
    keys[key] = run.path
  return _named_by_depth(runs)


def _named_by_depth(runs):
  """Runs of one model that differ in depth (Fig. 7 right) get it in their label: 'Transformer 2-layer'."""
  depth = lambda run: run.setting("layers", run.config["model"].get("num_layers"))
  depths = {}
  for run in runs:
    depths.setdefault((run.direction, run.label), set()).add(depth(run))
  return [dataclasses.replace(run, label=f"{run.label} {depth(run)}-layer")
          if len(depths[(run.direction, run.label)]) > 1 else run for run in runs]


def model_label(run):
  """'(U) Transformer', '(B) Reformer (extra)': a model as the tables and legends name it."""
  return f"({run.direction}) {run.label}{tag(run)}"


def tag(run):
  """' (control)' for identity attention (the verdicts' scale gate), ' (extra)' for a model the
  paper did not train in this direction, else ''."""
  if run.attention == "identity":
    return " (control)"
  return " (extra)" if run.extra else ""


def by_model(runs):
  """{(direction, label): [runs by seed]}, (U) first, then by ORDER."""
  groups = {}
  for run in runs:
    groups.setdefault((run.direction, run.label), []).append(run)
  order = lambda key: ("UB".index(key[0]), rank(key[1]))
  return {key: sorted(groups[key], key=lambda r: r.seed) for key in sorted(groups, key=order)}


def rank(label):
  """Sort key of a model label: ORDER, then unknown labels by name."""
  return (ORDER + (label,)).index(label), label


def mean(values):
  """Mean of the numbers among values, ignoring None; None if there are none."""
  numbers = [v for v in values if v is not None]
  return sum(numbers) / len(numbers) if numbers else None
