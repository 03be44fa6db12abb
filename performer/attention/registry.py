"""Attention backends by name: every one is called as attend(q, k, v, *, mask=None, causal=False).

q, k, v are float [B, L, H, d]; mask is [B, L] bool (True = real token), both checked first."""

import dataclasses
import functools
import inspect

from flax import nnx

from performer.favor import blocks

_BACKENDS = {}
_INFO = {}
COMMON = ("num_heads", "head_dim", "max_len", "rngs", "layer")  # given to those that take them


class RandomFeatures(nnx.Variable):
  """A backend's random state (a Performer's W, Reformer's rotations): not trained, checkpointed."""


@dataclasses.dataclass(frozen=True)
class BackendInfo:
  """What the suite knows of a registered backend.

  Attributes:
    name: the registry name (ModelConfig.attention).
    label: the model's name in the paper's tables and legends (Fig. 6).
    colour: a matplotlib colour, the backend's in every figure.
    causal: whether it can be (U): attend with causal=True.
    decoding: whether it has an incremental decoder (decode_init/decode_step).
    random_state: whether it has random state redrawn during training.
    defaults: its options and their values when attention_options omits them
      (a Performer's kernel resolved: 'positive' for performer_softmax).
    state_size: (options, seq_len, head_dim, value_dim) -> the floats one
      head keeps per sequence when decoding, with queries and keys of
      head_dim and values of value_dim (M x d_v for linear attention's
      K'^T V, L x (d_k + d_v) for a KV cache), from the class's
      `state_size`; None where undeclared.
  """
  name: str
  label: str
  colour: str
  causal: bool
  decoding: bool
  random_state: bool
  defaults: dict
  state_size: object = None


def kv_cache_size(options, seq_len, head_dim, value_dim):
  """A KV cache's floats per head: L x (d_k + d_v) (the `state_size` of backends that keep every
  key and value)."""
  del options
  return seq_len * (head_dim + value_dim)


def register(name, *, label, colour, causal=True):
  """Class decorator: makes the backend available as `name`, shown as `label` in `colour`.

  A class attribute `default_<option>` resolves an option whose signature
  default is None (PerformerAttention's kernel). The class's __call__ is
  wrapped to check its inputs first (`_checked`).
  """
  def wrap(cls):
    if name in _BACKENDS:
      raise ValueError(f"attention backend {name!r} is registered twice")
    _BACKENDS[name] = cls
    cls.__call__ = _checked(cls.__call__)
    params = inspect.signature(cls.__init__).parameters.values()
    defaults = {p.name: getattr(cls, f"default_{p.name}", p.default) for p in params
                if p.name not in ("self", *COMMON) and p.default is not inspect.Parameter.empty}
    _INFO[name] = BackendInfo(name=name, label=label, colour=colour, causal=causal,
                              decoding=callable(getattr(cls, "decode_step", None)),
                              random_state=callable(getattr(cls, "redraw", None)),
                              defaults=defaults, state_size=getattr(cls, "state_size", None))
    return cls
  return wrap


def _checked(call):
  """A backend's __call__ that first checks q, k, v (float [B, L, H, d] that fit together, L >= 1)
  and mask (None or [B, Lk] bool): one place for every backend; static, so free under jit."""
  if getattr(call, "checks_inputs", False):  # inherited from a registered class: checked once
    return call

  @functools.wraps(call)
  def checked(self, q, k, v, *, mask=None, causal=False):
    blocks.check_inputs(q, k, v, mask, causal)
    return call(self, q, k, v, mask=mask, causal=causal)

  checked.checks_inputs = True
  return checked


def info(name):
  """The BackendInfo of backend `name`.

  Raises:
    ValueError: an unknown name (listing the known ones).
  """
  if name not in _INFO:
    raise ValueError(f"unknown attention {name!r}; choose from {', '.join(names())}")
  return _INFO[name]


def by_label(label):
  """The name of the backend shown as `label`.

  Raises:
    ValueError: no backend has that label.
  """
  found = [i.name for i in _INFO.values() if i.label == label]
  if not found:
    raise ValueError(f"no attention backend is labelled {label!r}")
  return found[0]


def colour(name, default="0.5"):
  """Backend `name`'s colour in figures; `default` for a name that is not a backend."""
  return _INFO[name].colour if name in _INFO else default


def options(name, attention_options):
  """A backend's options as a run uses them: its defaults overlaid with `attention_options`."""
  return {**info(name).defaults, **(attention_options or {})}


def names():
  """Sorted names of the registered backends."""
  return sorted(_BACKENDS)


def make(name, *, num_heads, head_dim, max_len, rngs, layer=0, **options):
  """Builds backend `name` for one attention layer.

  Args:
    name: a registered name (see `names()`).
    num_heads, head_dim: H and d of the q, k, v it will get.
    max_len: the longest sequence it must handle (Linformer's projections).
    rngs: `flax.nnx.Rngs` for parameters.
    layer: index of the layer (seeds a Performer's random features).
    **options: backend-specific settings (e.g. num_features).

  Returns:
    The layer, called as layer(q, k, v, *, mask=None, causal=False); the
    call raises ValueError for q, k, v not float [B, L, H, d] arrays that
    fit together with L >= 1, or a mask not [B, Lk] bool.

  Raises:
    ValueError: an unknown name (listing the known ones) or option.
  """
  if name not in _BACKENDS:
    raise ValueError(f"unknown attention {name!r}; choose from {', '.join(names())}")
  cls = _BACKENDS[name]
  named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
  accepted = {p.name for p in inspect.signature(cls.__init__).parameters.values()
              if p.kind in named} - {"self"}
  unknown = set(options) - accepted
  if unknown:
    raise ValueError(f"attention {name!r} has no option {', '.join(sorted(unknown))}; its options: "
                     f"{', '.join(sorted(accepted - set(COMMON))) or 'none'}")
  common = dict(num_heads=num_heads, head_dim=head_dim, max_len=max_len, rngs=rngs, layer=layer)
  return cls(**{k: v for k, v in common.items() if k in accepted}, **options)


def redraw(model, step):
  """Calls `redraw(step)` on every attention layer in `model` that has random state.

  Each layer draws from (its seed, its layer index, step) only, so every
  device, retrace and resumed run gets the same values; evaluation never
  calls this and keeps the last training step's draw.
  """
  for _, module in nnx.iter_graph(model):
    if callable(getattr(type(module), "redraw", None)):  # the class: nnx objects proxy attributes
      module.redraw(step)
