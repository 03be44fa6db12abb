"""The device mesh, and where each array of a run lives on it.

Axes `data` (the batch) and `model` (heads, MLP units); parameters placed by logical-axis rules."""

import dataclasses

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from performer.errors import UserError

DATA, MODEL = "data", "model"

# Logical names of each parameter's dimensions, by the end of its path. The
# optimizer's moments (opt_state/.../mu/<the same path>) follow their parameter.
PARAM_AXES = (
    ("embed/embedding", ("vocab", "embed")),
    ("pos/embedding", (None, "embed")),
    ("qkv/kernel", ("embed", "heads")),
    ("qkv/bias", ("heads",)),
    ("proj/kernel", ("heads", "embed")),
    ("mlp_in/kernel", ("embed", "mlp")),
    ("mlp_in/bias", ("mlp",)),
    ("mlp_out/kernel", ("mlp", "embed")),
    ("head/kernel", ("embed", "vocab")),
)
LOGICAL_AXES = ("vocab", "embed", "heads", "mlp")
DEFAULT_RULES = (("vocab", None), ("embed", None), ("heads", MODEL), ("mlp", MODEL))
FSDP_RULES = (("vocab", None), ("embed", DATA), ("heads", MODEL), ("mlp", MODEL))


@dataclasses.dataclass(frozen=True)
class MeshConfig:
  """The (data, model) device mesh over all processes, and how parameters lie on it.

  data: devices along the batch axis; -1 takes every device `model` leaves.
  model: devices along attention heads and MLP units (tensor parallel); 1: none.
  rules: (logical axis, mesh axis or None) for each of LOGICAL_AXES, e.g.
    FSDP_RULES (gin/extras/fsdp.gin).

  Raises:
    ValueError (when built): a size below 1 (data may be -1), or rules that
      miss a logical axis or name an unknown one or an unknown mesh axis.
  """
  data: int = -1
  model: int = 1
  rules: tuple = DEFAULT_RULES

  def __post_init__(self):
    if not (isinstance(self.data, int) and (self.data >= 1 or self.data == -1)):
      raise ValueError(f"MeshConfig.data must be an integer >= 1, or -1 (all devices), got "
                       f"{self.data!r}")
    if not (isinstance(self.model, int) and self.model >= 1):
      raise ValueError(f"MeshConfig.model must be an integer >= 1, got {self.model!r}")
    rules = tuple(tuple(rule) for rule in self.rules)  # gin gives lists
    object.__setattr__(self, "rules", rules)
    names = [rule[0] for rule in rules]
    if sorted(names) != sorted(LOGICAL_AXES) or any(len(rule) != 2 for rule in rules):
      raise ValueError(f"MeshConfig.rules must map each of {', '.join(LOGICAL_AXES)} once, as "
                       f"(name, mesh axis or None) pairs; got {rules!r}")
    bad = [axis for _, axis in rules if axis not in (None, DATA, MODEL)]
    if bad:
      raise ValueError(f"MeshConfig.rules: unknown mesh axis {bad[0]!r} (the axes are "
                       f"{DATA!r} and {MODEL!r})")


def make_mesh(cfg, devices=None):
  """The Mesh of MeshConfig cfg over `devices` (default: all devices of all processes).

  Raises:
    UserError: data x model is not the number of devices.
  """
  devices = jax.devices() if devices is None else devices
  data = cfg.data if cfg.data != -1 else len(devices) // cfg.model
  if data < 1 or data * cfg.model != len(devices):
    raise UserError(f"MeshConfig: data {cfg.data} x model {cfg.model} does not fit the "
                    f"{len(devices)} device(s) (data = -1 takes all that model leaves)")
  return jax.make_mesh((data, cfg.model), (DATA, MODEL), devices=devices,
                       axis_types=(AxisType.Auto, AxisType.Auto))


def batch_sharding(mesh):
  """Batches: the leading (batch) dimension split over `data`, replicated over `model`."""
  return NamedSharding(mesh, PartitionSpec(DATA))


def replicated(mesh):
  return NamedSharding(mesh, PartitionSpec())


def state_shardings(state, mesh, rules):
  """The NamedSharding of every array of an nnx state (model and optimizer), by PARAM_AXES.

  Arrays whose path matches no entry (LayerNorms, biases of d_model, random
  features, step counts, RNG keys) are replicated.
  """
  to_mesh = dict(rules)

  def sharding(path, x):
    name = "/".join(str(_key(k)) for k in path if _key(k) != "value")
    for suffix, axes in PARAM_AXES:
      if (name == suffix or name.endswith("/" + suffix)) and len(axes) == np.ndim(x):
        spec = [to_mesh[a] if a else None for a in axes]
        spec = [axis if axis and dim % mesh.shape[axis] == 0 else None
                for axis, dim in zip(spec, np.shape(x))]
        return NamedSharding(mesh, PartitionSpec(*spec))
    return replicated(mesh)
  return jax.tree_util.tree_map_with_path(sharding, state)


def _key(entry):
  for field in ("key", "idx", "name"):
    if hasattr(entry, field):
      return getattr(entry, field)
  return entry


def place(tree, shardings):
  """Arrays that every process holds alike (e.g. a model built from one seed) -> global arrays.

  Each process copies in only the shards of its own devices, so this works
  across hosts, where a plain device_put of a host array cannot.
  """
  def put(x, s):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):  # typed keys: place their data
      return jax.random.wrap_key_data(put(jax.random.key_data(x), s),
                                      impl=jax.random.key_impl(x))
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, s, lambda index: host[index])
  return jax.tree.map(put, tree, shardings)


def global_batch(local, mesh):
  """A process's rows of a batch (dict of numpy [B / P, ...]) -> global arrays [B, ...] on mesh."""
  sharding = batch_sharding(mesh)
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local.items()}

