"""What FAVOR does on a trained recall model's own queries and keys (the mechanism of issue 40).

Compares its FAVOR rows with exact softmax rows, then scores it with the exact rows swapped in."""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from performer import attention, favor
from performer.attention.performer import PerformerAttention
from performer.data import mqar, pipeline
from performer.errors import UserError
from performer.experiments import results
from performer.experiments.results import Result
from performer.flags import flag

NAME = "recall_rows"
SUMMARY = "FAVOR's attention rows on a trained recall model's own q and k, against exact softmax"
DESCRIPTION = ("Feeds the first examples of an MQAR split to a trained Performer recall run and "
               "compares, at every query, the model's FAVOR attention row with exact softmax of "
               "the same q and k (row L1 distance, largest weight, weight on the answer's "
               "position), then scores the model with the exact rows in place of FAVOR's.")
OUT = "runs/recall_rows.json"
FIGURE = None


@dataclasses.dataclass(frozen=True)
class RowsConfig:
  """A trained recall run and the examples to read."""
  run: str = flag(help="a `performer train` workdir of a Performer model trained on MQAR")
  split: str = flag("test", "the MQAR split whose first examples are read")
  examples: int = flag(512, "how many examples (at most the split's)")


CONFIG = RowsConfig


def _matrices(q, k, mask, block):
  """(FAVOR's matrix as the layer computes it, exact softmax's), [B, H, L, L] float32 each."""
  att = block.attn
  params = att.kernel_parameters(q.shape[0])
  if att.qk_map is not None:
    q, k = att.qk_map(q), att.qk_map(k)
  ours = favor.attention_matrix(q, k, att.matrix(), kernel=att.kernel, mask=mask, causal=True,
                                kernel_epsilon=att.kernel_epsilon, params=params)
  exact = favor.softmax_matrix(q, k, mask=mask, causal=True)
  return ours, exact


@nnx.jit(static_argnames=("use_exact",))
def _apply(model, tokens, mask, positions, use_exact):
  """Logits at `positions` with every layer's attention given by its FAVOR (or exact) matrix,
  and per layer both matrices' rows at the positions: [layers] of [B, H, K, L]."""
  x, rows = model.hidden_states(tokens, mask)[0], []
  for block in model.blocks:
    x = block.attention_input(x)
    q, k, v = block.heads(x)
    ours, exact = _matrices(q, k, mask, block)
    pick = lambda a: jnp.take_along_axis(a, positions[:, None, :, None], axis=2)
    rows.append((pick(ours), pick(exact)))
    matrix = exact if use_exact else ours
    out = jnp.einsum("bhij,bjhd->bihd", matrix, v.astype(jnp.float32)).astype(x.dtype)
    x = x + block.proj(out.reshape(*x.shape[:2], -1))
    x = x + block.mlp_part(x)
  hidden = jnp.take_along_axis(x, positions[..., None], axis=1)
  return model.logits(hidden), rows


def run(cfg, *, progress=True):  # pylint: disable=unused-argument
  """Returns Result(rows: one per layer, extra: accuracies with FAVOR's and exact rows).

  Raises:
    UserError: not a trained workdir, not an MQAR run, not a Performer, or
      --examples < 1.
  """
  from performer.train import trained  # pylint: disable=import-outside-toplevel
  from performer.train.config import Config  # pylint: disable=import-outside-toplevel
  if cfg.examples < 1:
    raise UserError(f"--examples must be >= 1, got {cfg.examples}")
  run_cfg = Config.load(cfg.run)  # what the run is, before its checkpoint is read
  if not {"kernel", "num_features"} <= set(attention.info(run_cfg.model.attention).defaults):
    raise UserError(f"{cfg.run}: its attention is {run_cfg.model.attention}; recall-rows reads "
                    "FAVOR's rows of Performer models")
  if mqar.load(run_cfg.data.path) is None:
    raise UserError(f"{cfg.run}: not an MQAR run (its data is {run_cfg.data.path})")
  run_cfg, model, step = trained.load(cfg.run)
  assert all(isinstance(b.attn, PerformerAttention) for b in model.blocks)
  data = dataclasses.replace(run_cfg.data, batch_size=min(cfg.examples, 256))
  batches = pipeline.batches(data, cfg.split, causal=True)
  per_layer, correct, queries, check = None, {"favor": 0, "exact": 0}, 0, 0.0
  seen = 0
  for batch in batches.eval_batches():
    keep = (batch["ids"] >= 0) & (np.arange(len(batch["ids"])) < cfg.examples - seen)
    if not keep.any():
      break
    seen += int(keep.sum())
    tokens, positions = (jnp.asarray(batch[k][keep]) for k in ("inputs", "positions"))
    targets = np.take_along_axis(batch["targets"][keep], batch["positions"][keep], axis=1)
    mask = tokens != mqar.FILLER  # the padding id, as training masks it
    own, rows = _apply(model, tokens, mask, positions, use_exact=False)
    exact_logits, _ = _apply(model, tokens, mask, positions, use_exact=True)
    check = max(check, float(jnp.max(jnp.abs(own - model(tokens, mask, positions=positions)))))
    correct["favor"] += int(np.sum(np.argmax(own, -1) == targets))
    correct["exact"] += int(np.sum(np.argmax(exact_logits, -1) == targets))
    queries += targets.size
    layer_sums = [_row_sums(ours, exact, positions.shape[1]) for ours, exact in rows]
    layer_sums = jax.device_get(layer_sums)
    per_layer = layer_sums if per_layer is None else [
        {k: a[k] + b[k] for k in a} for a, b in zip(per_layer, layer_sums)]
  heads = run_cfg.model.num_heads
  out_rows = [{"layer": l, **{k: float(v) / (queries * heads) for k, v in s.items()}}
              for l, s in enumerate(per_layer)]
  opts = dict(run_cfg.model.attention_options)
  extra = {"run": {"path": os.path.abspath(cfg.run), "step": step,
                   "attention": run_cfg.model.attention, "attention_options": opts,
                   "settings": run_cfg.train.settings},
           "examples": seen, "queries": queries,
           "accuracy_favor": correct["favor"] / queries,
           "accuracy_exact_rows": correct["exact"] / queries,
           "own_logits_check": check,
           "note": ("per layer, means over queries and heads: l1 = sum |FAVOR row - exact row| "
                    "(0 .. 2), *_max = the row's largest weight, *_answer = its weight on the "
                    "queried key's value token, argmax_agree = both rows' largest weight on "
                    "the same key; accuracy_exact_rows: the model with exact softmax rows of "
                    "its own q and k in place of FAVOR's; own_logits_check: max |logits "
                    "through FAVOR's matrix - the model's own logits|")}
  return Result(out_rows, extra)


def _row_sums(ours, exact, queries):
  """One layer's sums over a batch of FAVOR's rows `ours` against the `exact` ones ([B, H, K, L]
  for K queries): L1 distance, largest weights, weights on the answer, argmax agreement."""
  answer = 2 * jnp.arange(queries) + 1  # query j's key is context pair j
  weight = lambda a: jnp.take_along_axis(a, jnp.broadcast_to(answer[None, None, :, None],
                                                             a.shape[:3] + (1,)), axis=3)
  return {"l1": jnp.sum(jnp.abs(ours - exact)), "favor_max": jnp.sum(jnp.max(ours, -1)),
          "exact_max": jnp.sum(jnp.max(exact, -1)),
          "favor_answer": jnp.sum(weight(ours)), "exact_answer": jnp.sum(weight(exact)),
          "argmax_agree": jnp.sum(jnp.argmax(ours, -1) == jnp.argmax(exact, -1))}


def report(cfg, result):
  """The lines `performer recall-rows` prints."""
  e = result.extra
  lines = [f"{cfg.run}: {e['run']['attention']} {e['run']['attention_options']}, step "
           f"{e['run']['step']}; {e['examples']} examples of {cfg.split}, {e['queries']} queries",
           f"  accuracy with FAVOR's rows {100 * e['accuracy_favor']:.2f}%, with exact softmax "
           f"rows of the same q, k {100 * e['accuracy_exact_rows']:.2f}%"]
  for r in result.rows:
    lines.append(f"  layer {r['layer']}: row L1 {r['l1']:.3f}; largest weight FAVOR "
                 f"{r['favor_max']:.3f} / exact {r['exact_max']:.3f}; on the answer FAVOR "
                 f"{r['favor_answer']:.3f} / exact {r['exact_answer']:.3f}; same argmax "
                 f"{100 * r['argmax_agree']:.1f}%")
  return lines


FLAGS, main = results.command(__name__)  # what every experiment command does
