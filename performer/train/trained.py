"""A trained `performer train` workdir as a model in memory, for experiments that probe it.

Fig. 14 runs a Transformer's weights with FAVOR; App. C.4 reads a Performer's own features."""

import os

from performer.errors import UserError
from performer.train import state as state_lib
from performer.train.checkpoint import Checkpoints
from performer.train.config import Config


def load(workdir):
  """The latest checkpoint of `workdir` as (Config, model, step), in eval mode.

  The whole model state is restored: a Performer keeps its last training
  draw of W.

  Args:
    workdir: a `performer train` workdir (config.json, checkpoints/).

  Returns:
    the run's train.config.Config (Config.load), its `TransformerLM` with
    dropout off (on the default device), and the checkpoint's step.

  Raises:
    UserError: not a trained workdir, or parameters that do not fit its model.
  """
  cfg = Config.load(workdir)
  model, optimizer = state_lib.build(cfg)
  folder = os.path.abspath(os.path.join(workdir, "checkpoints"))
  if not os.path.isdir(folder):
    raise UserError(f"{workdir}: no checkpoints/ folder; train it first")
  with Checkpoints(folder) as ckpt:
    step = ckpt.latest_step()
    if step is None:
      raise UserError(f"{workdir}: no checkpoint yet")
    ckpt.restore(step, model, optimizer)
  model.eval()
  return cfg, model, step
