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

  def close(self):
    self.manager.close()
