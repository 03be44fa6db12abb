"""A trained `performer train` workdir as a model in memory, for experiments that probe it.

Error propagation (Fig. 14) runs a Transformer's weights with FAVOR attention;
attention maps (App. C.4) read a trained Performer's own random features.
"""

import os

from performer import configurables
from performer.errors import UserError
from performer.train import loop
from performer.train.checkpoint import Checkpoints


def load(workdir, bindings=()):
  """The latest checkpoint of `workdir` as (Config, model, step), in eval mode.

  Args:
    workdir: a `performer train` workdir (config.gin, checkpoints/).
    bindings: gin bindings applied over its config.gin, e.g.
      ("ModelConfig.attention = 'performer_softmax'",). With none, the whole
      model state is restored (a Performer keeps its last training draw of W);
      with some, only the trained parameters are copied, so the attention may
      differ (it keeps the draw of its own construction, step 0).

  Returns:
    the run's train.config.Config (with the bindings), its `TransformerLM`
    with dropout off (on the default device), and the checkpoint's step.

  Raises:
    UserError: not a trained workdir, a bad binding, or parameters that do
      not fit the (rebound) model.
  """
  config = os.path.join(workdir, "config.gin")
  if not os.path.isfile(config):
    raise UserError(f"{workdir}: no config.gin; is it a `performer train` workdir?")
  configurables.parse([config], list(bindings))
  cfg = configurables.resolve()
  model, optimizer = loop.build(cfg)
  folder = os.path.abspath(os.path.join(workdir, "checkpoints"))
  if not os.path.isdir(folder):
    raise UserError(f"{workdir}: no checkpoints/ folder; train it first")
  with Checkpoints(folder, create=False) as ckpt:
    step = ckpt.latest_step()
    if step is None:
      raise UserError(f"{workdir}: no checkpoint yet")
    if bindings:
      ckpt.load_params(model)
    else:
      ckpt.restore(step, model, optimizer)
  model.eval()
  return cfg, model, step
