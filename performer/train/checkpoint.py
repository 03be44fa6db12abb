"""Checkpoints with orbax: model state (random features included), optimizer state, step.

The step is also the input pipeline's position (pipeline.py), and dropout is
reseeded from (seed, step), so restoring a step resumes the run exactly. RNG
stream state is not saved for that reason.
"""

import jax
import orbax.checkpoint as ocp
from flax import nnx

from performer.errors import UserError

SAVED = nnx.Not(nnx.RngState)


class Checkpoints:
  """Saves and restores (model, optimizer) under workdir/checkpoints."""

  def __init__(self, directory, *, max_to_keep=3):
    self.manager = ocp.CheckpointManager(
        directory, options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True,
                                                        enable_async_checkpointing=False))

  def latest_step(self):
    return self.manager.latest_step()

  def save(self, step, model, optimizer, meta):
    """Writes checkpoint `step` (orbax writes to a temporary folder and renames it)."""
    state = {"model": nnx.to_pure_dict(nnx.state(model, SAVED)),
             "optimizer": nnx.to_pure_dict(nnx.state(optimizer))}
    self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                    meta=ocp.args.JsonSave(meta)))
    self.manager.wait_until_finished()

  def restore(self, step, model, optimizer):
    """Loads checkpoint `step` into model and optimizer; returns its meta dict.

    Raises:
      UserError: the checkpoint was saved with another model or optimizer.
    """
    target = {"model": nnx.to_pure_dict(nnx.state(model, SAVED)),
              "optimizer": nnx.to_pure_dict(nnx.state(optimizer))}
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
    try:
      restored = self.manager.restore(step, args=ocp.args.Composite(
          state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
    except ValueError as e:
      raise UserError(f"checkpoint {step} in {self.manager.directory} does not fit this "
                      f"configuration (model or optimizer changed since it was saved): "
                      f"{str(e).splitlines()[0][:200]}") from None
    for obj, key in ((model, "model"), (optimizer, "optimizer")):
      state = nnx.state(obj, SAVED) if key == "model" else nnx.state(obj)
      nnx.replace_by_pure_dict(state, restored["state"][key])
      nnx.update(obj, state)
    return restored["meta"]

  def load_params(self, model):
    """Copies the trained parameters of this run's latest checkpoint into `model`.

    The attention may differ (e.g. a Performer initialised from a Transformer,
    paper Fig. 5): only nnx.Param values are copied, and they must match.

    Returns:
      The step loaded.

    Raises:
      UserError: no checkpoint, or parameters that do not match the model.
    """
    step = self.latest_step()
    if step is None:
      raise UserError(f"{self.manager.directory}: no checkpoint to initialise from")
    restored = self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
    source = restored["state"]["model"]
    target = nnx.state(model, nnx.Param)
    wanted = nnx.to_pure_dict(target)

    def copy(want, have, path):
      if isinstance(want, dict):
        if not isinstance(have, dict):
          raise UserError(f"checkpoint has no parameters at {path or 'the root'}")
        # orbax stores list indices (the blocks) as strings
        return {k: copy(v, have.get(k, have.get(str(k))), f"{path}/{k}") for k, v in want.items()}
      if have is None or tuple(have.shape) != tuple(want.shape):
        raise UserError(f"parameter {path}: the checkpoint has "
                        f"{None if have is None else tuple(have.shape)}, the model "
                        f"{tuple(want.shape)}; only the attention may differ")
      return have

    nnx.replace_by_pure_dict(target, copy(wanted, source, ""))
    nnx.update(model, target)
    return step

  def close(self):
    self.manager.close()
