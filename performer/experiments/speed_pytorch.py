"""performer-pytorch's FastAttention, timed like our attention layer (`performer speed --peers`).

The most used FAVOR+ implementation outside this suite; `speed_worker` builds it. Needs `peers`."""

import importlib.util
import os

NAME = "performer_pytorch"
INSTALL = "pip install -e '.[peers]' (a CPU build of torch is enough; docs/speed.md)"


def missing():
  """None when torch and performer_pytorch import here, else a one-line reason."""
  absent = [m for m in ("torch", "performer_pytorch") if importlib.util.find_spec(m) is None]
  if absent:
    return (f"the performer-pytorch comparison needs {' and '.join(absent)} (the peers extra): "
            f"{INSTALL}")
  return None


def build(spec, shape, num_features):
  """(run, inputs): one call of FastAttention on q, k, v [1, H, L, d] float32.

  Args:
    spec: a speed configuration (direction, mode, L);
      its dtype must be float32.
    shape: the config's `speed_worker.Shape` (its heads and d_model).
    num_features: m.

  Returns:
    run: a callable doing the forward pass (fwd, under torch.no_grad) or the
      forward pass and the gradient of sum(out^2) w.r.t. q, k, v (fwdbwd);
      torch runs eagerly, so there is nothing to compile.
    inputs: the tensors the run reads, for the memory reading.

  Raises:
    ValueError: a dtype other than float32.
  """
  import torch  # pylint: disable=import-outside-toplevel
  from performer_pytorch import FastAttention  # pylint: disable=import-outside-toplevel
  if spec.get("dtype", "float32") != "float32":
    raise ValueError("the performer-pytorch comparison runs float32 only")
  torch.manual_seed(spec.get("seed", 0))
  torch.set_num_threads(len(os.sched_getaffinity(0)))
  heads, d_model = shape.num_heads, shape.d_model
  layer = FastAttention(dim_heads=d_model // heads, nb_features=num_features,
                        causal=spec["direction"] == "causal")
  fwdbwd = spec["mode"] == "fwdbwd"
  q, k, v = (torch.randn(1, heads, spec["L"], d_model // heads, requires_grad=fwdbwd)
             for _ in range(3))

  def run():
    if not fwdbwd:
      with torch.no_grad():
        return layer(q, k, v)
    out = layer(q, k, v)
    return torch.autograd.grad((out ** 2).sum(), (q, k, v))

  return run, [q, k, v]
