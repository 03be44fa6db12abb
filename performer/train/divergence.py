"""A run meeting a non-finite loss or gradient stops, keeps its last good checkpoint, says why.

<workdir>/diverged.json marks where it stopped, for the figures and the plans."""

import contextlib
import json
import math
import os

import jax

from performer import attention, favor
from performer.atomic import atomic_path
from performer.errors import UserError
from performer.train import resume


class TrainingDiverged(UserError):
  """A non-finite loss or gradient: the run stops, the last checkpoint stays."""


DIVERGED = resume.DIVERGED


def stop_if_diverged(workdir, host, last_checkpoint, model_cfg):
  """Raises TrainingDiverged at the first non-finite loss or gradient norm among `host` steps.

  host: [(step, sums, grad_norm)] fetched since the last check. Updates
  after a non-finite gradient were skipped (optax.apply_if_finite), and
  nothing was saved since, so the last checkpoint is from before it.
  """
  for step, sums, grad_norm in host:
    loss_sum, grad_norm = float(sums["loss_sum"]), float(grad_norm)
    if not (math.isfinite(loss_sum) and math.isfinite(grad_norm)):
      record(workdir, step, last_checkpoint, loss_sum, grad_norm)
      checked = f"steps {host[0][0]}-{host[-1][0]}" if len(host) > 1 else f"step {step}"
      raise TrainingDiverged(f"non-finite loss or gradient at step {step} (checked {checked}); "
                             f"stopped; {_kept(last_checkpoint)}{_favor_hint(model_cfg)}")


def stop_if_invalid(workdir, step, valid, last_checkpoint, model_cfg):
  """Raises TrainingDiverged, before the step's checkpoint, when the valid loss is not finite.

  A checkpoint counts as good only if its metrics are finite: the train
  loss of the last steps can be finite while the weights already give NaN.
  """
  if math.isfinite(valid["loss"]):
    return
  record(workdir, step, last_checkpoint, valid["loss"], 0.0, what="valid loss")
  raise TrainingDiverged(f"non-finite validation loss at step {step}; stopped before saving it; "
                         f"{_kept(last_checkpoint)}{_favor_hint(model_cfg)}")


def record(workdir, step, last_checkpoint, loss_sum, grad_norm, *, what="loss"):
  """Writes <workdir>/diverged.json (atomically) for figures to mark where the run stopped.

  {"step": the loop's step index, i.e. the number of good updates before
  the non-finite one, as in TrainingDiverged's message; "last_checkpoint":
  the step of the checkpoint kept, or None; "reason": which of the batch's
  loss and the gradient norm were non-finite, with their values}.
  """
  if jax.process_index():
    return
  bad = [f"{name} {value}" for name, value in ((what, loss_sum), ("gradient norm", grad_norm))
         if not math.isfinite(value)]
  record = {"step": int(step), "last_checkpoint": last_checkpoint,
            "reason": "non-finite " + " and ".join(bad)}
  with atomic_path(os.path.join(workdir, DIVERGED)) as tmp, open(tmp, "w") as f:
    json.dump(record, f, indent=1)


def clear(workdir):
  """Removes the diverged.json of an earlier attempt of this run."""
  if jax.process_index():
    return
  with contextlib.suppress(FileNotFoundError):
    os.remove(os.path.join(workdir, DIVERGED))


def _favor_hint(model_cfg):
  """Why FAVOR+ gives NaN, for the divergence message of a model with exponential features."""
  kernel = attention.options(model_cfg.attention, model_cfg.attention_options).get("kernel")
  if kernel not in favor.EXPONENTIAL_KERNELS:
    return ""
  return (f" (FAVOR+ attention gives NaN once a scaled query or key norm |q| d^(-1/4) passes "
          f"favor.MAX_NORM = {favor.MAX_NORM:g}: check the learning rate)")


def _kept(step):
  if step is None:
    return "there is no checkpoint yet, so re-running starts from scratch"
  return (f"the last good checkpoint is step {step}, from which re-running resumes "
          f"(a lower OptimConfig.learning_rate may be given)")
