"""Checkpoints with orbax: model state (random features included), optimizer state, step.

RNG streams are not saved: the data position and dropout are functions of (seed, step)."""

import contextlib
import os
import sys

import jax
import orbax.checkpoint as ocp
from flax import nnx

from performer.errors import UserError

SAVED = nnx.Not(nnx.RngState)


class Checkpoints:
  """Saves and restores (model, optimizer) in a workdir's checkpoints/ folder.

  A context manager: leaving the block closes the orbax manager, also on an
  error (an open one ends the process with asyncio tracebacks). Opening
  writes nothing: the folder is made by the first `save`, so a run refused
  before its first step (memory, data, a bad resume) leaves no empty
  checkpoints/ behind, and reading a source (TrainConfig.init_from, eval)
  leaves it as it was.
  """

  def __init__(self, directory, *, max_to_keep=3):
    self.directory = directory
    self.manager = ocp.CheckpointManager(
        directory, item_handlers={"state": ocp.StandardCheckpointHandler(),
                                  "meta": ocp.JsonCheckpointHandler()},
        options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=False,
                                             enable_async_checkpointing=False))

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  def latest_step(self):
    return self.manager.latest_step()

  def save(self, step, model, optimizer, meta):
    """Writes checkpoint `step` (orbax writes to a temporary folder and renames it)."""
    os.makedirs(self.directory, exist_ok=True)
    self.manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(_state(model, optimizer)), meta=ocp.args.JsonSave(meta)))
    self.manager.wait_until_finished()

  def restore(self, step, model, optimizer):
    """Loads checkpoint `step` into model and optimizer; returns its meta dict.

    Raises:
      UserError: the checkpoint was saved with another model or optimizer
        (naming the first array that differs), or its files are damaged.
    """
    target = _state(model, optimizer)
    differences = list(_differences(target, self._stored(step)))
    if differences:
      more = f"; and {len(differences) - 1} more" if len(differences) > 1 else ""
      raise UserError(f"checkpoint {step} in {self.directory} does not fit this configuration "
                      f"(model or optimizer changed since it was saved): {differences[0]}{more}. "
                      f"Use another --workdir, or the configuration in its config.gin")
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
    try:
      with _quiet_late_reads():
        restored = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
    except Exception as e:  # pylint: disable=broad-except
      raise self._damaged(step, e) from None  # the shapes fit: the files are at fault
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
      UserError: no checkpoint, parameters that do not match the model, or
        damaged files.
    """
    step = self.latest_step()
    if step is None:
      raise UserError(f"{self.directory}: no checkpoint to initialise from")
    target = nnx.state(model, nnx.Param)
    wanted = nnx.to_pure_dict(target)
    # Extra source arrays (another attention's, the optimizer's) are fine.
    differences = list(_differences(wanted, self._stored(step).get("model"), "model",
                                    extra=False))
    if differences:
      raise UserError(f"{self.directory} step {step}: {differences[0]}; only the attention "
                      f"may differ")
    try:
      with _quiet_late_reads():
        restored = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore()))
    except Exception as e:  # pylint: disable=broad-except
      raise self._damaged(step, e) from None
    nnx.replace_by_pure_dict(target, _subtree(wanted, restored["state"]["model"]))
    nnx.update(model, target)
    return step

  def close(self):
    self.manager.close()

  def _stored(self, step):
    """The nested dict of array metadata (shape, dtype) that checkpoint `step` holds."""
    try:
      return self.manager.item_metadata(step)["state"].tree
    except Exception as e:  # pylint: disable=broad-except
      raise self._damaged(step, e) from None

  def _damaged(self, step, error):
    while error.__cause__ or error.__context__:  # the innermost error names the file
      error = error.__cause__ or error.__context__
    earlier = [s for s in self.manager.all_steps() if s < step]
    then = (f"delete that folder to resume from checkpoint {max(earlier)}" if earlier
            else "delete that folder to start afresh")
    detail = str(error).splitlines()[0].split(" [tensorstore_spec=")[0]  # not its long spec
    return UserError(f"checkpoint {step} is damaged ({os.path.join(self.directory, str(step))}: "
                     f"{type(error).__name__}: {detail}); {then}")


@contextlib.contextmanager
def _quiet_late_reads():
  """Drops the "Event loop is closed" errors of reads that a failed restore leaves running.

  orbax stops at the first unreadable array; tensorstore finishes the other
  reads later and calls back into orbax's closed event loop, which Python
  would print as tracebacks around the one-line error. After a failure the
  filter stays, since those reads end at any time.
  """
  hook = sys.unraisablehook

  def quiet(unraisable):
    if not (isinstance(unraisable.exc_value, RuntimeError)
            and str(unraisable.exc_value) == "Event loop is closed"):
      hook(unraisable)
  sys.unraisablehook = quiet
  yield
  sys.unraisablehook = hook


def _state(model, optimizer):
  return {"model": nnx.to_pure_dict(nnx.state(model, SAVED)),
          "optimizer": nnx.to_pure_dict(nnx.state(optimizer))}


def _differences(want, have, path="", *, extra=True):
  """Yields one sentence per array where `want` (arrays) and `have` (metadata) disagree.

  extra=False ignores arrays that only `have` holds. orbax stores list
  indices (the blocks) as strings, so keys compare as strings.
  """
  if isinstance(want, dict) or isinstance(have, dict):
    want = {str(k): v for k, v in want.items()} if isinstance(want, dict) else {}
    have = {str(k): v for k, v in have.items()} if isinstance(have, dict) else {}
    for key in {**want, **have} if extra else want:
      yield from _differences(want.get(key), have.get(key), f"{path}/{key}" if path else key,
                              extra=extra)
  elif have is None and want is not None:
    yield f"{path} {tuple(want.shape)} is not in the checkpoint"
  elif want is None and have is not None:
    yield f"{path} {tuple(have.shape)} is in the checkpoint, not in this configuration"
  elif want is not None and tuple(want.shape) != tuple(have.shape):
    yield (f"{path} has shape {tuple(have.shape)} in the checkpoint, {tuple(want.shape)} in "
           f"the model")


def _subtree(want, have):
  """The arrays of `have` at the keys of `want` (orbax's string keys read as `want`'s)."""
  if isinstance(want, dict):
    have = {str(k): v for k, v in have.items()}
    return {k: _subtree(v, have[str(k)]) for k, v in want.items()}
  return have
