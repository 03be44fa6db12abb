"""A run's configuration: optimizer and schedule (paper App. A.2), and the whole resolved set.

`Config` is what the loop, eval and probes take, resolved from gin by configurables.resolve()."""

import dataclasses
import json
import math
import os

from performer import attention
from performer.data.pipeline import DataConfig
from performer.data.vocab import Ids
from performer.errors import UserError
from performer.models.config import ModelConfig
from performer.train.sharding import MeshConfig


SCHEDULES = ("constant", "cosine")


@dataclasses.dataclass(frozen=True)
class OptimConfig:
  """Adam with decoupled weight decay and global-norm clipping (A.2; A.5: no clip).

  The paper keeps the learning rate fixed (A.2): `schedule = 'constant'`.
  `'cosine'` warms up linearly over `warmup_steps`, then decays to 0 at the
  run's last step (a shorter CPU run gets further per step with it).

  Raises:
    ValueError (when built): a value outside its range, named with the range.
  """
  learning_rate: float = 1e-3
  b1: float = 0.9
  b2: float = 0.98
  eps: float = 1e-9
  weight_decay: float = 0.1
  clip_norm: float = 0.5  # 0: no clipping
  schedule: str = "constant"  # or "cosine"
  warmup_steps: int = 0

  def __post_init__(self):
    for name in ("learning_rate", "eps", "weight_decay", "clip_norm"):
      _check(self, name, lambda x: x >= 0, ">= 0")
    _check(self, "warmup_steps", lambda x: x >= 0, ">= 0", kind=int)
    if self.schedule not in SCHEDULES:
      raise ValueError(f"OptimConfig.schedule must be one of {SCHEDULES}, got {self.schedule!r}")
    for name in ("b1", "b2"):
      _check(self, name, lambda x: 0 <= x < 1, "in [0, 1)")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """How long to train and how often to log, evaluate and save (in steps).

  Raises:
    ValueError (when built): a count below its minimum.
  """
  steps: int = 1000
  log_every: int = 20
  eval_every: int = 200
  checkpoint_every: int = 200
  eval_batches: int = 0  # 0: the whole valid split
  seed: int = 0
  init_from: str = ""  # a trained workdir whose parameters start this run (paper Fig. 5)
  stop_accuracy: float = 0.0  # stop once validation accuracy reaches it (0: never); early_stop.py
  # stop once this many evals passed without valid accuracy beating its best by more than
  # stop_min_delta (0: never); early_stop.plateaued
  stop_patience: int = 0
  stop_min_delta: float = 0.0
  # What a plan's sweep set for this run (performer/plans), e.g. {"kernel": "relu"}: recorded in
  # config.json for figures to group runs by; training does not read it.
  settings: dict = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    for name in ("steps", "log_every", "eval_every", "checkpoint_every"):
      _check(self, name, lambda x: x >= 1, ">= 1", kind=int)
    _check(self, "eval_batches", lambda x: x >= 0, ">= 0 (0: the whole valid split)", kind=int)
    _check(self, "seed", lambda x: x >= 0, ">= 0", kind=int)
    _check(self, "stop_accuracy", lambda x: 0 <= x <= 1, "in [0, 1] (0: never stop early)")
    _check(self, "stop_patience", lambda x: x >= 0, ">= 0 (0: no plateau stop)", kind=int)
    _check(self, "stop_min_delta", lambda x: 0 <= x < 1, "in [0, 1)")
    if not isinstance(self.settings, dict):
      raise ValueError(f"TrainConfig.settings must be a dict, got {self.settings!r}")


@dataclasses.dataclass(frozen=True)
class Config:
  """Everything a run needs, typed: what `performer train` records in config.json.

  vocab is the dataset's (vocab.Ids); model.vocab_size and model.max_len
  come from it and from data.seq_len.
  """
  data: DataConfig
  model: ModelConfig
  optim: OptimConfig
  train: TrainConfig
  mesh: MeshConfig
  vocab: Ids

  def __post_init__(self):
    # A replicate is a seed of the whole run: unless set apart, the data order
    # (DataConfig.seed) and every random draw of the attention (its `seed`
    # option: W, Reformer's rotations, Linformer's projections) follow
    # TrainConfig.seed, as initialisation and dropout do. Fig. 15 sets the
    # feature seed apart. The resolved numbers are what config.json records.
    seed = self.train.seed
    if self.data.seed is None:
      object.__setattr__(self, "data", dataclasses.replace(self.data, seed=seed))
    options = dict(self.model.attention_options or {})
    if attention.info(self.model.attention).random_state and "seed" not in options:
      object.__setattr__(self, "model", dataclasses.replace(
          self.model, attention_options={**options, "seed": seed}))

  def to_json(self):
    """A dict of plain values, one entry per config."""
    parts = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
    return {k: v._asdict() if k == "vocab" else dataclasses.asdict(v) for k, v in parts.items()}

  @classmethod
  def from_json(cls, values):
    """The Config of `to_json` output (a run's config.json), each part checked again.

    Raises:
      ValueError: a missing part or field, an unknown field or a bad value.
    """
    kinds = {"data": DataConfig, "model": ModelConfig, "optim": OptimConfig,
             "train": TrainConfig, "mesh": MeshConfig, "vocab": Ids}
    try:
      return cls(**{name: kind(**values[name]) for name, kind in kinds.items()})
    except (KeyError, TypeError) as e:
      raise ValueError(f"not a run config: {e}") from None

  @classmethod
  def load(cls, workdir):
    """The Config a `performer train` workdir recorded (<workdir>/config.json).

    Raises:
      UserError: no config.json, or one that is not a run config.
    """
    path = os.path.join(workdir, "config.json")
    if os.path.exists(workdir) and not os.path.isdir(workdir):
      raise UserError(f"{workdir} is a file, not a `performer train` workdir")
    if not os.path.exists(workdir):
      raise UserError(f"{workdir}: no such folder")
    try:
      with open(path) as f:
        return cls.from_json(json.load(f))
    except FileNotFoundError:
      raise UserError(f"{workdir}: no config.json; is it a `performer train` workdir?") from None
    except (OSError, ValueError) as e:
      raise UserError(f"{path}: {e}") from None


def _check(cfg, name, ok, rule, *, kind=float):
  """Raises ValueError naming `Class.name` unless its value is a finite `kind` with ok(value)."""
  value = getattr(cfg, name)
  number = isinstance(value, (int, float)) and not isinstance(value, bool) and (
      kind is float or isinstance(value, int))
  if not (number and math.isfinite(value) and ok(value)):
    what = "an integer" if kind is int else "a finite number"
    raise ValueError(f"{type(cfg).__name__}.{name} must be {what} {rule}, got {value!r}")
