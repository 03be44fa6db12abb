"""The training loop: run(cfg, workdir) trains the model of a Config, resuming if it can.

One code path for any device or process count; a resumed run ends where an unbroken one would."""

import contextlib
import functools
import itertools
import json
import os
import sys
import time
from typing import Callable, NamedTuple

import jax
from flax import nnx

from performer.atomic import atomic_path, exclusive_lock
from performer.data import pipeline
from performer.data.stream import StepBatches
from performer.errors import UserError
from performer.train import (distributed, divergence, early_stop, metrics, preemption, resume,
                             sharding)
from performer.train import evaluate as evaluation
from performer.train import state as state_lib
from performer.train.checkpoint import Checkpoints
from performer.train.distributed import say
from performer.train.writer import MetricWriter

TrainingDiverged = divergence.TrainingDiverged


class _Parts(NamedTuple):
  """What a run is built from, whatever step it starts at."""
  mesh: jax.sharding.Mesh
  model: nnx.Module
  optimizer: nnx.Optimizer
  train_data: StepBatches
  validate: Callable[[], dict]  # the validation metrics of the model's current weights
  schedule: Callable[[int], float]  # the learning rate, for the logs only
  multiplier: float  # the train split's loss multiplier (PG-19's tokens per word)


def run(cfg, workdir, *, progress=True, records=None):
  """Trains the model of Config cfg in `workdir`; returns the last valid metrics.

  `records` ({file name: text}, e.g. the CLI's operative gin config as
  config.gin) are written beside config.json when training starts.

  Returns None, training nothing, when the workdir already holds a checkpoint
  at TrainConfig.steps or later. Every process of a multi-host run calls
  this with the same cfg; only process 0 writes metrics and TensorBoard.

  Raises:
    UserError: bad data, configuration or workdir, or another run holding
      the workdir; TrainingDiverged on a NaN or Inf (after writing
      <workdir>/diverged.json, see `divergence.record`); KeyboardInterrupt after
      saving a checkpoint on Ctrl-C or SIGTERM.
  """
  check_workdir(workdir)
  parts = _build(cfg)
  # One run per workdir: a second would mix its checkpoints and metrics with ours. (Process 0
  # holds the lock for all of a multi-process run.) Output folders appear with their first file
  # (checkpoints/ at the first save), so a start refused before the first step leaves none.
  lock = (exclusive_lock(os.path.join(workdir, "train.lock"), f"--workdir {workdir}")
          if jax.process_index() == 0 else contextlib.nullcontext())
  with _removed_if_left_empty(workdir), lock, \
       Checkpoints(os.path.abspath(os.path.join(workdir, "checkpoints"))) as ckpt:
    start = _first_step(cfg, workdir, ckpt)
    if start is None:
      return None
    _describe(cfg, workdir)  # once the workdir is known to take this run, not before a refusal
    state, train_step, batches = _start(cfg, workdir, parts, ckpt, start, records or {})
    return _train(cfg, workdir, parts, ckpt, start, state, train_step, batches, progress)


def _build(cfg):
  """The mesh, model, optimizer and data of Config cfg (UserError: a batch the mesh cannot split)."""
  train, causal = cfg.train, cfg.model.causal
  mesh = sharding.make_mesh(cfg.mesh)
  if cfg.data.batch_size % mesh.shape[sharding.DATA]:
    raise UserError(f"DataConfig.batch_size {cfg.data.batch_size} is not divisible by the "
                    f"mesh's {mesh.shape[sharding.DATA]} data-parallel devices")
  state_lib.check_size(cfg, mesh)  # before the state and the first batch are made
  model, optimizer = state_lib.build(cfg)
  process = dict(process_index=jax.process_index(), process_count=jax.process_count())
  train_data = pipeline.batches(cfg.data, "train", causal=causal, **process)
  valid_data = pipeline.batches(cfg.data, "valid", causal=causal, **process)
  validate = functools.partial(
      evaluation.evaluate, model, valid_data, seed=train.seed, vocab=cfg.vocab, causal=causal,
      mlm=cfg.data.mlm, mesh=mesh, multiplier=pipeline.multiplier(cfg.data, "valid"),
      max_batches=train.eval_batches)
  return _Parts(mesh, model, optimizer, train_data, validate,
                state_lib.learning_rate(cfg.optim, train.steps),
                pipeline.multiplier(cfg.data, "train"))


def _first_step(cfg, workdir, ckpt):
  """The step to train from (its latest checkpoint's, else 0), or None when nothing is left.

  Raises UserError when the workdir's checkpoints are of another run; allowed
  changes (steps, cadence) are said and go to resumes.jsonl, unless nothing is
  left to train, so that no change is recorded that took no effect.
  """
  start, steps = ckpt.latest_step() or 0, cfg.train.steps
  stopped = start and early_stop.stopped_at(workdir) == start
  if start:
    complete = start >= steps or stopped
    for field, old, new in resume.check(workdir, cfg, start,
                                        record=jax.process_index() == 0 and not complete):
      if not complete:
        say(f"resuming with {field} {old!r} -> {new!r}")
    resume.check_dataset(workdir, cfg.data.path)
  if start >= steps:
    say(f"{workdir} is complete: its latest checkpoint is step {start} "
        f"(TrainConfig.steps = {steps}); nothing to train")
    return None
  if stopped:
    say(f"{workdir} is complete: it stopped early at step {start} ({early_stop.STOPPED}); "
        "nothing to train")
    return None
  return start


def _start(cfg, workdir, parts, ckpt, start, records):
  """The state at `start` (restored, fresh, or a trained model's weights: paper Fig. 5), the
  train step compiled ahead of time (its memory plan must fit), and the batches from `start`."""
  model, optimizer, mesh = parts.model, parts.optimizer, parts.mesh
  if cfg.train.init_from and not start:
    say(f"initialised from {cfg.train.init_from} step "
        f"{state_lib.load_params(model, cfg.train.init_from)}")
  graphdef, state, shardings = state_lib.placed(model, optimizer, mesh, cfg.mesh.rules)
  if start:  # onto this mesh, whatever the device count that saved it
    ckpt.restore(start, model, optimizer)
    state = nnx.state((model, optimizer))
    say(f"resuming {workdir} from step {start}")
  batches = parts.train_data.train_batches(start, cfg.train.steps,
                                           functools.partial(sharding.global_batch, mesh=mesh))
  first = next(batches)
  train_step = state_lib.jit_train_step(cfg, mesh, graphdef, shardings).lower(
      state, first, start).compile()
  state_lib.check_memory(train_step)
  _write_config(workdir, cfg, {**records, **resume.dataset_record(cfg.data.path)})
  return state, train_step, itertools.chain([first], batches)


def _train(cfg, workdir, parts, ckpt, start, state, train_step, batches, progress):
  """The steps from `start`; returns the last validation metrics.

  No host sync per step: the sums and the NaN check wait for a log,
  evaluation or save step. A log file gets a line at each log step (and every
  30 s), not every 0.1 s.
  """
  train = cfg.train
  writer = MetricWriter(workdir, start=start)
  if train.init_from and not start:  # Fig. 5's point: the transferred model, before any step
    writer.write(0, parts.validate(), "valid")
  pending, last_valid, tick = [], None, time.perf_counter()
  valid_history = early_stop.history(workdir, start) if train.stop_patience else []
  divergence.clear(workdir)  # a resumed run is no longer stopped where it was
  bar = distributed.progress("train", train.steps, initial=start, enabled=progress)
  with contextlib.closing(writer), contextlib.closing(bar), \
       preemption.ctrl_c_stops_after_the_step() as stop:
    for step, batch in zip(range(start, train.steps), batches):
      state, sums, grad_norm = train_step(state, batch, step)
      bar.update()
      pending.append((step, sums, grad_norm))
      done = step + 1
      log = done % train.log_every == 0 or done == train.steps
      evaluate_now = done % train.eval_every == 0 or done == train.steps
      stopping = preemption.stopping(stop, log)
      save = done % train.checkpoint_every == 0 or done == train.steps or stopping
      if not (log or evaluate_now or save):
        continue
      host = jax.device_get(pending)  # the one sync, before anything is logged or saved
      divergence.stop_if_diverged(workdir, host, ckpt.latest_step(), cfg.model)
      nnx.update((parts.model, parts.optimizer), state)
      if log:
        seconds = time.perf_counter() - tick
        _log(writer, bar, parts, done, host, seconds)
        pending, tick = [], time.perf_counter()
      reached = False
      if evaluate_now:
        last_valid = parts.validate()
        writer.write(done, last_valid, "valid")
        # Weights that score NaN on valid are no good checkpoint, whatever the train loss said.
        divergence.stop_if_invalid(workdir, done, last_valid, ckpt.latest_step(), cfg.model)
        valid_history.append(last_valid.get("accuracy", 0.0))
        reached = ("accuracy" if early_stop.reached(train, last_valid) else
                   "plateau" if early_stop.plateaued(train, valid_history) else None)
      if save or reached:
        ckpt.save(done, parts.model, parts.optimizer, {"step": done})
      if reached:
        _stop_early(workdir, train, done, last_valid, reached)
        break
      if stopping and done < train.steps:
        bar.close()
        say(f"interrupted: saved checkpoint {done}; the same command resumes from step {done}",
            file=sys.stderr)
        raise KeyboardInterrupt
  return last_valid


def _log(writer, bar, parts, done, host, seconds):
  """Writes the train metrics of the steps in `host` (their sums), which took `seconds`."""
  row = metrics.summarize(metrics.total([s for _, s, _ in host]), parts.multiplier)
  row.update(learning_rate=float(parts.schedule(done - 1)), step_time=seconds / len(host),
             tokens_per_s=row["tokens"] / max(seconds, 1e-9), grad_norm=float(host[-1][2]))
  writer.write(done, row, "train")
  # drawn at the bar's next refresh: in a log file at most every 30 s
  bar.set_postfix(loss=f"{row['loss']:.3f}", acc=f"{row['accuracy']:.3f}", refresh=False)


def _stop_early(workdir, train, done, valid, rule):
  """Records and says that validation accuracy reached TrainConfig.stop_accuracy at `done`
  (rule "accuracy") or plateaued (rule "plateau": early_stop.plateaued)."""
  if jax.process_index() == 0:
    early_stop.record(workdir, done, valid, train, rule)
  if rule == "accuracy":
    say(f"stopped at step {done}: validation accuracy {valid['accuracy']:.4f} >= "
        f"TrainConfig.stop_accuracy {train.stop_accuracy:g}")
  else:
    say(f"stopped at step {done}: validation accuracy {valid['accuracy']:.4f}, no gain over "
        f"{train.stop_min_delta:g} in the last {train.stop_patience} evals "
        "(TrainConfig.stop_patience)")


def check_workdir(workdir):
  """Raises UserError when `workdir` exists and is not a folder."""
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise UserError(f"--workdir {workdir} is a file, not a folder")


@contextlib.contextmanager
def _removed_if_left_empty(workdir):
  """On an error, removes `workdir` if this block made it (for the lock) and it is still empty."""
  made = not os.path.exists(workdir)
  try:
    yield
  except BaseException:
    if made:
      with contextlib.suppress(OSError):  # not empty: the run wrote something, keep it
        os.rmdir(workdir)
    raise


def _describe(cfg, workdir):
  """Says where the run trains and what: its first two lines."""
  m = cfg.model
  say(f"process {jax.process_index() + 1} of {jax.process_count()}, {jax.device_count()} "
      f"device(s); workdir {workdir}")
  say(f"model: ({'U' if m.causal else 'B'}) {m.attention}, {m.num_layers} layers, "
      f"d_model {m.d_model}, {m.num_heads} heads, L {cfg.data.seq_len}, {m.dtype}; "
      f"data {cfg.data.path} ({cfg.data.task})")


def _write_config(workdir, cfg, records):
  """The typed configs as JSON, for eval and the probes (Config.load), and `records` (process 0)."""
  if jax.process_index():
    return
  files = {"config.json": json.dumps(cfg.to_json(), indent=1, sort_keys=True), **records}
  for name, text in files.items():
    with atomic_path(os.path.join(workdir, name)) as tmp, open(tmp, "w") as f:
      f.write(text)


