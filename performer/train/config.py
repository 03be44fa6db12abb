"""Optimizer and training-schedule configurations (paper App. A.2)."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class OptimConfig:
  """Adam with decoupled weight decay and global-norm clipping (A.2; A.5: no clip)."""
  learning_rate: float = 1e-3
  b1: float = 0.9
  b2: float = 0.98
  eps: float = 1e-9
  weight_decay: float = 0.1
  clip_norm: float = 0.5  # 0: no clipping


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """How long to train and how often to log, evaluate and save (in steps)."""
  steps: int = 1000
  log_every: int = 20
  eval_every: int = 200
  checkpoint_every: int = 200
  eval_batches: int = 0  # 0: the whole valid split
  seed: int = 0
  init_from: str = ""  # a trained workdir whose parameters start this run (paper Fig. 5)
