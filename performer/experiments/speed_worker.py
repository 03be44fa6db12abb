"""Times one speed configuration in this process: `speed.py` runs each in a fresh one.

A fresh process gives a clean peak-memory reading and lets the parent kill it at the time cap."""

import collections
import contextlib
import ctypes
import fcntl
import glob
import gzip
import json
import os
import re
import resource
import statistics
import sys
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp

from performer.experiments import speed_pytorch
from performer.memory import available_bytes, format_bytes, planned_bytes


class Shape(NamedTuple):
  """A timed model: its size, the batch (sequences per step) and both Performers' m."""
  num_heads: int
  num_layers: int
  d_ff: int
  d_model: int
  batch: int = 1
  num_features: int = 256  # m of both Performers (App. A.3, A.4)


# Regular is Fig. 3's; small is App. E's "Small", where attention dominates the cost;
# recall is the recall study's step (gin/recall/base.gin: Zoology's 2 attention-only layers,
# batch 64, FAVOR+ m = 64), timed at L = 64 with logits at every position.
CONFIGS = {"regular": Shape(8, 6, 2048, 512), "small": Shape(1, 6, 64, 64),
           "recall": Shape(1, 2, 0, 64, batch=64, num_features=64)}
VOCAB_SIZE = 256
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters
NUM_FEATURES = CONFIGS["regular"].num_features
FORM = ("chunk_size", "span", "batch_tokens", "fused")  # FAVOR's form options, where taken
DIRECTIONS = ("bidirectional", "causal")
# Harness-only attention: FAVOR+ causal by a per-token lax.scan prefix sum
# (favor.causal_linear_attention_scan), the reference path of the causal target.
SCAN = "favor_scan"


def measure(spec):
  """Measures `spec` (a dict from `spec`, plus repeats, memory_cap, deadline,
  profile and lock) and returns the row's measured fields.

  With spec["lock"] (a file path, `speed --jobs` > 1) the process builds its
  inputs at once, then holds an exclusive lock on that file while it compiles
  and runs, so that configurations prepared side by side take the device one
  at a time (XLA's GPU compiler runs kernels too, to autotune); the wait is
  added to its deadline and returned as lock_wait_s.

  Returns:
    dict with status "ok" and median_ms, min_ms, max_ms, times_ms, repeats,
    compile_s, peak_bytes, memory_source, xla_bytes; or status "oom" with a
    detail when XLA's buffer plan exceeds spec["memory_cap"] or the runtime
    reports exhausted memory.
  """
  memory = _PeakMemory()
  if spec["attention"] == speed_pytorch.NAME:  # eager torch: nothing to compile or plan
    fn, (run, args) = None, speed_pytorch.build(spec, CONFIGS[spec["config"]], NUM_FEATURES)
  else:
    run, (fn, args) = None, _build(spec)
  with _device_lock(spec.get("lock")) as waited:
    row = _compile_and_time(spec, memory, fn, run, args,
                            deadline=spec.get("deadline") and spec["deadline"] + waited)
  return dict(row, lock_wait_s=round(waited, 2)) if spec.get("lock") else row


@contextlib.contextmanager
def _device_lock(path):
  """Holds an exclusive flock on `path` (None: no lock); yields the seconds waited for it."""
  if path is None:
    yield 0.0
    return
  start = time.perf_counter()
  with open(path, "a") as f:
    fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes, or the process dies
    yield time.perf_counter() - start


def _compile_and_time(spec, memory, fn, run, args, deadline):
  """measure()'s row for the jax function `fn` (compiled here) or the eager `run`."""
  compiled, xla_bytes = None, None
  compile_s = 0.0 if fn is None else None  # None in a row: compiling ran out of memory
  try:  # XLA's GPU compiler allocates too (autotuning runs the kernels): it can run out
    if fn is not None:
      start = time.perf_counter()
      compiled = jax.jit(fn).lower(*args).compile()
      compile_s = time.perf_counter() - start
      xla_bytes = planned_bytes(compiled)
      cap = spec.get("memory_cap") or available_bytes()
      if cap and xla_bytes and xla_bytes > cap:
        return {"status": "oom", "compile_s": compile_s, "xla_bytes": xla_bytes,
                "detail": f"XLA's buffer plan needs {format_bytes(xla_bytes)}, "
                          f"more than the {format_bytes(cap)} memory cap"}
      run = lambda: jax.block_until_ready(compiled(*args))
    peak_bytes, source = memory.measure(run, args)  # also the first warm-up
    run()  # warm-up with the allocator as the timed runs see it
    times = []
    for _ in range(spec["repeats"]):
      if times and deadline and time.time() + max(times) > deadline:
        break  # keep inside the time cap: fewer repeats, recorded as such
      start = time.perf_counter()
      run()
      times.append(time.perf_counter() - start)
    profile = (_profile(compiled, args, spec["profile"])
               if spec.get("profile") and compiled is not None else None)
  except Exception as e:  # pylint: disable=broad-except
    if _is_oom(e):
      return {"status": "oom", "compile_s": compile_s, "xla_bytes": xla_bytes,
              "detail": str(e).splitlines()[0][:300]}
    raise
  ms = sorted(t * 1e3 for t in times)
  return {"status": "ok", "median_ms": statistics.median(ms), "min_ms": ms[0], "max_ms": ms[-1],
          "times_ms": [round(t * 1e3, 3) for t in times], "repeats": len(times),
          "compile_s": compile_s, "peak_bytes": peak_bytes, "memory_source": source,
          "xla_bytes": xla_bytes, **({"profile": profile} if profile else {})}


def _profile(compiled, args, folder, runs=3, top=15):
  """Traces `runs` extra runs (after the timed ones) into folder; returns the top ops.

  The trace (Perfetto JSON and XPlane) opens in ui.perfetto.dev or
  TensorBoard's profile plugin. Returns [[op name, ms per run, calls per
  run, the JAX operation it came from], ...] for the `top` XLA operations by
  total time; loops and calls that contain other operations are left out.
  """
  origin = dict(re.findall(r'%([\w.-]+) = [^\n]*?op_name="([^"]+)"', compiled.as_text()))
  with jax.profiler.trace(folder, create_perfetto_trace=True):
    for _ in range(runs):
      jax.block_until_ready(compiled(*args))
  paths = sorted(glob.glob(os.path.join(folder, "**", "*.trace.json.gz"), recursive=True),
                 key=os.path.getmtime)
  if not paths:
    return None
  with gzip.open(paths[-1]) as f:
    events = json.load(f).get("traceEvents", [])
  total, calls = collections.Counter(), collections.Counter()
  for event in events:
    name = event.get("name", "")
    if event.get("ph") != "X" or name.startswith(("$", "while", "call", "conditional")) or any(
        s in name for s in ("ThunkExecutor", "ThreadPool", "PjRt", "PjitFunction")):
      continue  # Python frames, runtime wrappers and containers of other operations
    total[name] += event.get("dur", 0)
    calls[name] += 1
  return [[name, round(us / runs / 1e3, 3), calls[name] // runs, origin.get(name, "")]
          for name, us in total.most_common(top)]


def _build(spec):
  """(function, arguments) to time for spec."""
  if spec["layer"]:
    return _layer(spec)
  return _model(spec)


def _model(spec):
  from flax import nnx  # pylint: disable=import-outside-toplevel
  from performer.models.config import ModelConfig  # pylint: disable=import-outside-toplevel
  from performer.models.transformer import TransformerLM  # pylint: disable=import-outside-toplevel
  shape, length = CONFIGS[spec["config"]], spec["L"]
  cfg = ModelConfig(vocab_size=VOCAB_SIZE, max_len=length,
                    num_layers=spec.get("num_layers") or shape.num_layers,
                    num_heads=shape.num_heads, d_model=shape.d_model, d_ff=shape.d_ff,
                    dropout=0.0, attention=spec["attention"],
                    attention_options=_options(spec), causal=spec["direction"] == "causal",
                    dtype=spec.get("dtype", "float32"))
  model = TransformerLM(cfg, rngs=nnx.Rngs(spec.get("seed", 0)))
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  tokens = jax.random.randint(jax.random.key(1), (shape.batch, length + 1), 0, VOCAB_SIZE)

  def logits(params, rest, tokens):
    return nnx.merge(graphdef, params, rest)(tokens[:, :-1])

  def loss(params, rest, tokens):  # next-token cross-entropy (a bidirectional model sees its target: fine for timing)
    log_p = jax.nn.log_softmax(logits(params, rest, tokens))
    return -jnp.mean(jnp.take_along_axis(log_p, tokens[:, 1:, None], axis=-1))

  fn = logits if spec["mode"] == "fwd" else jax.value_and_grad(loss)
  return fn, (params, rest, tokens)


def _layer(spec):
  from flax import nnx  # pylint: disable=import-outside-toplevel
  from performer import attention, favor  # pylint: disable=import-outside-toplevel
  shape = CONFIGS[spec["config"]]
  heads, length, causal = shape.num_heads, spec["L"], spec["direction"] == "causal"
  head_dim = shape.d_model // heads
  keys = jax.random.split(jax.random.key(1), 3)
  q, k, v = (jax.random.normal(key, (shape.batch, length, heads, head_dim),
                               spec.get("dtype", "float32")) for key in keys)
  if spec["attention"] == SCAN:
    W = favor.projection(jax.random.key(0), shape.num_features, head_dim, "orthogonal", "chi")
    scale = head_dim ** -0.25
    attend = lambda W, q, k, v: favor.causal_linear_attention_scan(
        favor.feature_map(q * scale, W), favor.feature_map(k * scale, W), v)
    graphdef, state = None, W
  else:
    graphdef, state = nnx.split(attention.make(
        spec["attention"], num_heads=heads, head_dim=head_dim, max_len=length, rngs=nnx.Rngs(0),
        **_options(spec)))
    attend = lambda layer, q, k, v: layer(q, k, v, causal=causal)

  # The layer's state is an argument and nnx's transform carries its updates (running moments),
  # as in a training step.
  build = lambda state: state if graphdef is None else nnx.merge(graphdef, state)
  if spec["mode"] == "fwd":
    return lambda q, k, v, state: attend(build(state), q, k, v), (q, k, v, state)
  loss = lambda layer, q, k, v: jnp.sum(attend(layer, q, k, v) ** 2)
  grad = nnx.value_and_grad(loss, argnums=(1, 2, 3))
  return lambda q, k, v, state: grad(build(state), q, k, v), (q, k, v, state)


def form_options(attention):
  """Which of FORM backend `attention` takes, as its registry entry's options say; none for the
  scan reference and performer-pytorch (not registered)."""
  from performer import attention as backends  # pylint: disable=import-outside-toplevel
  if attention not in backends.names():
    return ()
  return tuple(o for o in FORM if o in backends.info(attention).defaults)


def spec(config, attention, direction, mode, length, *, layer, chunk_size=None, span=None,
         batch_tokens=None, fused=None, dtype="float32", num_layers=None):
  """One configuration: the dict `speed_worker.measure` takes, and a row's keys (num_layers
  only when it overrides the config's: Fig. 18's sweep)."""
  takes = form_options(attention)
  out = {"config": config, "attention": attention, "direction": direction, "mode": mode,
         "L": length, "layer": layer, "chunk_size": chunk_size if "chunk_size" in takes else None,
         "span": span if "span" in takes and direction == "causal" else None,
         "batch_tokens": batch_tokens if "batch_tokens" in takes else None,
         "fused": fused if "fused" in takes else None, "dtype": dtype}
  return out if num_layers is None else dict(out, num_layers=num_layers)


def _options(spec):
  """A configuration's attention options: its m (where the backend has one) and its form."""
  from performer import attention as backends  # pylint: disable=import-outside-toplevel
  if spec["attention"] not in backends.names():
    return {}
  has_m = "num_features" in backends.info(spec["attention"]).defaults
  options = {"num_features": CONFIGS[spec["config"]].num_features} if has_m else {}
  for name in FORM:
    if spec.get(name) is not None:
      options[name] = spec[name]
  return options


class _PeakMemory:
  """Peak bytes of one run: its inputs (parameters included), outputs and temporaries.

  Construct before building the inputs, then `measure(run, args)` once.
  """

  def __init__(self):
    self.device = jax.local_devices()[0]
    stats = self._device_stats()
    self.source = "device" if stats is not None else "process_rss"
    self.base = stats.get("bytes_in_use", 0) if stats is not None else 0

  def measure(self, run, args):
    """Calls run() once; returns (peak bytes, source name)."""
    if self.source == "device":
      run()
      return int(self._device_stats()["peak_bytes_in_use"] - self.base), "device"
    try:
      libc = ctypes.CDLL("libc.so.6")
      # glibc: give every buffer over 64 KiB its own mapping, returned on free, and hand
      # freed heap back, so that the resident set tracks what is in use. Measured: peaks
      # within 1.5% of XLA's buffer plan, against 10-25% low with reused heap.
      libc.mallopt(_M_MMAP_THRESHOLD, 64 << 10)
      libc.malloc_trim(0)
    except (OSError, AttributeError):
      libc = None
    inputs = sum(x.nbytes for x in jax.tree.leaves(args) if hasattr(x, "nbytes"))
    base = _status_bytes("VmRSS") - inputs  # the inputs are resident: count them
    try:  # "5" resets the peak RSS (VmHWM) to the current RSS (Linux >= 4.0)
      with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
      source = "process_rss"
    except OSError:
      source = "rusage"  # getrusage's peak then includes compilation
    try:
      run()
    finally:
      if libc is not None:  # glibc's settled dynamic values: the timed runs reuse heap
        libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)
        libc.mallopt(_M_TRIM_THRESHOLD, 64 << 20)
    peak = (_status_bytes("VmHWM") if source == "process_rss"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    return int(max(peak - base, 0)), source

  def _device_stats(self):
    try:
      stats = self.device.memory_stats()
    except Exception:  # pylint: disable=broad-except
      return None
    return stats if stats and "peak_bytes_in_use" in stats else None


def _status_bytes(field):
  """A memory field of /proc/self/status (e.g. VmRSS, VmHWM) in bytes."""
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1]) * 1024
  raise OSError(f"/proc/self/status has no {field}")


def _is_oom(error):
  text = f"{type(error).__name__}: {error}"
  return any(s in text for s in ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory",
                                 "MemoryError", "bad_alloc"))


def measure_matmul(spec):
  """GFLOP/s of jnp.dot on two N x N float32 matrices (2 N^3 flops), median of repeats."""
  n = spec["n"]
  a, b = (jax.random.normal(key, (n, n), jnp.float32) for key in jax.random.split(jax.random.key(0)))
  dot = jax.jit(jnp.dot).lower(a, b).compile()
  jax.block_until_ready(dot(a, b))
  times = []
  for _ in range(spec["repeats"]):
    start = time.perf_counter()
    jax.block_until_ready(dot(a, b))
    times.append(time.perf_counter() - start)
  median = statistics.median(times)
  return {"status": "ok", "n": n, "median_ms": median * 1e3, "gflops": 2 * n ** 3 / median / 1e9}


def main():
  spec = json.loads(sys.argv[1])
  result = measure_matmul(spec) if spec.get("kind") == "matmul" else measure(spec)
  if spec.get("attention") == "exact_dot_product":  # which of its implementations ran
    from performer.attention import dot_product  # pylint: disable=import-outside-toplevel
    result["implementation"] = dot_product.implementation(spec.get("dtype", "float32"))
  if "span" in form_options(spec.get("attention")):  # FAVOR's backends: the form it ran with
    from performer import favor  # pylint: disable=import-outside-toplevel
    result["form"] = favor.form()._asdict()
  result["device"] = jax.devices()[0].device_kind
  result["backend"] = jax.default_backend()
  result["jax_version"] = jax.__version__
  sys.stdout.write(json.dumps(result) + "\n")
  sys.stdout.flush()
  os._exit(0)  # skip interpreter teardown of XLA's threads: the result is out


if __name__ == "__main__":
  main()
