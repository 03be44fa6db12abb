"""The training loop: run(cfg, workdir) trains the model of a Config, resuming if it can.

One code path for 1 device, N devices and N processes: the state is laid
out on a device mesh (sharding.py) and the step jitted with explicit
shardings. The loop fetches sums and checks for NaN every log_every steps,
not every step. Running it again on a workdir continues from the latest
checkpoint: the input pipeline position, dropout and random features are
functions of the step, so a killed and resumed run ends exactly where an
uninterrupted one does, on any device count. Ctrl-C or SIGTERM stops after
the current step and saves a checkpoint first (preemption.py); a NaN stops
the run where it was good (divergence.py); the state and the jitted step
come from state.py. The loop takes a resolved typed Config: gin stays in
the CLI (configurables.py).
"""

import contextlib
import functools
import itertools
import json
import os
import sys
import time

import jax
from flax import nnx

from performer.atomic import atomic_path, exclusive_lock
from performer.data import pipeline
from performer.errors import UserError
from performer.train import (distributed, divergence, early_stop, metrics, preemption, resume,
                             sharding)
from performer.train import evaluate as evaluation
from performer.train import state as state_lib
from performer.train.checkpoint import Checkpoints
from performer.train.distributed import say
from performer.train.writer import MetricWriter

TrainingDiverged = divergence.TrainingDiverged


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
  # --- Set-up: mesh, model, optimizer, data -------------------------------------
  check_workdir(workdir)
  train, vocab, causal, mlm = cfg.train, cfg.vocab, cfg.model.causal, cfg.data.mlm
  mesh = sharding.make_mesh(cfg.mesh)
  if cfg.data.batch_size % mesh.shape[sharding.DATA]:
    raise UserError(f"DataConfig.batch_size {cfg.data.batch_size} is not divisible by the "
                    f"mesh's {mesh.shape[sharding.DATA]} data-parallel devices")
  model, optimizer = state_lib.build(cfg)
  schedule = state_lib.learning_rate(cfg.optim, train.steps)  # for the logs only
  process = dict(process_index=jax.process_index(), process_count=jax.process_count())
  train_data = pipeline.batches(cfg.data, "train", causal=causal, **process)
  valid_data = pipeline.batches(cfg.data, "valid", causal=causal, **process)
  multiplier = {s: pipeline.multiplier(cfg.data, s) for s in ("train", "valid")}  # PG-19

  def validate():
    return evaluation.evaluate(model, valid_data, seed=train.seed, vocab=vocab, causal=causal,
                               mlm=mlm,
                    mesh=mesh, multiplier=multiplier["valid"], max_batches=train.eval_batches)

  # One run per workdir: a second would mix its checkpoints and metrics with ours. (Process 0
  # holds the lock for all of a multi-process run.) Output folders appear with their first file
  # (checkpoints/ at the first save), so a start refused before the first step leaves none.
  lock = (exclusive_lock(os.path.join(workdir, "train.lock"), f"--workdir {workdir}")
          if jax.process_index() == 0 else contextlib.nullcontext())
  with _removed_if_left_empty(workdir), lock, \
       Checkpoints(os.path.abspath(os.path.join(workdir, "checkpoints"))) as ckpt:
    start = ckpt.latest_step() or 0
    if start:  # the same run only; allowed changes (steps, cadence) go to resumes.jsonl
      # unless nothing is left to train, so that no change is recorded that took no effect
      complete = start >= train.steps or early_stop.stopped_at(workdir) == start
      for field, old, new in resume.check(workdir, cfg, start,
                                          record=jax.process_index() == 0 and not complete):
        if not complete:
          say(f"resuming with {field} {old!r} -> {new!r}")
      resume.check_dataset(workdir, cfg.data.path)
    if start >= train.steps:
      say(f"{workdir} is complete: its latest checkpoint is step {start} "
          f"(TrainConfig.steps = {train.steps}); nothing to train")
      return None
    if start and early_stop.stopped_at(workdir) == start:
      say(f"{workdir} is complete: it stopped at step {start}, where its validation accuracy "
          f"reached TrainConfig.stop_accuracy ({early_stop.STOPPED}); nothing to train")
      return None

    # --- Start: resume, or take a trained model's weights (paper Fig. 5) --------
    if train.init_from and not start:
      say(f"initialised from {train.init_from} step {state_lib.load_params(model, train.init_from)}")
    graphdef, state, shardings = state_lib.placed(model, optimizer, mesh, cfg.mesh.rules)
    if start:  # onto this mesh, whatever the device count that saved it
      ckpt.restore(start, model, optimizer)
      state = nnx.state((model, optimizer))
      say(f"resuming {workdir} from step {start}")

    # --- The train step, compiled ahead of time; its memory plan must fit -------
    batches = train_data.train_batches(start, train.steps,
                                       functools.partial(sharding.global_batch, mesh=mesh))
    first = next(batches)
    train_step = state_lib.jit_train_step(cfg, mesh, graphdef, shardings).lower(state, first, start).compile()
    state_lib.check_memory(train_step)
    _write_config(workdir, cfg, {**(records or {}), **resume.dataset_record(cfg.data.path)})
    writer = MetricWriter(workdir, start=start)
    if train.init_from and not start:  # Fig. 5's point: the transferred model, before any step
      writer.write(0, validate(), "valid")
    pending, last_valid, tick = [], None, time.perf_counter()
    divergence.clear(workdir)  # a resumed run is no longer stopped where it was

    # --- The loop: no host sync per step; sums and checks every log_every -------
    # A log file gets a line at each log step (and every 30 s), not every 0.1 s.
    bar = distributed.progress("train", train.steps, initial=start, enabled=progress)
    with contextlib.closing(writer), contextlib.closing(bar), \
         preemption.ctrl_c_stops_after_the_step() as stop:
      for step, batch in zip(range(start, train.steps), itertools.chain([first], batches)):
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
        nnx.update((model, optimizer), state)
        if log:
          seconds = time.perf_counter() - tick
          row = metrics.summarize(metrics.total([s for _, s, _ in host]), multiplier["train"])
          row.update(learning_rate=float(schedule(done - 1)), step_time=seconds / len(host),
                     tokens_per_s=row["tokens"] / max(seconds, 1e-9),
                     grad_norm=float(host[-1][2]))
          writer.write(done, row, "train")
          # drawn at the bar's next refresh: in a log file at most every 30 s
          bar.set_postfix(loss=f"{row['loss']:.3f}", acc=f"{row['accuracy']:.3f}", refresh=False)
          pending, tick = [], time.perf_counter()
        reached = False
        if evaluate_now:
          last_valid = validate()
          writer.write(done, last_valid, "valid")
          # Weights that score NaN on valid are no good checkpoint, whatever the train loss said.
          divergence.stop_if_invalid(workdir, done, last_valid, ckpt.latest_step(), cfg.model)
          reached = early_stop.reached(train, last_valid)
        if save or reached:
          ckpt.save(done, model, optimizer, {"step": done})
        if reached:
          if jax.process_index() == 0:
            early_stop.record(workdir, done, last_valid, train.stop_accuracy)
          say(f"stopped at step {done}: validation accuracy {last_valid['accuracy']:.4f} >= "
              f"TrainConfig.stop_accuracy {train.stop_accuracy:g}")
          break
        if stopping and done < train.steps:
          bar.close()
          say(f"interrupted: saved checkpoint {done}; the same command resumes from step {done}",
              file=sys.stderr)
          raise KeyboardInterrupt
  return last_valid


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


def _write_config(workdir, cfg, records):
  """The typed configs as JSON, for eval and the probes (Config.load), and `records` (process 0)."""
  if jax.process_index():
    return
  files = {"config.json": json.dumps(cfg.to_json(), indent=1, sort_keys=True), **records}
  for name, text in files.items():
    with atomic_path(os.path.join(workdir, name)) as tmp, open(tmp, "w") as f:
      f.write(text)


