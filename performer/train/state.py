"""The train state of a Config: model and optimizer (App. A.2), laid out on a mesh, and the step.

Training, eval, throughput and trained-model loading all build their state here."""

import functools
import os

import jax
import jax.numpy as jnp
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


def least_bytes(cfg, mesh):
  """(bytes per device, state bytes, batch bytes): the lower bound `check_size` compares.

  Raises:
    UserError: an invalid model (as `build`).
  """
  model, optimizer = nnx.eval_shape(lambda: build(cfg))
  sizes = lambda tree: [x.size * x.dtype.itemsize for x in jax.tree.leaves(tree)]
  state = sum(sizes(nnx.state((model, optimizer)))) + max(sizes(nnx.state(model, nnx.Param)))
  data = cfg.data
  batch = data.batch_size * data.seq_len * (4 + cfg.model.d_model *
                                            jnp.dtype(cfg.model.dtype).itemsize)
  return (state + batch) // mesh.devices.size, state, batch


def check_size(cfg, mesh):
  """Raises UserError when the state and one batch of Config cfg cannot fit the memory, before
  either is made.

  A lower bound read off shapes alone (nnx.eval_shape allocates nothing):
  the train state (parameters and AdamW's two moments), the gradient of the
  largest parameter (XLA may free the others' in turn), and the batch's
  int32 ids and an activation [B, L, d_model], spread over the mesh's
  devices. XLA's buffer plan (`check_memory`) needs the state and the first
  batch first: at a huge DataConfig.seq_len the position table [max_len,
  d_model] and the batch alone outgrow the machine, and the OS kills the run
  before the plan is read.

  Raises:
    UserError: naming DataConfig.seq_len and batch_size, the bytes needed and
      available; or an invalid model (as `build`).
  """
  needed, state, batch = least_bytes(cfg, mesh)
  available, data = memory.available_bytes(), cfg.data
  if available and needed > available:
    raise UserError(f"DataConfig.seq_len {data.seq_len} and batch_size {data.batch_size}: one "
                    f"train step needs at least {memory.format_bytes(needed)} (parameters, "
                    f"AdamW state and the largest gradient {memory.format_bytes(state)}, the "
                    f"batch's ids and embeddings {memory.format_bytes(batch)}), more than the "
                    f"{memory.format_bytes(available)} available on "
                    f"{jax.devices()[0].device_kind}; lower DataConfig.seq_len or batch_size")


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
