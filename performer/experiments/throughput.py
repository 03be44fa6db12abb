"""performer throughput: training throughput over device counts, and the loop's overhead.

Per device count a fresh worker (JAX fixes devices at start) times the step alone and the loop."""

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time

from performer.errors import UserError
from performer.experiments import results
from performer.experiments.results import Result, environment
from performer.flags import flag


NAME = "throughput"
SUMMARY = "training throughput over 1, 2, 4, 8 devices and the loop's overhead"
DESCRIPTION = ("Trains the gin-configured model data-parallel on each device count in a fresh "
               "process, twice over the same batches: the compiled train step alone, and "
               "`performer train` itself. Prints tokens/s, the speed-up over one device and the "
               "loop overhead (loop / step alone; target <= 1.05), all measured in this run. On a "
               "CPU the devices are simulated on the same cores, so the speed-up column shows the "
               "sharding's overhead, not a speed-up.")
OUT = "runs/throughput.json"
FIGURE = None
GIN = True  # the model comes from --gin files, resolved into `run` by the command line


@dataclasses.dataclass(frozen=True)
class ThroughputConfig:
  """What to train (a resolved train.config.Config, as to_json gives it) and on how many devices.

  Raises:
    UserError: device counts below 1, or too few steps to time.
  """
  run: dict
  devices: tuple[int, ...] = flag((1, 2, 4, 8), "device counts, comma-separated")
  steps: int = flag(60, "train steps per measurement")
  log_every: int = flag(10, "the loop's log interval; the first interval is not timed")
  platform: str = flag("cpu", "cpu: simulated devices; gpu: the first N GPUs",
                       choices=("cpu", "gpu"))

  def __post_init__(self):
    if not self.devices or min(self.devices) < 1:
      raise UserError(f"--devices must be counts >= 1, got {self.devices}")
    if self.log_every < 1:
      raise UserError(f"--log-every must be >= 1, got {self.log_every}")
    if self.steps < 2 * self.log_every:
      raise UserError(f"--steps ({self.steps}) must be at least twice --log-every "
                      f"({self.log_every}): the first log_every steps are not timed")
    if self.platform not in ("cpu", "gpu"):
      raise UserError(f"--platform must be cpu or gpu, got {self.platform!r}")
    batch = self.run.get("data", {}).get("batch_size")
    for n in self.devices:
      if batch and batch % n:  # as train checks: each device takes an equal share
        raise UserError(f"--devices {n}: DataConfig.batch_size {batch} is not divisible by {n}")


CONFIG = ThroughputConfig


def run(cfg, *, progress=True):
  """Runs every device count, each in a worker process; returns Result(rows, env of a worker).

  Raises:
    UserError: a worker failed (its last error line is in the message).
  """
  rows = []
  for n in cfg.devices:
    if progress:
      print(f"throughput: {n} device(s) ...", file=sys.stderr, flush=True)
    rows.append(_spawn(cfg, n))
  one = next((r for r in rows if r["devices"] == 1), None)
  for row in rows:
    row["loop_overhead"] = row["loop_s"] / row["step_s"]
    row["vs_1_device"] = one["step_s"] / row["step_s"] if one else None
  return Result(rows, env=rows[0]["environment"])


def report(cfg, result):  # pylint: disable=unused-argument
  """The printed table: one line per device count."""
  lines = ["devices  step alone (ms)  loop (ms)  loop / alone  tokens/s  step-alone speed-up"]
  for r in result.rows:
    speedup = f"{r['vs_1_device']:.2f}" if r["vs_1_device"] is not None else "-"
    lines.append(f"{r['devices']:7d}  {r['step_s'] * 1e3:15.1f}  {r['loop_s'] * 1e3:9.1f}  "
                 f"{r['loop_overhead']:12.3f}  {r['tokens_per_s']:8.0f}  {speedup:>19}")
  return lines


def _spawn(cfg, devices):
  # JAX_PLATFORMS=gpu also asks for ROCm, which JAX 0.11's CUDA build refuses (seen on an H200).
  env = dict(os.environ, JAX_PLATFORMS={"cpu": "cpu", "gpu": "cuda"}[cfg.platform])
  if cfg.platform == "cpu":
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                        f" --xla_force_host_platform_device_count={devices}").strip()
  else:
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(devices))
  spec = json.dumps({**dataclasses.asdict(cfg), "devices": devices})
  done = subprocess.run([sys.executable, "-m", "performer.experiments.throughput", spec],
                        env=env, capture_output=True, text=True, check=False)
  if done.returncode:
    last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
    raise UserError(f"the {devices}-device worker failed: {last}")
  return json.loads(done.stdout.strip().splitlines()[-1])


def _worker(spec):
  """One device count: times the step alone and the loop; returns the row."""
  import jax  # pylint: disable=import-outside-toplevel
  from performer.data import pipeline  # pylint: disable=import-outside-toplevel
  from performer.train import loop, sharding  # pylint: disable=import-outside-toplevel
  from performer.train import state as state_lib  # pylint: disable=import-outside-toplevel
  from performer.train.config import Config  # pylint: disable=import-outside-toplevel

  try:
    jax.devices()
  except (RuntimeError, AssertionError) as e:  # JAX without CUDA fails an assert on "cuda"
    reason = (str(e).splitlines() or [f"{type(e).__name__} in jax.devices()"])[0]
    raise UserError(f"--platform {spec['platform']}: JAX here has no working {spec['platform']} "
                    f"backend ({reason}); for NVIDIA GPUs install JAX's CUDA "
                    "build: pip install -U 'jax[cuda12]'") from None
  steps, every = spec["steps"], spec["log_every"]
  cfg = Config.from_json(spec["run"])
  cfg = dataclasses.replace(
      cfg, train=dataclasses.replace(cfg.train, steps=steps, log_every=every, eval_every=steps,
                                     checkpoint_every=steps, eval_batches=1, init_from=""),
      mesh=dataclasses.replace(cfg.mesh, data=spec["devices"], model=1))
  if jax.device_count() != spec["devices"]:
    raise UserError(f"asked for {spec['devices']} devices, JAX has {jax.device_count()}")

  # The step alone, on the batches the loop will use, built and placed beforehand.
  mesh = sharding.make_mesh(cfg.mesh)
  model, optimizer = state_lib.build(cfg)
  graphdef, state, shardings = state_lib.placed(model, optimizer, mesh, cfg.mesh.rules)
  data = pipeline.batches(cfg.data, "train", causal=cfg.model.causal)
  batches = [sharding.global_batch(data.train_batch(i), mesh) for i in range(steps)]
  step = state_lib.jit_train_step(cfg, mesh, graphdef, shardings).lower(state, batches[0], 0).compile()
  for i in range(every):
    state, _, _ = step(state, batches[i], i)
  jax.block_until_ready(state)
  tick, sums = time.perf_counter(), []
  for i in range(every, steps):
    state, row, _ = step(state, batches[i], i)
    sums.append(row["tokens"])
  jax.block_until_ready(state)
  alone = (time.perf_counter() - tick) / (steps - every)
  tokens = sum(float(t) for t in jax.device_get(sums))
  del state, batches

  with tempfile.TemporaryDirectory() as workdir:
    loop.run(cfg, workdir, progress=False)
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      timed = [r["step_time"] for r in map(json.loads, f)
               if r["split"] == "train" and r["step"] > every]
  return {"devices": spec["devices"], "step_s": alone, "loop_s": sum(timed) / len(timed),
          "tokens_per_s": float(tokens) / (alone * (steps - every)),
          "batch_size": cfg.data.batch_size, "seq_len": cfg.data.seq_len,
          "environment": environment()}


if __name__ == "__main__":
  try:
    print(json.dumps(_worker(json.loads(sys.argv[1]))))
  except UserError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)


FLAGS, main = results.command(__name__)  # what every experiment command does
