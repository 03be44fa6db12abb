"""The training loop: run(workdir) trains the gin-configured model, resuming if it can.

Running it again on a workdir continues from the latest checkpoint: the
input pipeline position, dropout and random features are functions of the
step, so a killed and resumed run ends exactly where an uninterrupted one
does. Ctrl-C or SIGTERM stops after the current step and saves a checkpoint first.
Defaults follow App. A.2: Adam(b1 0.9, b2 0.98, eps 1e-9), learning
rate 1e-3, gradient clipping 0.5, weight decay 0.1, dropout 0.1.
"""

import contextlib
import dataclasses
import json
import math
import os
import signal
import sys
import threading
import time

import jax
import optax
import tqdm
from flax import nnx

from performer import configurables, favor, memory
from performer.atomic import atomic_path, exclusive_lock
from performer.data import pipeline
from performer.errors import UserError
from performer.models.transformer import TransformerLM
from performer.train import metrics, steps
from performer.train.checkpoint import Checkpoints
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


def build():
  """(configs dict, model, optimizer, dataset tokens) from the parsed gin config.

  Relative data and init_from paths are made absolute first (from the
  current folder), so that the operative config works from any folder.

  Raises:
    UserError: an invalid configuration (e.g. a zero batch size, d_model
      not divisible by num_heads, an unknown attention option) or missing data.
  """
  try:
    configurables.resolve_paths()
    data = configurables.build("DataConfig")
    train = configurables.build("TrainConfig")
    optim = configurables.build("OptimConfig")
  except (ValueError, TypeError) as e:
    raise UserError(f"invalid configuration: {str(e).splitlines()[0]}") from None
  tokens = pipeline.vocab_info(data)
  try:
    model_cfg = configurables.build("ModelConfig", vocab_size=tokens[0], max_len=data.seq_len)
    model = TransformerLM(model_cfg, rngs=nnx.Rngs(params=train.seed, dropout=train.seed))
  except ValueError as e:
    raise UserError(f"invalid model configuration: {str(e).splitlines()[0]}") from None
  optimizer = nnx.Optimizer(model, optimizer_for(optim, train.steps), wrt=nnx.Param)
  return {"data": data, "train": train, "optim": optim, "model": model_cfg}, model, optimizer, tokens


# One wrapper for the process: a new nnx.jit per call would compile the step again each time.
_eval_step = nnx.jit(steps.eval_step, static_argnames=("seed", "tokens", "causal", "mlm"))


def evaluate(model, batches, *, seed, tokens, causal, mlm, multiplier=None, max_batches=0):
  """Metrics of `model` over `batches.eval_batches()` (dropout off, no redraw)."""
  model.eval()
  step = _eval_step
  totals = None
  for i, batch in enumerate(batches.eval_batches()):
    if max_batches and i >= max_batches:
      break
    totals = metrics.add(totals, jax.device_get(step(model, batch, seed=seed, tokens=tokens,
                                                     causal=causal, mlm=mlm)))
  model.train()
  return metrics.summarize(totals, multiplier)


def run(workdir, *, progress=True):
  """Trains per the gin config already parsed; returns the last valid metrics.

  Returns None, training nothing, when the workdir already holds a checkpoint
  at TrainConfig.steps or later.

  Raises:
    UserError: bad data, configuration or workdir, or another run holding
      the workdir; TrainingDiverged on a NaN or Inf (after writing
      <workdir>/diverged.json, see `_record_divergence`); KeyboardInterrupt after
      saving a checkpoint on Ctrl-C or SIGTERM.
  """
  # --- Set-up: configs, model, optimizer, data ----------------------------------
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise UserError(f"--workdir {workdir} is a file, not a folder")
  cfgs, model, optimizer, tokens = build()
  train, causal, mlm = cfgs["train"], cfgs["model"].causal, cfgs["data"].mlm
  schedule = learning_rate(cfgs["optim"], train.steps)  # for the logs only
  process = dict(process_index=jax.process_index(), process_count=jax.process_count())
  train_data = pipeline.Batches(cfgs["data"], "train", causal=causal, **process)
  valid_data = pipeline.Batches(cfgs["data"], "valid", causal=causal, **process)
  multiplier = {s: pipeline.multiplier(cfgs["data"], s) for s in ("train", "valid")}  # PG-19

  # One run per workdir: a second would mix its checkpoints and metrics with ours.
  with exclusive_lock(os.path.join(workdir, "train.lock"), f"--workdir {workdir}"), \
       Checkpoints(os.path.abspath(os.path.join(workdir, "checkpoints"))) as ckpt:
    start = ckpt.latest_step() or 0
    if start >= train.steps:
      print(f"{workdir} is complete: its latest checkpoint is step {start} "
            f"(TrainConfig.steps = {train.steps}); nothing to train")
      return None

    # --- Start: resume, or take a trained model's weights (paper Fig. 5) --------
    if start:
      ckpt.restore(start, model, optimizer)
      print(f"resuming {workdir} from step {start}")
    elif train.init_from:
      print(f"initialised from {train.init_from} step {_load_params(model, train.init_from)}")

    # --- The train step, compiled ahead of time; its memory plan must fit -------
    jitted = nnx.jit(steps.train_step, static_argnames=("seed", "tokens", "causal", "mlm"))
    train_step = jitted.lower(model, optimizer, train_data.train_batch(start), start,
                              seed=train.seed, tokens=tokens, causal=causal, mlm=mlm).compile()
    _check_memory(train_step)  # called below without the static (keyword) arguments
    _write_config(workdir, cfgs)
    writer = MetricWriter(workdir, start=start)
    if train.init_from and not start:  # Fig. 5's point: the transferred model, before any step
      writer.write(0, evaluate(model, valid_data, seed=train.seed, tokens=tokens, causal=causal,
                               mlm=mlm, multiplier=multiplier["valid"],
                               max_batches=train.eval_batches), "valid")
    totals, last_valid, tick = None, None, time.perf_counter()
    _clear_divergence(workdir)  # a resumed run is no longer stopped where it was

    # --- The loop -----------------------------------------------------------------
    interactive = sys.stderr.isatty()  # a log file gets a line every 30 s, not every 0.1 s
    every = {} if interactive else dict(mininterval=30, maxinterval=30)
    bar = tqdm.tqdm(range(start, train.steps), initial=start, total=train.steps, desc="train",
                    disable=not progress, **every)
    with contextlib.closing(writer), _ctrl_c_stops_after_the_step() as stop:
      for step in bar:
        sums, grad_norm = jax.device_get(train_step(model, optimizer,
                                                    train_data.train_batch(step), step))
        if not (math.isfinite(float(sums["loss_sum"])) and math.isfinite(float(grad_norm))):
          _record_divergence(workdir, step, ckpt.latest_step(), float(sums["loss_sum"]),
                             float(grad_norm))
          raise TrainingDiverged(f"non-finite loss or gradient at step {step}; stopped; "
                                 f"{_kept(ckpt.latest_step())}{_favor_hint(cfgs['model'])}")
        totals = metrics.add(totals, sums)
        done = step + 1
        if done % train.log_every == 0 or done == train.steps:
          seconds = time.perf_counter() - tick
          row = metrics.summarize(totals, multiplier["train"])
          n = done - (done - 1) // train.log_every * train.log_every
          row.update(learning_rate=float(schedule(done - 1)), step_time=seconds / max(n, 1),
                     tokens_per_s=row["tokens"] / max(seconds, 1e-9), grad_norm=float(grad_norm))
          writer.write(done, row, "train")
          bar.set_postfix(loss=f"{row['loss']:.3f}", acc=f"{row['accuracy']:.3f}",
                          refresh=interactive)
          totals, tick = None, time.perf_counter()
        if done % train.eval_every == 0 or done == train.steps:
          last_valid = evaluate(model, valid_data, seed=train.seed, tokens=tokens, causal=causal,
                                mlm=mlm, multiplier=multiplier["valid"],
                                max_batches=train.eval_batches)
          writer.write(done, last_valid, "valid")
        if done % train.checkpoint_every == 0 or done == train.steps or stop:
          ckpt.save(done, model, optimizer, {"step": done})
        if stop and done < train.steps:
          bar.close()
          print(f"interrupted: saved checkpoint {done}; the same command resumes from step {done}",
                file=sys.stderr)
          raise KeyboardInterrupt
  return last_valid


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


def _write_config(workdir, cfgs):
  """The operative gin config and the typed configs as JSON, for eval and for people."""
  with atomic_path(os.path.join(workdir, "config.gin")) as tmp, open(tmp, "w") as f:
    f.write(configurables.operative_config())
  with atomic_path(os.path.join(workdir, "config.json")) as tmp, open(tmp, "w") as f:
    json.dump({k: dataclasses.asdict(v) for k, v in cfgs.items()}, f, indent=1, sort_keys=True)


DIVERGED = "diverged.json"


def _record_divergence(workdir, step, last_checkpoint, loss_sum, grad_norm):
  """Writes <workdir>/diverged.json (atomically) for figures to mark where the run stopped.

  {"step": the loop's step index, i.e. the number of good updates before
  the non-finite one, as in TrainingDiverged's message; "last_checkpoint":
  the step of the checkpoint kept, or None; "reason": which of the batch's
  loss and the gradient norm were non-finite, with their values}.
  """
  bad = [f"{name} {value}" for name, value in (("loss", loss_sum), ("gradient norm", grad_norm))
         if not math.isfinite(value)]
  record = {"step": int(step), "last_checkpoint": last_checkpoint,
            "reason": "non-finite " + " and ".join(bad)}
  with atomic_path(os.path.join(workdir, DIVERGED)) as tmp, open(tmp, "w") as f:
    json.dump(record, f, indent=1)


def _clear_divergence(workdir):
  """Removes the diverged.json of an earlier attempt of this run."""
  with contextlib.suppress(FileNotFoundError):
    os.remove(os.path.join(workdir, DIVERGED))


def _favor_hint(model_cfg):
  """Why FAVOR+ gives NaN, for the divergence message of a model with exponential features."""
  defaults = {"performer_softmax": "positive", "performer_relu": "relu"}
  kernel = model_cfg.attention_options.get("kernel", defaults.get(model_cfg.attention))
  if kernel not in (*favor.SOFTMAX_KERNELS, "exp"):
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
  (a scheduler's preemption, a session's end, reproduce.sh stopped) does
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
    print(f"\n{name}: saving a checkpoint after this step (Ctrl-C again to quit without)",
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
