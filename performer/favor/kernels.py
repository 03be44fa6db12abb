"""The feature kernels by name, and what the suite knows of each: one entry per kernel.

features.py holds the maths; figures, experiments and tests read labels, colours and M here."""

import dataclasses

FAMILIES = ("softmax", "data_dependent", "generalized")


@dataclasses.dataclass(frozen=True)
class Kernel:
  """A feature kernel's facts.

  Attributes:
    name: what `kernel=` takes (favor.feature_parts, PerformerAttention).
    family: "softmax" (estimates exp(x.y), the paper's, Lemma 1 and Sec. 2.3),
      "data_dependent" (estimates exp(x.y) with parameters from q and k:
      favor/exponential.py) or "generalized" (Sec. 2.2: phi = f(W x) or f(x)).
    label: its name in legends and tables.
    colour: a matplotlib colour, the kernel's in every figure.
    width: feature rows per row of W, so M = width * m (2: sin and cos, or +-w.x).
    random: whether it can use a projection W (taylor cannot).
    exponential: whether its features have logs, hence a norm limit (numerics.MAX_NORM).
  """
  name: str
  family: str
  label: str
  colour: str
  width: int = 1
  random: bool = True
  exponential: bool = False

  def num_features(self, m, d, *, deterministic=False):
    """M, the features per token: width * m with W, d without (f(x)), 1 + d + d^2 for taylor.

    Args:
      m: rows of W (num_features); ignored without W.
      d: the dimension of the queries and keys the map reads.
      deterministic: the map reads x itself, not W x.
    """
    if self.name == "taylor":
      return 1 + d + d * d
    return d if deterministic else self.width * m


_ALL = (
    Kernel("positive", "softmax", "positive (FAVOR+)", "C0", exponential=True),
    Kernel("hyperbolic", "softmax", "hyperbolic (SMhyp+)", "C1", width=2, exponential=True),
    Kernel("trig", "softmax", "trig (SMtrig)", "C3", width=2, exponential=True),
    Kernel("gerf", "data_dependent", "gerf (FAVOR++)", "C9", exponential=True),
    Kernel("derf", "data_dependent", "derf (FAVOR#)", "C4", exponential=True),
    Kernel("saderf", "data_dependent", "saderf (FAVOR#)", "C6", exponential=True),
    Kernel("relu", "generalized", "relu", "C2"),
    Kernel("elu_plus_one", "generalized", "elu+1 (linear)", "teal"),
    Kernel("exp", "generalized", "exp (exponential)", "C8", exponential=True),
    Kernel("identity", "generalized", "identity f(x) = x", "navy"),
    Kernel("sigmoid", "generalized", "sigmoid", "C5"),
    Kernel("abs", "generalized", "abs (absolute)", "C7"),
    Kernel("gelu", "generalized", "gelu", "magenta"),
    Kernel("tanh", "generalized", "tanh", "slateblue"),
    Kernel("taylor", "generalized", "taylor (Based)", "crimson", random=False),
)
KERNELS_BY_NAME = {k.name: k for k in _ALL}
KERNELS = tuple(KERNELS_BY_NAME)
SOFTMAX_KERNELS = tuple(k.name for k in _ALL if k.family == "softmax")
DATA_DEPENDENT_KERNELS = tuple(k.name for k in _ALL if k.family == "data_dependent")
GENERALIZED_KERNELS = tuple(k.name for k in _ALL if k.family == "generalized")
DETERMINISTIC_ONLY = tuple(k.name for k in _ALL if not k.random)
EXPONENTIAL_KERNELS = tuple(k.name for k in _ALL if k.exponential)


def kernel(name):
  """The Kernel called `name`.

  Raises:
    ValueError: an unknown name (listing the known ones).
  """
  try:
    return KERNELS_BY_NAME[name]
  except KeyError:
    raise ValueError(f"unknown kernel {name!r}; choose from {', '.join(KERNELS)}") from None
