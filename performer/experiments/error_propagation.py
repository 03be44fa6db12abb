"""Error propagation: a Transformer against its own weights with FAVOR+ (App. D.1, Fig. 14).

Relative errors per block of the stream, the attention alone, and the output distribution."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import tqdm
from flax import nnx

from performer import favor
from performer.attention.registry import RandomFeatures
from performer.data import pipeline
from performer.errors import UserError
from performer.train import trained as trained_runs
from performer.experiments import results
from performer.experiments.results import Result
from performer.flags import flag
from performer.models.transformer import TransformerLM
from performer.train import steps

SETTINGS = ("trained", "init")
# What replaces exact attention; `exact` is the control (every error exactly 0).
ATTENTIONS = ("performer_softmax", "exact")
SPLITS = ("valid", "test", "ood")


NAME = "error_propagation"
SUMMARY = "a Transformer vs its own weights with FAVOR+, per layer (Fig. 14)"
DESCRIPTION = ("Runs a trained exact-attention workdir and the same parameters with FAVOR+ "
               "attention (positive random features) on the first --sequences sequences of a "
               "split, dropout off, and writes per layer l the relative error "
               "||h_FAVOR - h_exact||_F / ||h_exact||_F over the real positions of: the residual "
               "stream after block l, the output distribution of the model cut after block l, and "
               "block l's attention alone on the Transformer's own input; mean and spread over "
               "--draws feature draws per m. Setting init does the same with fresh parameters of "
               "the run's config and --init-layers blocks.")
OUT = "runs/error_propagation.json"
FIGURE = "error-propagation"


@dataclasses.dataclass(frozen=True)
class ErrorPropagationConfig:
  """What to measure. Defaults: the paper's FAVOR+ (positive, orthogonal), m = 16..256."""
  run: str = flag(help="a `performer train` workdir of an exact-attention model with a "
                       "checkpoint")
  split: str = flag("test", "valid, test or ood")
  sequences: int = flag(64, "the first this many sequences of the split")
  batch_size: int = flag(16, "sequences per pass")
  features: tuple[int, ...] = flag((16, 32, 64, 128, 256), "comma-separated values of m")
  draws: int = flag(5, "random feature draws per m; draw j uses attention seed --seed + j")
  init_layers: int = flag(6, "blocks of the model at initialisation")
  settings: tuple[str, ...] = flag(SETTINGS, "comma-separated: trained (the run's weights), "
                                             "init (fresh parameters)")
  attention: str = flag("performer_softmax", "performer_softmax, or exact: the control, every "
                                             "error 0")
  projection: str = flag("orthogonal", "random features: orthogonal, iid, hadamard or givens")
  seed: int = flag(0, "seed of the init parameters, the (B) masks and draw 0")

  def __post_init__(self):
    # Messages name the `performer error-propagation` flag of each field.
    if not self.run:
      raise UserError("--run is required: a `performer train` workdir")
    if self.split not in SPLITS:
      raise UserError(f"--split {self.split!r}: choose from {', '.join(SPLITS)}")
    for name, value in (("--sequences", self.sequences), ("--batch-size", self.batch_size),
                        ("--draws", self.draws), ("--init-layers", self.init_layers)):
      if not isinstance(value, int) or value < 1:
        raise UserError(f"{name} must be an integer >= 1, got {value!r}")
    if not 0 <= self.seed or self.seed + self.draws >= 2 ** 31:
      raise UserError(f"--seed must be >= 0 with --seed + --draws < 2^31, got {self.seed}")
    if not self.features or min(self.features) < 1:
      raise UserError(f"--features must be counts m >= 1, got "
                      f"{','.join(map(str, self.features)) or 'nothing'}")
    for name, values in (("--features", self.features), ("--settings", self.settings)):
      if len(set(values)) != len(values):
        raise UserError(f"{name} values must not repeat")
    bad = [s for s in self.settings if s not in SETTINGS] or ([] if self.settings else ["(none)"])
    if bad:
      raise UserError(f"--settings {bad[0]!r}: choose from {', '.join(SETTINGS)}")
    if self.attention not in ATTENTIONS:
      raise UserError(f"--attention {self.attention!r}: choose from {', '.join(ATTENTIONS)} "
                      "(exact is the control)")
    if self.projection not in favor.KINDS:
      raise UserError(f"--projection {self.projection!r}: choose from {', '.join(favor.KINDS)}")


CONFIG = ErrorPropagationConfig


def with_attention(model, attention, options):
  """A new model with `model`'s parameters and attention `attention` (dropout off).

  Args:
    model: a `TransformerLM`.
    attention: a registered attention name.
    options: its `ModelConfig.attention_options` (a Performer draws W from
      its `seed` and the layer index, as at training step 0).

  Returns:
    A `TransformerLM` in eval mode whose every `nnx.Param` equals `model`'s.

  Raises:
    UserError: an option the attention does not take (e.g. hadamard
      projections with a head dimension that is not a power of two).
  """
  cfg = dataclasses.replace(model.cfg, attention=attention, attention_options=dict(options))
  try:
    other = TransformerLM(cfg, rngs=nnx.Rngs(0))  # parameters overwritten just below
  except ValueError as e:
    raise UserError(f"attention {attention} {options}: {str(e).splitlines()[0]}") from None
  nnx.update(other, nnx.state(model, nnx.Param))
  other.eval()
  _commit(other)
  return other


def _committed(tree):
  """tree's arrays placed on the default device: jit compiles again for an array whose
  placement differs (uncommitted, as fresh arrays are, or committed, as jit's outputs are)."""
  return jax.device_put(tree, jax.devices()[0])


def _commit(model):
  nnx.update(model, _committed(nnx.state(model)))


def _models(cfg, run_cfg, trained):
  """{setting: the exact model} for the settings of cfg."""
  models = {}
  if "trained" in cfg.settings:
    models["trained"] = trained
  if "init" in cfg.settings:
    init_cfg = dataclasses.replace(run_cfg.model, num_layers=cfg.init_layers)
    models["init"] = TransformerLM(init_cfg, rngs=nnx.Rngs(params=cfg.seed, dropout=cfg.seed))
    models["init"].eval()
  for model in models.values():
    _commit(model)
  return models


_model_inputs = jax.jit(steps.model_inputs, static_argnames=("vocab", "causal", "mlm"))


def _batches(cfg, run_cfg):
  """The first cfg.sequences sequences of the split: ([(inputs, mask, weights)], count).

  Each array is [B, L]; count is how many sequences there are (fewer than
  cfg.sequences in a smaller split).

  (B) inputs are MLM-corrupted as in evaluation (keyed by example id and
  cfg.seed). weights is 1.0 on real positions (not pad, not past
  cfg.sequences), else 0.
  """
  data = dataclasses.replace(run_cfg.data, batch_size=cfg.batch_size)
  causal = run_cfg.model.causal
  out, count = [], 0
  for batch in pipeline.batches(data, cfg.split, causal=causal).eval_batches():
    keep = (batch["ids"] >= 0) & (batch["ids"] < cfg.sequences)
    if not keep.any():
      break
    inputs, mask, _, _ = _model_inputs(batch, run_cfg.vocab, jax.random.key(cfg.seed), causal=causal,
                                       mlm=data.mlm)
    out.append(_committed((inputs, mask, (mask & keep[:, None]).astype(jnp.float32))))
    count += int(keep.sum())
  return out, count


# One program per model structure serves the exact model and the approximating
# one alike, so the exact-vs-exact control gives bitwise equal outputs (errors 0).
@nnx.jit
def _forward(model, inputs, mask, block_inputs):
  """One pass of `model` over a batch.

  Args:
    inputs, mask: [B, L] token ids and real-token mask.
    block_inputs: num_layers arrays [B, L, d_model], the residual stream that
      each block's attention is also run on alone.

  Returns:
    (stream: num_layers + 1 arrays [B, L, d_model], before the first block
    and after each; local: each block's attention output [B, L, H, d] on its
    block_inputs; probs: num_layers arrays [B, L, vocab] float32, the output
    distribution of the model cut after each block, ln and head applied).
  """
  states = model.hidden_states(inputs, mask)
  probs = [jax.nn.softmax(model.logits(h), axis=-1)
           for h in states[1:]]
  local = [block.attn(*block.heads(block.attention_input(x)), mask=mask, causal=model.cfg.causal)
           for block, x in zip(model.blocks, block_inputs)]
  return states, local, probs


def _reference(model, inputs, mask):
  """`_forward` of the exact model with each block's attention on its own input."""
  zeros = _committed([jnp.zeros((*inputs.shape, model.cfg.d_model))] * model.cfg.num_layers)
  states = _forward(model, inputs, mask, zeros)[0]
  return _forward(model, inputs, mask, states[:-1])


@jax.jit
def _sums(outputs, reference, weights):
  """Per quantity and layer: squared differences and the reference's squared norms,
  summed over the weighted positions; top-1 agreements and the weight total."""
  def total(x):  # x: [B, L, ...] -> weighted sum of squares
    return jnp.sum(weights * jnp.sum(jnp.square(x).reshape(*weights.shape, -1), axis=-1))

  (states, local, probs), (ref_states, ref_local, ref_probs) = outputs, reference
  sums = {}
  for name, mine, ref in (("hidden", states[1:], ref_states[1:]), ("attention", local, ref_local),
                          ("output", probs, ref_probs)):
    sums[name] = jnp.stack([total(a.astype(jnp.float32) - b.astype(jnp.float32))
                            for a, b in zip(mine, ref)])
    sums[name + "_norm"] = jnp.stack([total(b.astype(jnp.float32)) for b in ref])
  sums["top1"] = jnp.stack([jnp.sum(weights * (jnp.argmax(a, -1) == jnp.argmax(b, -1)))
                            for a, b in zip(probs, ref_probs)])
  sums["tokens"] = jnp.sum(weights)
  return sums


QUANTITIES = ("hidden", "attention", "output")


def _options(cfg, m, draw):
  if cfg.attention == "exact":
    return {}
  return {"num_features": m, "seed": cfg.seed + draw, "projection": cfg.projection}


def _draws(cfg, exact, m):
  """Yields (draw, model): exact's parameters, the attention of draw 0, 1, ...

  Every draw runs in draw 0's model object with its W replaced: its static
  attributes (the seed) then stay those of draw 0, and the jitted pass is
  compiled once per m instead of once per draw. The attention computes with
  W alone.
  """
  model = with_attention(exact, cfg.attention, _options(cfg, m, 0))
  for draw in range(cfg.draws):
    if draw:
      other = with_attention(exact, cfg.attention, _options(cfg, m, draw))
      nnx.update(model, _committed(nnx.state(other, RandomFeatures)))
    yield draw, model


def _measure(model, batches, references):
  """Sums of `_sums` over all batches (float64), for one approximating model."""
  totals = {}
  for (inputs, mask, weights), reference in zip(batches, references):
    outputs = _forward(model, inputs, mask, reference[0][:-1])
    for key, value in jax.device_get(_sums(outputs, reference, weights)).items():
      totals[key] = totals.get(key, 0.0) + np.asarray(value, np.float64)
  return totals


def _stats(values):
  values = np.asarray(values, np.float64)
  return {"error_mean": float(values.mean()), "error_std": float(values.std()),
          "error_min": float(values.min()), "error_max": float(values.max()),
          "errors": [float(v) for v in values]}


def _rows(common, draws):
  """Rows of one (setting, m) from the per-draw totals of `_measure`."""
  rows = []
  first = draws[0]
  for quantity in QUANTITIES:
    for layer in range(common["num_layers"]):
      row = {**common, "quantity": quantity, "layer": layer + 1,
             **_stats([np.sqrt(d[quantity][layer] / d[quantity + "_norm"][layer]) for d in draws]),
             # sqrt(mean over positions of |x|^2) of the exact model: error * this = absolute error
             "reference_rms_norm": float(np.sqrt(first[quantity + "_norm"][layer]
                                                 / first["tokens"]))}
      if quantity == "output":
        top1 = [d["top1"][layer] / d["tokens"] for d in draws]
        row.update(top1_agreement_mean=float(np.mean(top1)), top1_agreement_min=float(np.min(top1)),
                   top1_agreements=[float(t) for t in top1])
      rows.append(row)
  return rows


def run(cfg, *, progress=True):
  """Runs the measurement. Returns a Result with one row per (setting, m, quantity, layer).

  quantity: `hidden` (residual stream after block `layer`, 1-based);
  `attention` (block `layer`'s attention alone, on the exact model's input to
  it); `output` (output distribution of the model cut after block `layer`:
  at layer = num_layers the model's own output; below it, for `init`, that
  of a random model of `layer` blocks, for `trained` a probe of the
  intermediate stream), with top1_agreement_mean, _min and top1_agreements
  (one per draw). Each row has error_mean, _std, _min, _max over the draws,
  `errors` (one per draw) and reference_rms_norm (the exact model's
  sqrt(mean |x|^2) over the positions: error times it is the RMS error).

  Raises:
    UserError: a run that is not a trained exact-attention workdir, no such
      split, or non-finite outputs.
  """
  run_cfg, trained, _ = trained_runs.load(cfg.run)
  if run_cfg.model.attention != "exact" or run_cfg.model.reversible:
    raise UserError(f"{cfg.run}: a model with attention {run_cfg.model.attention!r}"
                    f"{' (reversible)' if run_cfg.model.reversible else ''}; error propagation "
                    "compares a Transformer with FAVOR on its weights: give an exact-attention run")
  head_dim = run_cfg.model.head_dim
  if cfg.projection == "hadamard" and head_dim & (head_dim - 1):
    raise UserError(f"--projection hadamard needs a power-of-two head dimension, the run has "
                    f"{head_dim}")
  models = _models(cfg, run_cfg, trained)
  batches, sequences = _batches(cfg, run_cfg)
  rows = []
  with tqdm.tqdm(total=len(models) * len(cfg.features) * cfg.draws, desc="error-propagation",
                 unit="draw", disable=not progress) as bar:
    for setting, exact in models.items():
      references = [_reference(exact, inputs, mask) for inputs, mask, _ in batches]
      for m in cfg.features:
        bar.set_postfix(setting=setting, m=m, refresh=False)
        draws = []
        for draw, model in _draws(cfg, exact, m):
          draws.append(_measure(model, batches, references))
          if not all(np.isfinite(v).all() for v in draws[-1].values()):
            raise UserError(f"{cfg.attention} with m={m}, draw {draw} ({setting}) gave "
                            f"non-finite outputs: a query or key past favor.MAX_NORM = "
                            f"{favor.MAX_NORM:g} (see favor_attention)")
          bar.update()
        common = {"setting": setting, "num_layers": exact.cfg.num_layers, "m": m,
                  "attention": cfg.attention, "projection": cfg.projection,
                  "head_dim": head_dim, "causal": exact.cfg.causal, "draws": cfg.draws,
                  "sequences": sequences, "tokens": int(draws[0]["tokens"]), "split": cfg.split}
        rows.extend(_rows(common, draws))
  return Result(rows)


def report(cfg, result):
  """The lines `performer error-propagation` prints: per setting, layer x m, mean error."""
  rows, lines = result.rows, []
  for setting in dict.fromkeys(r["setting"] for r in rows):
    mine = [r for r in rows if r["setting"] == setting]
    ms = sorted({r["m"] for r in mine})
    first = mine[0]
    lines.append(f"{setting}: {first['num_layers']} layers, {first['attention']} "
                 f"({first['projection']}), mean of {first['draws']} draws over "
                 f"{first['sequences']} sequences ({first['tokens']:,} positions)")
    header = "".join(f"{'m=' + str(m):>9}" for m in ms)
    by = {(r["quantity"], r["layer"], r["m"]): r for r in mine}
    layers = range(1, first["num_layers"] + 1)
    for quantity, title in (("hidden", "stream h_l"), ("output", "output p_l")):
      lines.append(f"  {title:<12}" + header)
      for layer in layers:
        lines.append(f"  {layer:<12}" + "".join(f"{by[quantity, layer, m]['error_mean']:>9.3g}"
                                               for m in ms))
    last = first["num_layers"]
    lines.append(f"  {'top-1 same':<12}" + "".join(
        f"{by['output', last, m]['top1_agreement_mean']:>9.3f}" for m in ms))
  return lines


FLAGS, main = results.command(__name__)  # what every experiment command does
