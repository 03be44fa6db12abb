"""The train state of a Config: model and optimizer (App. A.2), laid out on a mesh, and the step.

Training, eval, throughput and trained-model loading all build their state here."""

import functools
import os

import jax
import optax
from flax import nnx

from performer import memory
from performer.errors import UserError
from performer.models.transformer import TransformerLM
from performer.train import sharding, steps
from performer.train.checkpoint import Checkpoints


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


def check_memory(compiled):
  """Raises UserError when XLA's buffer plan of the compiled train step exceeds the memory."""
  planned, available = memory.planned_bytes(compiled), memory.available_bytes()
  if planned and available and planned > available:
    raise UserError(f"one train step needs {memory.format_bytes(planned)} (XLA's buffer plan), "
                    f"more than the {memory.format_bytes(available)} available on "
                    f"{jax.devices()[0].device_kind}; lower DataConfig.batch_size or seq_len, "
                    f"or the model size")


def load_params(model, source):
  """Copies the parameters of trained workdir `source` into model; returns its step.

  Opens source/checkpoints without creating or writing anything there.
  """
  folder = os.path.abspath(os.path.join(source, "checkpoints"))
  if not os.path.isdir(folder):
    raise UserError(f"TrainConfig.init_from = {source!r} has no checkpoints/ folder; give a "
                    f"trained `performer train` workdir")
  with Checkpoints(folder) as trained:
    return trained.load_params(model)
