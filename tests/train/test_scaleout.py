"""One code path for 1 device, N devices and N processes: the same steps give the same run.

Simulated CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)
must be set before JAX starts, so those runs are `performer train`
subprocesses; the one-device reference runs in this process.
"""

import json
import os
import socket
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from performer import cli, configurables, favor
from performer.data import pipeline
from performer.errors import UserError
from performer.train import evaluate, loop, sharding
from performer.train import state as state_lib
from performer.train.checkpoint import Checkpoints
from performer.train.config import Config
from testlib import ROOT

CONFIG = "gin/mini/trembl_u_performer_relu.gin"
# 4 heads, d_ff 32 and a batch of 8 divide over every mesh below.
SMALL = ["DataConfig.seq_len = 32", "DataConfig.batch_size = 8", "ModelConfig.num_layers = 1",
         "ModelConfig.num_heads = 4", "ModelConfig.d_model = 16", "ModelConfig.d_ff = 32",
         "ModelConfig.attention_options = {'num_features': 8}", "TrainConfig.log_every = 2",
         "TrainConfig.eval_every = 3", "TrainConfig.checkpoint_every = 3",
         "TrainConfig.eval_batches = 2"]
FSDP = "MeshConfig.rules = " + repr(sharding.FSDP_RULES)


def _bindings(data, *extra):
  return [f"DataConfig.path = '{data}'", *SMALL, *extra]


def _command(workdir, bindings):
  cmd = [sys.executable, "-m", "performer.cli", "train", "--gin", CONFIG, "--workdir", str(workdir)]
  for binding in bindings:
    cmd += ["--gin_param", binding]
  return cmd


def _env(devices):
  return dict(os.environ, JAX_PLATFORMS="cpu", PYTHONFAULTHANDLER="1",
              XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")


def _train_on(devices, data, workdir, *extra):
  """`performer train` in a process with `devices` simulated CPU devices."""
  done = subprocess.run(_command(workdir, _bindings(data, *extra)), cwd=ROOT, env=_env(devices),
                        capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  return done


def _train_here(data, workdir, *extra):
  """The reference: this process, one device."""
  configurables.parse([os.path.join(ROOT, CONFIG)], _bindings(data, *extra))
  loop.run(configurables.resolve(), str(workdir), progress=False)


def _rows(workdir):
  return [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]


def _params(workdir):
  """The latest checkpoint's parameters and optimizer state, restored onto one device."""
  model, optimizer = state_lib.build(Config.load(workdir))
  with Checkpoints(os.path.join(workdir, "checkpoints")) as ckpt:
    ckpt.restore(ckpt.latest_step(), model, optimizer)
  from flax import nnx  # pylint: disable=import-outside-toplevel
  return jax.tree.leaves(nnx.state((model, optimizer), nnx.Not(nnx.RngState)))


def _same_run(a, b, *, splits=("train", "valid")):
  """Runs a and b logged the same losses (of `splits`) and hold the same final state."""
  rows_a, rows_b = ([r for r in _rows(w) if r["split"] in splits] for w in (a, b))
  assert [(r["step"], r["split"]) for r in rows_a] == [(r["step"], r["split"]) for r in rows_b]
  for ra, rb in zip(rows_a, rows_b):
    assert rb["loss"] == pytest.approx(ra["loss"], rel=1e-5), (ra, rb)
    assert rb["tokens"] == ra["tokens"]
  for x, y in zip(_params(a), _params(b), strict=True):
    np.testing.assert_allclose(np.asarray(y, np.float64), np.asarray(x, np.float64),
                               rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module", name="reference")
def fixture_reference(data, tmp_path_factory):
  """Six steps on one device, in this process."""
  workdir = tmp_path_factory.mktemp("one_device") / "run"
  _train_here(data, workdir, "TrainConfig.steps = 6")
  return workdir


def test_eight_devices_with_heads_and_mlp_over_model_and_fsdp_train_as_one(data, reference,
                                                                           tmp_path):
  done = _train_on(8, data, tmp_path / "run", "TrainConfig.steps = 6", "MeshConfig.data = 2",
                   "MeshConfig.model = 4", FSDP)
  assert "1 of 1, 8 device(s)" in done.stdout
  _same_run(reference, tmp_path / "run")


def test_data_parallel_on_eight_devices_then_resumed_on_two_trains_as_one(data, reference,
                                                                          tmp_path):
  _train_on(8, data, tmp_path / "run", "TrainConfig.steps = 3", "MeshConfig.data = 8")
  done = _train_on(2, data, tmp_path / "run", "TrainConfig.steps = 6")
  assert "resuming" in done.stdout and "2 device(s)" in done.stdout
  # Train rows around a resume average different spans of steps (README, known gaps).
  _same_run(reference, tmp_path / "run", splits=("valid",))


def _free_port():
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _two_processes(cmd):
  """Runs cmd as processes 0 and 1 of a job on localhost; returns their (stdout, stderr)."""
  cmd = cmd + ["--coordinator", f"localhost:{_free_port()}", "--num-processes", "2"]
  procs = [subprocess.Popen(cmd + ["--process-id", str(i)], cwd=ROOT, env=_env(1),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for i in range(2)]
  try:
    outputs = [p.communicate(timeout=600) for p in procs]
  finally:
    for p in procs:
      p.kill()
  assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outputs]
  return outputs


def test_two_processes_train_as_one_and_only_process_0_writes_logs(data, reference, tmp_path):
  cmd = _command(tmp_path / "run", _bindings(data, "TrainConfig.steps = 6"))
  (out0, err0), (out1, err1) = _two_processes(cmd)
  assert "[process 0/2] process 1 of 2, 2 device(s)" in out0
  assert "[process 1/2] process 2 of 2, 2 device(s)" in out1
  assert "train:" in err0 and "train:" not in err1  # one progress bar
  events = os.listdir(tmp_path / "run" / "tensorboard")
  assert len([e for e in events if e.startswith("events.out.tfevents")]) == 1
  _same_run(reference, tmp_path / "run")
  # eval on two processes: every process runs every batch; the baseline's counts add up.
  (out0, _), (out1, _) = _two_processes([sys.executable, "-m", "performer.cli", "eval",
                                          "--workdir", str(tmp_path / "run")])
  two = json.load(open(tmp_path / "run" / "eval_test.json"))  # gloo prints a line first
  assert json.loads(out0[out0.index("{"):]) == two and "{" not in out1  # process 0 reports
  one = evaluate.run(str(reference), "test")
  for key in ("loss", "accuracy", "baseline_accuracy", "baseline_perplexity"):
    assert two[key] == pytest.approx(one[key], rel=1e-5), key
  assert two["tokens"] == one["tokens"]
  # The per-sequence file gathers both processes' rows: every sequence once, as on one process.
  with np.load(tmp_path / "run" / two["sequences_file"]) as a, \
      np.load(reference / one["sequences_file"]) as b:
    np.testing.assert_array_equal(a["ids"], np.arange(len(b["ids"])))
    for key in ("ids", "tokens", "correct_sum"):
      np.testing.assert_array_equal(a[key], b[key])
    np.testing.assert_allclose(a["loss_sum"], b["loss_sum"], rtol=1e-4)
    assert a["tokens"].sum() == two["tokens"] and a["correct_sum"].sum() == pytest.approx(
        two["accuracy"] * two["tokens"])


def test_cluster_flags_are_checked(tmp_path, capsys):
  cases = [(["--num-processes", "2"], "--num-processes and --process-id need --coordinator"),
           (["--coordinator", "localhost:1"], "needs --num-processes and --process-id"),
           (["--coordinator", "localhost:1", "--num-processes", "2", "--process-id", "2"],
            "--process-id 2 must be in [0, --num-processes 2)"),
           (["--coordinator", "auto", "--process-id", "0"], "--coordinator auto takes"),
           (["--coordinator", "localhost", "--num-processes", "2", "--process-id", "0"],
            "--coordinator 'localhost' is not HOST:PORT with a port in 1-65535"),
           (["--coordinator", "localhost:70000", "--num-processes", "2", "--process-id", "0"],
            "is not HOST:PORT with a port in 1-65535"),
           (["--coordinator", "localhost:1", "--num-processes", "-3", "--process-id", "0"],
            "--num-processes must be >= 1, got -3"),
           (["--coordinator", "localhost:1", "--num-processes", "2", "--process-id", "0",
             "--init-timeout", "0"], "--init-timeout must be a finite number of seconds > 0"),
           # checked with one process too: a flag given is a flag read
           (["--init-timeout", "nan"], "--init-timeout must be a finite number of seconds > 0, "
                                       "got nan")]
  for flags, message in cases:  # in this process: each is refused before JAX is touched
    assert cli.main(["train", "--gin", os.path.join(ROOT, CONFIG), "--workdir", str(tmp_path),
                     *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1], err


def test_a_peer_that_never_arrives_is_a_one_line_error_after_the_timeout(tmp_path):
  started = time.time()
  done = subprocess.run([sys.executable, "-m", "performer.cli", "train", "--gin", CONFIG,
                         "--workdir", str(tmp_path), "--coordinator", f"localhost:{_free_port()}",
                         "--num-processes", "2", "--process-id", "0", "--init-timeout", "3"],
                        cwd=ROOT, capture_output=True, text=True, env=_env(1), timeout=120)
  assert done.returncode == 2 and time.time() - started < 60
  lines = [line for line in done.stderr.splitlines() if line.strip()]
  assert lines[-1].startswith("performer: error: --coordinator localhost:") and \
      "did not all connect within 3 s (--init-timeout)" in lines[-1], done.stderr
  assert "Traceback" not in done.stderr and "@ " not in done.stderr  # no C++ stack trace


def test_mesh_config_and_its_errors():
  configurables.parse([os.path.join(ROOT, "gin/cluster/fsdp.gin"),
                       os.path.join(ROOT, "gin/cluster/bfloat16.gin")], [])
  assert configurables.build("MeshConfig").rules == sharding.FSDP_RULES
  assert configurables.build("ModelConfig", vocab_size=28, max_len=8).dtype == "bfloat16"
  assert sharding.MeshConfig(rules=[list(r) for r in sharding.FSDP_RULES]).rules == \
      sharding.FSDP_RULES  # gin's lists become the hashable tuples
  for kwargs, message in [(dict(data=0), "MeshConfig.data must be"),
                          (dict(model=0), "MeshConfig.model must be"),
                          (dict(rules=(("embed", None),)), "must map each of vocab, embed"),
                          (dict(rules=(("vocab", None), ("embed", "x"), ("heads", None),
                                       ("mlp", None))), "unknown mesh axis 'x'")]:
    with pytest.raises(ValueError, match=message):
      sharding.MeshConfig(**kwargs)
  with pytest.raises(UserError, match=r"data 2 x model 1 does not fit the 1 device\(s\)"):
    sharding.make_mesh(sharding.MeshConfig(data=2))


def test_parameters_lie_on_the_mesh_by_the_rules():
  script = """
import json, jax
from flax import nnx
from performer.models.config import ModelConfig
from performer.models.transformer import TransformerLM
from performer.train import sharding
from performer.train import state as state_lib
from performer.train.config import OptimConfig
mesh = sharding.make_mesh(sharding.MeshConfig(data=2, model=4))
cfg = ModelConfig(vocab_size=28, max_len=32, num_layers=1, num_heads=4, d_model=16, d_ff=32)
model = TransformerLM(cfg, rngs=nnx.Rngs(0))
opt = nnx.Optimizer(model, state_lib.optimizer_for(OptimConfig(), 10), wrt=nnx.Param)
out = {}
for rules in ("DEFAULT_RULES", "FSDP_RULES"):
  _, state, _ = state_lib.placed(model, opt, mesh, getattr(sharding, rules))
  flat = jax.tree_util.tree_leaves_with_path(state)
  out[rules] = {jax.tree_util.keystr(p): [list(x.sharding.spec), x.addressable_shards[0].data.shape]
                for p, x in flat if hasattr(x, "sharding")}
print(json.dumps(out))
"""
  done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=_env(8), capture_output=True,
                        text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  out = json.loads(done.stdout.splitlines()[-1])
  spec = lambda rules, key: next(v for k, v in out[rules].items() if k.endswith(key))
  qkv, mu = "[0]['blocks'][0]['qkv']['kernel'].value", "['mu']['blocks'][0]['qkv']['kernel'].value"
  # Heads over model: the [16, 48] kernel in 4 column blocks; FSDP also splits d_model over data.
  assert spec("DEFAULT_RULES", qkv) == [[None, "model"], [16, 12]]
  assert spec("FSDP_RULES", qkv) == [["data", "model"], [8, 12]]
  assert spec("FSDP_RULES", mu) == spec("FSDP_RULES", qkv)  # Adam's moments follow
  assert spec("FSDP_RULES", "[0]['blocks'][0]['mlp_out']['kernel'].value") == \
      [["model", "data"], [8, 8]]
  # 28 (vocab) has no rule to a mesh axis; LayerNorm and W are replicated.
  assert spec("FSDP_RULES", "[0]['embed']['embedding'].value") == \
      [[None, "data"], [28, 8]]
  assert spec("FSDP_RULES", "[0]['ln']['scale'].value") == [[], [16]]


def test_batches_split_over_processes_are_the_one_process_batch(data):
  cfg = pipeline.DataConfig(path=data, seq_len=32, batch_size=6)
  one = pipeline.batches(cfg, "valid", causal=True)
  parts = [pipeline.batches(cfg, "valid", causal=True, process_index=i, process_count=3)
           for i in range(3)]
  for step in (0, 7):
    whole = one.train_batch(step)
    for key in whole:
      np.testing.assert_array_equal(np.concatenate([p.train_batch(step)[key] for p in parts]),
                                    whole[key])
  whole = list(one.eval_batches())
  split = [list(p.eval_batches()) for p in parts]
  assert all(len(s) == len(whole) for s in split)  # every process runs every eval batch
  for i, batch in enumerate(whole):
    np.testing.assert_array_equal(np.concatenate([s[i]["ids"] for s in split]), batch["ids"])
  assert whole[-1]["ids"][-1] == -1 or len(one.source) % 6 == 0
  with pytest.raises(UserError, match="batch_size 6 is not divisible by the 4 processes"):
    pipeline.batches(cfg, "valid", causal=True, process_index=0, process_count=4)


def test_prefetched_batches_are_the_batches_by_step(data):
  batches = pipeline.batches(pipeline.DataConfig(path=data, seq_len=32, batch_size=4), "train",
                             causal=True)
  got = list(batches.train_batches(5, 9, lambda b: {**b, "placed": True}))
  assert len(got) == 4 and all(b["placed"] for b in got)
  for step, batch in zip(range(5, 9), got):
    np.testing.assert_array_equal(batch["inputs"], batches.train_batch(step)["inputs"])


def test_bfloat16_trains_with_float32_parameters_and_favor_sums(data, tmp_path):
  # A process of its own, as `performer train` is: this test once crashed a CI worker that
  # had run others before it, and a crash here should say where (faulthandler), not kill one.
  _train_on(1, data, tmp_path, "TrainConfig.steps = 30", "TrainConfig.log_every = 10",
            "TrainConfig.eval_every = 30", "TrainConfig.checkpoint_every = 30",
            "ModelConfig.dtype = 'bfloat16'",
            # one W throughout: the test is about dtypes, not the noise of a per-step redraw
            "ModelConfig.attention_options = {'num_features': 64, 'redraw_every': 0}")
  losses = [r["loss"] for r in _rows(tmp_path) if r["split"] == "train"]
  assert losses[-1] < losses[0] - 0.3, losses  # 3.5 -> 3.0 in a measured run
  assert {np.asarray(x).dtype for x in _params(tmp_path) if np.ndim(x)} == {np.dtype(np.float32)}
  # For bfloat16 q, k, v inside FAVOR: the features are float32 (their projection's operands
  # too), the later products take bfloat16 operands, and every product (K'^T V, K'^T 1, D)
  # accumulates in float32.
  q = jnp.ones((1, 16, 2, 8), jnp.bfloat16)
  W = favor.projection(jax.random.key(0), 8, 8, "orthogonal", "chi")
  for causal in (False, True):
    jaxpr = jax.make_jaxpr(lambda q, k, v: favor.favor_attention(q, k, v, W, kernel="relu",
                                                                 causal=causal))(q, q, q)
    dots = [e for e in _equations(jaxpr.jaxpr) if e.primitive.name == "dot_general"]
    assert dots and all(e.outvars[0].aval.dtype == jnp.float32 for e in dots)
    projections = [e for e in dots if e.invars[1].aval.shape == W.shape]
    assert projections and all(v.aval.dtype == jnp.float32 for e in projections
                               for v in e.invars)
    assert any(e.invars[0].aval.dtype == jnp.bfloat16 for e in dots)
    assert jaxpr.out_avals[0].dtype == jnp.bfloat16


def _equations(jaxpr):
  """Every equation of a jaxpr, those of its sub-jaxprs (scan, cond, pjit) included."""
  for eqn in jaxpr.eqns:
    yield eqn
    for value in eqn.params.values():
      for sub in value if isinstance(value, (tuple, list)) else [value]:
        sub = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr's Jaxpr
        if hasattr(sub, "eqns"):
          yield from _equations(sub)


def _throughput(data, out):
  argv = ["throughput", "--gin", os.path.join(ROOT, CONFIG), "--devices", "1,2", "--steps", "4",
          "--log-every", "2", "--out", str(out)]
  for binding in [f"DataConfig.path = '{data}'", *SMALL]:
    argv += ["--gin_param", binding]
  return argv


@pytest.mark.slow  # ~40 s: a process per device count; the flag checks below run by default
def test_throughput_prints_the_step_alone_the_loop_and_their_ratio(data, tmp_path):
  out = tmp_path / "throughput.json"
  done = subprocess.run([sys.executable, "-m", "performer.cli", *_throughput(data, out)], cwd=ROOT,
                        env=_env(1), capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  rows = json.load(open(out))["rows"]
  assert [r["devices"] for r in rows] == [1, 2]
  for r in rows:
    assert r["loop_overhead"] == pytest.approx(r["loop_s"] / r["step_s"])
    assert r["tokens_per_s"] > 0 and r["environment"]["device_count"] == r["devices"]
  assert rows[0]["vs_1_device"] == 1.0
  assert "loop / alone" in done.stdout and f"{rows[1]['loop_overhead']:.3f}" in done.stdout


def test_throughput_flags_are_checked_before_a_run(data, tmp_path, capsys):
  argv = _throughput(data, tmp_path / "throughput.json")
  for flags, message in (  # in this process: each is refused before a run starts
      (["--steps", "3"], "must be at least twice --log-every"),
      (["--log-every", "0"], "--log-every must be >= 1, got 0"),
      (["--devices", "3"], "--devices 3: DataConfig.batch_size 8 is not divisible by 3"),
      (["--devices", "1", "--platform", "gpu"], "--platform gpu: JAX here has no working gpu "
                                                 "backend")):
    if "gpu" in flags and _has_gpu():
      continue
    assert cli.main(argv + flags) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert message in lines[-1] and len(lines) <= 2, lines
  assert not (tmp_path / "throughput.json").exists()


def _has_gpu():
  import jax  # pylint: disable=import-outside-toplevel
  try:
    return bool(jax.devices("gpu"))
  except RuntimeError:
    return False


def test_slurm_scripts_parse_and_say_their_usage():
  for name in ("train_one_node.sbatch", "train_multi_node.sbatch"):
    path = os.path.join(ROOT, "scripts", "slurm", name)
    assert subprocess.run(["bash", "-n", path]).returncode == 0
    done = subprocess.run(["bash", path], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and "usage: sbatch" in done.stderr
