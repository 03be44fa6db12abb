"""Speed and memory of whole models and attention layers against L (paper Fig. 3).

Each configuration runs in a fresh `speed_worker` process; a series stops at its first failure."""

import concurrent.futures
import dataclasses
import itertools
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time

import tqdm

from performer import attention as backends
from performer import memory
from performer.errors import UserError
from performer.experiments import speed_pytorch
from performer.experiments import results
from performer.experiments.results import Result
from performer.experiments.speed_targets import (EXACT, format_ratios, peer_ratios, ratios,
                                                 targets_plan)
from performer.experiments.speed_worker import (CONFIGS, DIRECTIONS, FORM, SCAN, form_options,
                                                spec)
from performer.flags import flag, split
from performer.models.config import DTYPES

# Exact attention as a user would run it: naive (Fig. 3's), blockwise (O(L) memory) and JAX's own.
ATTENTIONS = EXACT + ("performer_softmax", "performer_relu", "identity")  # the default: Fig. 3's
MODES = ("fwd", "fwdbwd")
SWEEP = tuple(2 ** p for p in range(9, 21))  # 512 ... 2^20, until OOM or the time cap
MATMUL_N = 4096  # jnp.dot of two N x N float32 matrices: the machine's GFLOP/s


NAME = "speed"
SUMMARY = "time and memory of models and attention layers against L (Fig. 3)"
DESCRIPTION = ("Times the forward pass (fwd) and the forward pass plus the gradient w.r.t. all "
               "parameters (fwdbwd) of whole models (batch 1, vocabulary 256), or of the "
               "attention layer alone (--layer-only), for L = 512, 1024, ... until a "
               "configuration runs out of memory or passes --time-cap. Each configuration runs "
               "in a fresh process: compiled ahead of time (compile time reported apart), one "
               "warm-up run (which also gives the peak memory), then --repeats timed runs. Writes "
               "JSON rows and prints the target ratios that the run's rows allow (crossovers against "
               "the fastest exact attention); --targets runs exactly the measurements they need. "
               "--peers adds performer-pytorch's FAVOR+ layer beside ours (the peers extra).")
OUT = "runs/speed.json"  # scripts/speed.sh writes results/
FIGURE = "speed"


def _on_off(word):
  """--fused's words: on (True), off (False); ValueError for another."""
  if word not in ("on", "off"):
    raise ValueError(word)
  return word == "on"


def figure_of(cfg):
  """A --layers sweep is drawn against depth (Figs. 18-19), any other against L."""
  return "speed-layers" if cfg.num_layers != (None,) else FIGURE


@dataclasses.dataclass(frozen=True)
class SpeedConfig:
  """What to measure; the product of the lists, each series over seq_lens.

  memory_cap: bytes; a configuration whose XLA buffer plan needs more is
    "oom" without running (default: the device's limit, or 90% of the
    memory available when the worker starts).
  chunk_sizes: block lengths of the Performer attentions (None: the
    library's default for the platform, favor.form()).
  spans: causal Performer spans, tokens computed at once per loop step
    (None: the platform's default).
  batch_tokens: the Performer's groups of short sequences, tokens per loop
    step over the batch (None: the platform's; 0: the whole batch at once).
  profile: a folder; each configuration then traces 3 extra runs into a
    subfolder of it and its row gets the top XLA operations by time.

  Raises:
    UserError: an unknown name (the message lists the valid ones), a number
      out of range, --chunk-sizes without a Performer, or a selection that
      measures nothing.
  """
  configs: tuple[str, ...] = flag(
      ("regular",), "regular = (heads, layers, d_ff, d) (8, 6, 2048, 512), small = (1, 6, 64, 64) "
      "where attention dominates, recall = (1, 2, 0, 64) at batch 64 and m = 64 (the recall "
      "study's step); comma-separated", name="--config")
  attentions: tuple[str, ...] = flag(
      ATTENTIONS, "comma-separated registered backends, e.g. performer_favorpp (identity is the "
      "paper's OPT bound); with "
      f"--layer-only also {SCAN}, causal FAVOR+ by a per-token lax.scan (the reference path)",
      name="--attention")
  directions: tuple[str, ...] = flag(DIRECTIONS, "bidirectional (B) and/or causal (U)",
                                     name="--direction")
  modes: tuple[str, ...] = flag(MODES, "fwd and/or fwdbwd", name="--mode")
  seq_lens: tuple[int, ...] = flag(SWEEP, "comma-separated L", shown="512, 1024, ... 2^20, each "
                                   "series stopping at its first out-of-memory or time-cap")
  layer: bool = flag(False, "time the attention layer alone on q, k, v [1, L, heads, d/heads]",
                     name="--layer-only")
  num_layers: tuple[int | None, ...] = flag(
      (None,), "model depths to compare (Fig. 18: time and memory against the number of "
      "layers at a fixed L)", parse=lambda text: split(text, int), name="--layers",
      shown="the config's (regular and small: 6)")
  repeats: int = flag(5, "timed runs after the warm-up")
  time_cap: float = flag(120.0, "seconds one configuration may take, compile included, before "
                                "it is recorded as a timeout")
  deadline: float | None = flag(
      None, "seconds after the start from which no new configuration starts; those left are "
      "recorded as skipped (a whole sweep inside a fixed time, e.g. scripts/gpu_check.sh)",
      metavar="SECONDS")
  memory_cap: int | None = flag(
      None, "record configurations whose XLA buffer plan exceeds this size (e.g. 16G) as out of "
      "memory without running them", parse=memory.parse_bytes,
      shown="the device's limit, or 90% of available RAM")
  chunk_sizes: tuple[int | None, ...] = flag(
      (None,), "block lengths of the Performer attentions to compare",
      parse=lambda text: split(text, int),
      shown="the platform's (favor.form(): causal chunk, bidirectional block)")
  spans: tuple[int | None, ...] = flag(
      (None,), "causal Performer spans (tokens per loop step, a multiple of the chunk; >= L: "
      "no loop) to compare", parse=lambda text: split(text, int),
      shown="the platform's (favor.form())")
  batch_tokens: tuple[int | None, ...] = flag(
      (None,), "Performer batch groups to compare: sequences of at most this length are read "
      "a group of at most this many tokens per loop step (0: the whole batch at once)",
      parse=lambda text: split(text, int), shown="the platform's (favor.form())")
  fused: tuple[bool | None, ...] = flag(
      (None,), "Performer forms to compare: on (the fused Pallas kernels, favor/fused.py; "
      "interpret mode off the GPU) and/or off (the XLA forms)",
      parse=lambda text: split(text, _on_off),
      shown="the platform's (favor.form())")
  targets: bool = flag(False, "run only the measurements behind the target ratios (about "
                              "20 minutes on 2 CPU cores; with the peers extra installed, also "
                              "performer-pytorch's); ignores the selection flags")
  peers: bool = flag(False, "with --layer-only: also time performer-pytorch's FastAttention (torch, "
                            "the peers extra) at every shape of performer_softmax, for paired "
                            "ratios")
  profile: str | None = flag(None, "also trace 3 extra runs of each configuration with "
                             "jax.profiler into DIR/<configuration>/ and store its top XLA "
                             "operations in the row", metavar="DIR")
  jobs: int = flag(1, "configurations prepared at once (process start, imports, inputs); each "
                     "still compiles and runs alone, holding a lock on the device. For a GPU, "
                     "where preparing dominates a sweep's wall time; keep 1 on a CPU, where the "
                     "preparing processes would share the cores of the timed run")
  dtype: str = flag("float32", "activations and matmuls (ModelConfig.dtype; parameters stay "
                    "float32, attention softmax and FAVOR sums run in float32)",
                    choices=DTYPES)

  def __post_init__(self):
    for name, given, known in (("config", self.configs, tuple(CONFIGS)),
                               ("attention", self.attentions, tuple(backends.names())
                                + ((SCAN,) if self.layer or self.targets else ())),
                               ("direction", self.directions, DIRECTIONS),
                               ("mode", self.modes, MODES)):
      if not given:
        raise UserError(f"give at least one {name}")
      for value in given:
        if value not in known:
          hint = " (the scan reference is timed with --layer-only)" if value == SCAN else ""
          raise UserError(f"unknown {name} {value!r}; choose from {', '.join(known)}{hint}")
    if not self.seq_lens:
      raise UserError("--seq-lens: give at least one L")
    if min(self.seq_lens) < 1:
      raise UserError(f"--seq-lens must be >= 1, got {min(self.seq_lens)}")
    if max(self.seq_lens) > 2 ** 31 - 1:  # positions and XLA's shapes are int32
      raise UserError(f"--seq-lens must be at most 2147483647 (int32 positions), got "
                      f"{max(self.seq_lens)}")
    least = min((n for n in self.num_layers if n is not None), default=1)
    if least < 1:
      raise UserError(f"--layers must be >= 1, got {least}")
    if self.num_layers != (None,) and (self.layer or self.targets):
      raise UserError("--layers sets the model's depth: drop --layer-only and --targets")
    self._check_budgets()
    if self.dtype not in DTYPES:
      raise UserError(f"unknown dtype {self.dtype!r}; choose from {', '.join(DTYPES)}")
    self._check_forms()

  def _check_budgets(self):
    """Counts and limits: repeats, jobs, time and memory caps, form sizes."""
    if self.repeats < 1:
      raise UserError(f"--repeats must be >= 1, got {self.repeats}")
    if self.jobs < 1:
      raise UserError(f"--jobs must be >= 1, got {self.jobs}")
    if not 0 < self.time_cap < math.inf:
      raise UserError(f"--time-cap must be a finite number of seconds > 0, got {self.time_cap}")
    if self.deadline is not None and not 0 <= self.deadline < math.inf:
      raise UserError(f"--deadline must be a finite number of seconds >= 0, got {self.deadline}")
    if self.memory_cap is not None and self.memory_cap < 1:
      raise UserError(f"--memory-cap must be >= 1 byte, got {self.memory_cap}")
    for name, values, least in (("chunk sizes", self.chunk_sizes, 1), ("spans", self.spans, 1),
                                ("batch tokens", self.batch_tokens, 0)):
      small = [c for c in values if c is not None and c < least]
      if small:
        raise UserError(f"{name} must be >= {least}, got {small[0]}")

  def _check_forms(self):
    """Flags that only some attentions or directions take."""
    # A flag that cannot work is the real reason, whatever is installed: before torch's check.
    if self.peers and not self.targets:  # targets_plan() ignores the selection
      if not (self.layer and "performer_softmax" in self.attentions):
        raise UserError("--peers compares attention layers: add --layer-only and keep "
                        "performer_softmax in --attention")
      if self.dtype != "float32":
        raise UserError("--peers runs float32 only (performer-pytorch's CPU path)")
    if self.peers and (reason := speed_pytorch.missing()):
      raise UserError(reason)
    if self.targets:
      return  # targets_plan() ignores the selection
    for option, flag_name, given in zip(FORM, ("--chunk-sizes", "--spans", "--batch-tokens",
                                               "--fused"),
                                        (self.chunk_sizes, self.spans, self.batch_tokens,
                                         self.fused)):
      if given != (None,) and not any(option in form_options(a) for a in self.attentions):
        takers = [a for a in backends.names() if option in form_options(a)]
        raise UserError(f"{flag_name} applies to the attentions with a {option} option "
                        f"({', '.join(takers)}); none is selected")
    if self.spans != (None,) and "causal" not in self.directions:
      raise UserError("--spans applies to causal attention: add --direction causal")
    if not plan(self):  # the only filter: favor_scan is causal only
      raise UserError(f"this selection measures nothing: {SCAN} runs causal only; "
                      "add --direction causal or another --attention")


CONFIG = SpeedConfig


def plan(cfg):
  """The series to run: lists of specs in increasing L."""
  if cfg.targets:
    return targets_plan()
  series = []
  for config in cfg.configs:
    for attention in cfg.attentions:
      for direction in cfg.directions:
        if attention == SCAN and direction != "causal":
          continue  # the scan reference is causal only
        if attention != SCAN and direction == "causal" and not backends.info(attention).causal:
          continue  # a bidirectional-only backend (Linformer)
        for mode in cfg.modes:
          takes = form_options(attention)
          chunks = cfg.chunk_sizes if "chunk_size" in takes else (None,)
          spans = cfg.spans if "span" in takes and direction == "causal" else (None,)
          groups = cfg.batch_tokens if "batch_tokens" in takes else (None,)
          fused = cfg.fused if "fused" in takes else (None,)
          for chunk, span, group, on, depth in itertools.product(chunks, spans, groups, fused,
                                                                 cfg.num_layers):
            series.append([spec(config, attention, direction, mode, n, layer=cfg.layer,
                                chunk_size=chunk, span=span, batch_tokens=group, fused=on,
                                dtype=cfg.dtype, num_layers=depth)
                           for n in sorted(set(cfg.seq_lens))])
          if cfg.peers and attention == "performer_softmax":
            series.append([spec(config, speed_pytorch.NAME, direction, mode, n, layer=True)
                           for n in sorted(set(cfg.seq_lens))])
  return series


def run_one(spec_, cfg, lock=None):
  """Measures one configuration in a fresh process; returns its row (never raises for it).

  lock: the device lock file of a --jobs run; the worker's wait for it is
  not counted against the time cap, so the process may live cfg.jobs caps.
  """
  start = time.time()
  job = dict(spec_, repeats=cfg.repeats, memory_cap=cfg.memory_cap,
             deadline=start + 0.9 * cfg.time_cap, lock=lock)
  if cfg.profile:
    job["profile"] = os.path.join(cfg.profile, _name(spec_).replace(" ", "_"))
  row = dict(spec_)
  # With a lock, no process may take 75% of the GPU's memory up front while others wait.
  env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", **os.environ} if lock else None
  try:
    done = subprocess.run([sys.executable, "-m", "performer.experiments.speed_worker",
                           json.dumps(job)], capture_output=True, text=True, env=env,
                          timeout=cfg.time_cap * cfg.jobs, check=False)
  except subprocess.TimeoutExpired:
    waits = " (--time-cap times --jobs: it may have waited for the others)" if lock else ""
    return dict(row, status="timeout",
                detail=f"not done within the {cfg.time_cap * cfg.jobs:g} s time cap{waits}",
                wall_s=round(time.time() - start, 2))
  row["wall_s"] = round(time.time() - start, 2)
  lines = done.stdout.strip().splitlines()
  if done.returncode == 0 and lines:
    return dict(row, **json.loads(lines[-1]))
  if done.returncode == -9:  # SIGKILL without our timeout: the kernel's OOM killer
    return dict(row, status="oom", detail="the worker was killed (SIGKILL), most likely for memory")
  return dict(row, status="error", detail=_exception_line(done.stderr, done.returncode)[:300])


def _exception_line(stderr, returncode):
  """The `Type: message` line of a worker's traceback (JAX appends a note after it)."""
  lines = [l for l in stderr.strip().splitlines() if l.strip()]
  raised = [l for l in lines if re.match(r"[A-Za-z_][\w.]*(Error|Exception|Exit)\b", l)]
  return (raised or lines or [f"worker exited with {returncode}"])[-1]


def measure_matmul(cfg):
  """jnp.dot throughput (float32, N = MATMUL_N) in a fresh process: a row-like dict."""
  job = {"kind": "matmul", "n": MATMUL_N, "repeats": max(cfg.repeats, 3)}
  try:
    done = subprocess.run([sys.executable, "-m", "performer.experiments.speed_worker",
                           json.dumps(job)], capture_output=True, text=True,
                          timeout=max(cfg.time_cap, 60), check=False)
    return json.loads(done.stdout.strip().splitlines()[-1])
  except (subprocess.TimeoutExpired, IndexError, json.JSONDecodeError):
    return {"status": "error", "n": MATMUL_N}


def run(cfg, *, progress=True, log=None):
  """Runs the plan. Returns Result(rows, extra: matmul (the jnp.dot reference) and ratios).

  log: where a stopped series is reported (default: above the progress bar).
  """
  log = log or tqdm.tqdm.write
  series = plan(cfg)
  total = sum(len(s) for s in series)
  end = None if cfg.deadline is None else time.time() + cfg.deadline
  shown = threading.Lock()  # the bar and the log, from --jobs threads

  def one_series(specs, lock):
    rows = []
    for i, one in enumerate(specs):
      if end is not None and time.time() >= end:  # not measured: say so, row by row
        rows.append(dict(one, status="skipped", detail=f"not started: the --deadline of "
                         f"{cfg.deadline:g} s had passed"))
        with shown:
          bar.update(1)
        continue
      with shown:
        bar.set_postfix_str(_name(one), refresh=True)
      row = run_one(one, cfg, lock)
      rows.append(row)
      failed = row["status"] != "ok"
      with shown:
        bar.update(1)
        if failed:
          log(f"{_name(one)}: {row['status']} ({row.get('detail', '')}); "
              f"longer L of this series skipped")
          bar.update(len(specs) - i - 1)
      if failed:
        break
    return rows

  # Series side by side (one at a time without --jobs); their rows in plan order.
  with tqdm.tqdm(total=total, desc="speed", unit="config", disable=not progress) as bar, \
      tempfile.TemporaryDirectory() as folder, \
      concurrent.futures.ThreadPoolExecutor(cfg.jobs) as pool:
    lock = os.path.join(folder, "device.lock") if cfg.jobs > 1 else None
    rows = [row for done in [pool.submit(one_series, specs, lock) for specs in series]
            for row in done.result()]
  matmul = measure_matmul(cfg)
  first = next((r for r in rows if "jax_version" in r), matmul)  # measured by the workers
  env = {"python": platform.python_version(), "machine": platform.machine(),
         "processor": platform.processor(), "jax": first.get("jax_version"),
         "backend": first.get("backend"), "device": first.get("device")}
  return Result(rows, {"matmul": matmul, "ratios": ratios(rows, matmul)}, env=env)


def report(cfg, result):  # pylint: disable=unused-argument
  """The lines `performer speed` prints: one per configuration, then the target ratios."""
  lines = []
  for row in result.rows:
    where = "layer" if row["layer"] else "model"
    chunk = _form_text(row, "=")
    timing = (f"{row['median_ms']:10.1f} ms  (min {row['min_ms']:.1f}, max {row['max_ms']:.1f}; "
              f"compile {row['compile_s']:.1f} s; "
              f"peak {memory.format_bytes(row['peak_bytes'])})"
              if row["status"] == "ok" else row["status"])
    name = row["attention"] + (f" ({row['implementation']})" if row.get("implementation") else "")
    lines.append(f"{row['config']:8} {where} {name:24} {row['direction']:13} "
                 f"{row['mode']:6} L={row['L']:<6}{chunk} {timing}")
  pairs = peer_ratios(result.rows)
  if pairs:
    lines.append("performer-pytorch / ours (FAVOR+ layer time; > 1: ours is faster):")
    lines += [f"  {p['config']:8} {p['direction']:13} {p['mode']:6} L={p['L']:<6} "
              f"{p['ratio']:6.2f}x  ({p['theirs_ms']:.1f} ms / {p['ours_ms']:.1f} ms)"
              for p in pairs]
  return lines + ["targets (ratios of measurements in this run):"] + format_ratios(
      result.extra["ratios"])


def _name(s):
  where = "layer" if s["layer"] else "model"
  chunk = _form_text(s, " ")
  return f"{s['config']} {where} {s['attention']} {s['direction']} {s['mode']}{chunk} L={s['L']}"


def _form_text(row, sep):
  """' chunk 64 span 128 batch_tokens 0': what a row set of the Performer's form, if anything."""
  return "".join(f" {label}{sep}{row[key]}" for label, key in (
      ("chunk", "chunk_size"), ("span", "span"), ("batch_tokens", "batch_tokens"))
      if row.get(key) is not None)


FLAGS, main = results.command(__name__)  # what every experiment command does
