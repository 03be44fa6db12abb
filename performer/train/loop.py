"""The training loop: run(cfg, workdir) trains the model of a Config, resuming if it can.

One code path for 1 device, N devices and N processes: the state is laid
out on a device mesh (sharding.py) and the step jitted with explicit
shardings. The loop fetches sums and checks for NaN every log_every steps,
not every step. Running it again on a workdir continues from the latest
checkpoint: the input pipeline position, dropout and random features are
functions of the step, so a killed and resumed run ends exactly where an
uninterrupted one does, on any device count. Ctrl-C or SIGTERM stops after
the current step and saves a checkpoint first.
Defaults follow App. A.2: Adam(b1 0.9, b2 0.98, eps 1e-9), learning
rate 1e-3, gradient clipping 0.5, weight decay 0.1, dropout 0.1.
"""

import contextlib
import functools
import itertools
import json
import math
import os
import signal
import sys
import threading
import time

import jax
import numpy as np
import optax
import tqdm
from flax import nnx
from jax.experimental import multihost_utils

from performer import attention, configurables, favor, memory
from performer.atomic import atomic_path, exclusive_lock
from performer.data import pipeline
from performer.errors import UserError
from performer.models.transformer import TransformerLM
from performer.train import metrics, resume, sharding, steps
from performer.train.checkpoint import Checkpoints
from performer.train.distributed import say
from performer.train.writer import MetricWriter


class TrainingDiverged(UserError):
  """A non-finite loss or gradient: the run stops, the last checkpoint stays."""


def learning_rate(cfg, steps):
  """The learning rate as a function of the step (an optax schedule) for OptimConfig cfg."""
  if cfg.schedule == "constant":
    return optax.constant_schedule(cfg.learning_rate)
  return optax.warmup_cosine_decay_schedule(0.0, cfg.learning_rate, min(cfg.warmup_steps, steps - 1),
                                            steps)


def optimizer_for(cfg, steps):
  parts = [optax.clip_by_global_norm(cfg.clip_norm)] if cfg.clip_norm else []
  parts.append(optax.adamw(learning_rate(cfg, steps), b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                           weight_decay=cfg.weight_decay))
  return optax.apply_if_finite(optax.chain(*parts), max_consecutive_errors=10 ** 9)


def build(cfg):
  """(model, optimizer) of Config cfg, on the host, from TrainConfig.seed.

  Raises:
    UserError: a model the attention backend rejects (e.g. an unknown option).
  """
  try:
    model = TransformerLM(cfg.model, rngs=nnx.Rngs(params=cfg.train.seed, dropout=cfg.train.seed))
  except ValueError as e:
    raise UserError(f"invalid model configuration: {str(e).splitlines()[0]}") from None
  return model, nnx.Optimizer(model, optimizer_for(cfg.optim, cfg.train.steps), wrt=nnx.Param)


def placed(model, optimizer, mesh, rules):
  """Lays the state of (model, optimizer) out on the mesh by sharding.state_shardings.

  Returns (graphdef, state, shardings); model and optimizer now hold the
  placed arrays too.
  """
  graphdef, state = nnx.split((model, optimizer))
  shardings = sharding.state_shardings(state, mesh, rules)
  state = sharding.place(state, shardings)
  nnx.update((model, optimizer), state)
  return graphdef, state, shardings


def jit_train_step(cfg, mesh, graphdef, shardings):
  """steps.train_step of Config cfg, jitted on mesh: (state, batch, step) -> (state, sums, norm).

  The state (model and optimizer, laid out by `shardings`) is donated: the
  old arrays are reused for the new ones. Sums and norm come replicated.
  """
  step = functools.partial(steps.train_step, graphdef, seed=cfg.train.seed, vocab=cfg.vocab,
                           causal=cfg.model.causal, mlm=cfg.data.mlm)
  return jax.jit(step, in_shardings=(shardings, sharding.batch_sharding(mesh), None),
                 out_shardings=(shardings, sharding.replicated(mesh), sharding.replicated(mesh)),
                 donate_argnums=0)


# One wrapper for the process: a new nnx.jit per call would compile the step again each time.
_eval_step = nnx.jit(steps.eval_step, static_argnames=("seed", "vocab", "causal", "mlm"))


def evaluate(model, batches, *, seed, vocab, causal, mlm, mesh, multiplier=None, max_batches=0):
  """Metrics of `model` over `batches.eval_batches()` (dropout off, no redraw).

  Every process runs every batch (`eval_batches` gives each the same number),
  and the sums are fetched once, at the end.
  """
  model.eval()
  sums = []
  for i, batch in enumerate(batches.eval_batches()):
    if max_batches and i >= max_batches:
      break
    sums.append(_eval_step(model, sharding.global_batch(batch, mesh), seed=seed, vocab=vocab,
                           causal=causal, mlm=mlm))
  model.train()
  return metrics.summarize(metrics.total(jax.device_get(sums)), multiplier)


def run(cfg, workdir, *, progress=True):
  """Trains the model of Config cfg in `workdir`; returns the last valid metrics.

  Returns None, training nothing, when the workdir already holds a checkpoint
  at TrainConfig.steps or later. Every process of a multi-host run calls
  this with the same cfg; only process 0 writes metrics and TensorBoard.

  Raises:
    UserError: bad data, configuration or workdir, or another run holding
      the workdir; TrainingDiverged on a NaN or Inf (after writing
      <workdir>/diverged.json, see `_record_divergence`); KeyboardInterrupt after
      saving a checkpoint on Ctrl-C or SIGTERM.
  """
  # --- Set-up: mesh, model, optimizer, data -------------------------------------
  check_workdir(workdir)
  train, vocab, causal, mlm = cfg.train, cfg.vocab, cfg.model.causal, cfg.data.mlm
  mesh = sharding.make_mesh(cfg.mesh)
  if cfg.data.batch_size % mesh.shape[sharding.DATA]:
    raise UserError(f"DataConfig.batch_size {cfg.data.batch_size} is not divisible by the "
                    f"mesh's {mesh.shape[sharding.DATA]} data-parallel devices")
  model, optimizer = build(cfg)
  schedule = learning_rate(cfg.optim, train.steps)  # for the logs only
  process = dict(process_index=jax.process_index(), process_count=jax.process_count())
  train_data = pipeline.Batches(cfg.data, "train", causal=causal, **process)
  valid_data = pipeline.Batches(cfg.data, "valid", causal=causal, **process)
  multiplier = {s: pipeline.multiplier(cfg.data, s) for s in ("train", "valid")}  # PG-19

  def validate():
    return evaluate(model, valid_data, seed=train.seed, vocab=vocab, causal=causal, mlm=mlm,
                    mesh=mesh, multiplier=multiplier["valid"], max_batches=train.eval_batches)

  # One run per workdir: a second would mix its checkpoints and metrics with ours. (Process 0
  # holds the lock for all of a multi-process run.)
  lock = (exclusive_lock(os.path.join(workdir, "train.lock"), f"--workdir {workdir}")
          if jax.process_index() == 0 else contextlib.nullcontext())
  with lock, Checkpoints(os.path.abspath(os.path.join(workdir, "checkpoints"))) as ckpt:
    start = ckpt.latest_step() or 0
    if start:  # the same run only; allowed changes (steps, cadence) go to resumes.jsonl
      for field, old, new in resume.check(workdir, cfg, start, record=jax.process_index() == 0):
        say(f"resuming with {field} {old!r} -> {new!r}")
    if start >= train.steps:
      say(f"{workdir} is complete: its latest checkpoint is step {start} "
          f"(TrainConfig.steps = {train.steps}); nothing to train")
      return None

    # --- Start: resume, or take a trained model's weights (paper Fig. 5) --------
    if train.init_from and not start:
      say(f"initialised from {train.init_from} step {_load_params(model, train.init_from)}")
    graphdef, state, shardings = placed(model, optimizer, mesh, cfg.mesh.rules)
    if start:  # onto this mesh, whatever the device count that saved it
      ckpt.restore(start, model, optimizer)
      state = nnx.state((model, optimizer))
      say(f"resuming {workdir} from step {start}")

    # --- The train step, compiled ahead of time; its memory plan must fit -------
    batches = train_data.train_batches(start, train.steps,
                                       functools.partial(sharding.global_batch, mesh=mesh))
    first = next(batches)
    train_step = jit_train_step(cfg, mesh, graphdef, shardings).lower(state, first, start).compile()
    _check_memory(train_step)
    _write_config(workdir, cfg)
    writer = MetricWriter(workdir, start=start)
    if train.init_from and not start:  # Fig. 5's point: the transferred model, before any step
      writer.write(0, validate(), "valid")
    pending, last_valid, tick = [], None, time.perf_counter()
    _clear_divergence(workdir)  # a resumed run is no longer stopped where it was

    # --- The loop: no host sync per step; sums and checks every log_every -------
    interactive = sys.stderr.isatty()  # a log file gets a line every 30 s, not every 0.1 s
    every = {} if interactive else dict(mininterval=30, maxinterval=30)
    bar = tqdm.tqdm(range(start, train.steps), initial=start, total=train.steps, desc="train",
                    disable=not progress or jax.process_index() > 0, **every)
    with contextlib.closing(writer), _ctrl_c_stops_after_the_step() as stop:
      for step, batch in zip(bar, itertools.chain([first], batches)):
        state, sums, grad_norm = train_step(state, batch, step)
        pending.append((step, sums, grad_norm))
        done = step + 1
        log = done % train.log_every == 0 or done == train.steps
        evaluate_now = done % train.eval_every == 0 or done == train.steps
        stopping = _stopping(stop, log)
        save = done % train.checkpoint_every == 0 or done == train.steps or stopping
        if not (log or evaluate_now or save):
          continue
        host = jax.device_get(pending)  # the one sync, before anything is logged or saved
        _stop_if_diverged(workdir, host, ckpt.latest_step(), cfg.model)
        nnx.update((model, optimizer), state)
        if log:
          seconds = time.perf_counter() - tick
          row = metrics.summarize(metrics.total([s for _, s, _ in host]), multiplier["train"])
          row.update(learning_rate=float(schedule(done - 1)), step_time=seconds / len(host),
                     tokens_per_s=row["tokens"] / max(seconds, 1e-9),
                     grad_norm=float(host[-1][2]))
          writer.write(done, row, "train")
          bar.set_postfix(loss=f"{row['loss']:.3f}", acc=f"{row['accuracy']:.3f}",
                          refresh=interactive)
          pending, tick = [], time.perf_counter()
        if evaluate_now:
          last_valid = validate()
          writer.write(done, last_valid, "valid")
        if save:
          ckpt.save(done, model, optimizer, {"step": done})
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


def _stopping(stop, log):
  """Whether to save and stop after this step, given the signals seen (`stop`).

  One process stops at once. The processes of a multi-process run may see a
  SIGTERM at different steps, and must save the same checkpoint together,
  so they agree at the next log step (one small all-gather there).
  """
  if jax.process_count() == 1:
    return bool(stop)
  if not log:
    return False
  return bool(multihost_utils.process_allgather(np.int32(bool(stop))).max())


def _stop_if_diverged(workdir, host, last_checkpoint, model_cfg):
  """Raises TrainingDiverged at the first non-finite loss or gradient norm among `host` steps.

  host: [(step, sums, grad_norm)] fetched since the last check. Updates
  after a non-finite gradient were skipped (optax.apply_if_finite), and
  nothing was saved since, so the last checkpoint is from before it.
  """
  for step, sums, grad_norm in host:
    loss_sum, grad_norm = float(sums["loss_sum"]), float(grad_norm)
    if not (math.isfinite(loss_sum) and math.isfinite(grad_norm)):
      _record_divergence(workdir, step, last_checkpoint, loss_sum, grad_norm)
      checked = f"steps {host[0][0]}-{host[-1][0]}" if len(host) > 1 else f"step {step}"
      raise TrainingDiverged(f"non-finite loss or gradient at step {step} (checked {checked}); "
                             f"stopped; {_kept(last_checkpoint)}{_favor_hint(model_cfg)}")


def _check_memory(compiled):
  """Raises UserError when XLA's buffer plan of the compiled train step exceeds the memory."""
  planned, available = memory.planned_bytes(compiled), memory.available_bytes()
  if planned and available and planned > available:
    raise UserError(f"one train step needs {memory.format_bytes(planned)} (XLA's buffer plan), "
                    f"more than the {memory.format_bytes(available)} available on "
                    f"{jax.devices()[0].device_kind}; lower DataConfig.batch_size or seq_len, "
                    f"or the model size")


def _load_params(model, source):
  """Copies the parameters of trained workdir `source` into model; returns its step.

  Opens source/checkpoints without creating or writing anything there.
  """
  folder = os.path.abspath(os.path.join(source, "checkpoints"))
  if not os.path.isdir(folder):
    raise UserError(f"TrainConfig.init_from = {source!r} has no checkpoints/ folder; give a "
                    f"trained `performer train` workdir")
  with Checkpoints(folder, create=False) as trained:
    return trained.load_params(model)


def _write_config(workdir, cfg):
  """The operative gin config and the typed configs as JSON, for eval and for people (process 0)."""
  if jax.process_index():
    return
  with atomic_path(os.path.join(workdir, "config.gin")) as tmp, open(tmp, "w") as f:
    f.write(configurables.operative_config())
  with atomic_path(os.path.join(workdir, "config.json")) as tmp, open(tmp, "w") as f:
    json.dump(cfg.to_json(), f, indent=1, sort_keys=True)


DIVERGED = "diverged.json"


def _record_divergence(workdir, step, last_checkpoint, loss_sum, grad_norm):
  """Writes <workdir>/diverged.json (atomically) for figures to mark where the run stopped.

  {"step": the loop's step index, i.e. the number of good updates before
  the non-finite one, as in TrainingDiverged's message; "last_checkpoint":
  the step of the checkpoint kept, or None; "reason": which of the batch's
  loss and the gradient norm were non-finite, with their values}.
  """
  if jax.process_index():
    return
  bad = [f"{name} {value}" for name, value in (("loss", loss_sum), ("gradient norm", grad_norm))
         if not math.isfinite(value)]
  record = {"step": int(step), "last_checkpoint": last_checkpoint,
            "reason": "non-finite " + " and ".join(bad)}
  with atomic_path(os.path.join(workdir, DIVERGED)) as tmp, open(tmp, "w") as f:
    json.dump(record, f, indent=1)


def _clear_divergence(workdir):
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
  return f"the last good checkpoint is step {step}, from which re-running resumes"


@contextlib.contextmanager
def _ctrl_c_stops_after_the_step():
  """Yields a list that the first Ctrl-C or SIGTERM fills; a second Ctrl-C interrupts at once.

  A KeyboardInterrupt raised mid-step could leave the model half-updated,
  so the loop saves and stops at the next step boundary instead. SIGTERM
  (a scheduler's preemption, a session's end, a stopped launcher) does
  the same, so that it also leaves a checkpoint to resume from.
  """
  stop = []
  if threading.current_thread() is not threading.main_thread():  # signals reach the main one only
    yield stop
    return
  previous = {}

  def request(signum, frame):  # pylint: disable=unused-argument
    stop.append(signum)
    signal.signal(signum, previous[signum])  # each signal once; the next acts as before
    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    say(f"\n{name}: saving a checkpoint after this step (Ctrl-C again to quit without)",
        file=sys.stderr)

  for signum in (signal.SIGINT, signal.SIGTERM):
    previous[signum] = signal.signal(signum, request)
  if previous[signal.SIGINT] is None:  # a handler installed outside Python
    previous[signal.SIGINT] = signal.default_int_handler
  if previous[signal.SIGTERM] is None:
    previous[signal.SIGTERM] = signal.SIG_DFL
  try:
    yield stop
  finally:
    for signum, handler in previous.items():
      signal.signal(signum, handler)
