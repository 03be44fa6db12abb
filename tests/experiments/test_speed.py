"""The speed harness: tiny real runs end to end, the oom and timeout paths, the ratios."""

import fcntl
import json
import os
import subprocess
import sys
import threading
import time

import jax
import jax.numpy as jnp
import pytest

from performer.errors import UserError
from performer import memory
from performer.experiments import results, speed, speed_pytorch, speed_targets, speed_worker

ENV = {**os.environ, "JAX_PLATFORMS": "cpu"}


def _cli(*args):
  return subprocess.run([sys.executable, "-m", "performer.cli", "speed", *args],
                        capture_output=True, text=True, env=ENV)


@pytest.mark.slow  # 70 s; the layer, memory-cap and time-cap tests run real sweeps in CI
def test_tiny_sweep_end_to_end_and_figure(tmp_path):
  out = tmp_path / "speed.json"
  result = _cli("--config", "small", "--attention", "exact,performer_softmax",
                "--direction", "causal", "--mode", "fwd,fwdbwd", "--seq-lens", "32,16",
                "--repeats", "3", "--out", str(out))
  assert result.returncode == 0, result.stderr
  record = json.loads(out.read_text())
  assert record["experiment"] == "speed" and record["environment"]["backend"] == "cpu"
  rows = record["rows"]
  assert [(r["attention"], r["mode"], r["L"]) for r in rows] == [
      (a, m, n) for a in ("exact", "performer_softmax") for m in ("fwd", "fwdbwd") for n in (16, 32)]
  for row in rows:
    assert row["status"] == "ok", row
    assert row["repeats"] == 3 and len(row["times_ms"]) == 3
    assert 0 < row["min_ms"] <= row["median_ms"] <= row["max_ms"]
    assert sorted(row["times_ms"])[1] == pytest.approx(row["median_ms"], abs=1e-3)
    assert row["compile_s"] > 0 and row["peak_bytes"] > 0 and row["xla_bytes"] > 0
    assert row["device"] and row["jax_version"] and row["config"] == "small"
  # Backward needs more memory than forward alone: the planned bytes say so.
  by = {(r["attention"], r["mode"], r["L"]): r for r in rows}
  assert by["exact", "fwdbwd", 32]["xla_bytes"] > by["exact", "fwd", 32]["xla_bytes"]
  assert record["matmul"]["status"] == "ok" and record["matmul"]["gflops"] > 0
  assert "targets (ratios" in result.stdout and "[1a]" in result.stdout
  assert f"wrote {out}" in result.stdout

  png = tmp_path / "speed.png"
  result = subprocess.run([sys.executable, "-m", "performer.cli", "figure", "speed", "--input",
                           str(out), "--out", str(png)], capture_output=True, text=True, env=ENV)
  assert result.returncode == 0, result.stderr
  assert png.stat().st_size > 10_000


def test_layer_only_times_the_scan_reference_and_matches_rows_to_flags(tmp_path):
  cfg = speed.SpeedConfig(configs=("small",), attentions=("performer_relu", speed.SCAN),
                          directions=("bidirectional", "causal"), modes=("fwdbwd",),
                          seq_lens=(24,), layer=True, repeats=1, chunk_sizes=(8,),
                          batch_tokens=(0, 24))
  result = speed.run(cfg, progress=False, log=lambda s: None)
  rows, matmul = result.rows, result.extra["matmul"]
  assert matmul["status"] == "ok"
  # The scan reference is causal only; chunk sizes and batch groups apply to the Performers only.
  assert [(r["attention"], r["direction"], r["chunk_size"], r["batch_tokens"]) for r in rows] == [
      ("performer_relu", "bidirectional", 8, 0), ("performer_relu", "bidirectional", 8, 24),
      ("performer_relu", "causal", 8, 0), ("performer_relu", "causal", 8, 24),
      (speed.SCAN, "causal", None, None)]
  assert all(r["status"] == "ok" and r["layer"] for r in rows)
  assert "batch_tokens=24" in "\n".join(speed.report(cfg, result))


def test_measured_peak_memory_agrees_with_xla_buffer_plan():
  # Inputs + outputs + temporaries, read from the resident set on CPU: an
  # independent reading of what XLA's buffer assignment says it needs (the
  # runtime adds some of its own; results/pages/speed_cpu.md, "What was run", gives the
  # targets run's ratio of the two). Bidirectional: the
  # causal pass's plan also holds its exact path's buffers, which a run that
  # never takes it never touches (the resident set stays ~12% below the plan).
  cfg = speed.SpeedConfig(configs=("regular",), attentions=("performer_softmax",),
                          directions=("bidirectional",), modes=("fwdbwd",), seq_lens=(4096,),
                          layer=True, repeats=1)
  (row,) = speed.run(cfg, progress=False, log=lambda s: None).rows
  assert row["status"] == "ok" and row["memory_source"] == "process_rss"
  assert row["xla_bytes"] > 3 * 4096 * 512 * 4  # at least q, k, v
  assert 0.95 < row["peak_bytes"] / row["xla_bytes"] < 1.25, (row["peak_bytes"], row["xla_bytes"])


def test_memory_cap_gives_oom_rows_and_stops_the_series():
  cfg = speed.SpeedConfig(configs=("small",), attentions=("exact",), directions=("causal",),
                          modes=("fwd",), seq_lens=(16, 32, 64), repeats=1, memory_cap=1024)
  logged = []
  rows = speed.run(cfg, progress=False, log=logged.append).rows
  assert len(rows) == 1, rows  # longer L are not attempted
  assert rows[0]["status"] == "oom" and rows[0]["detail"].endswith("than the 1.0 KiB memory cap")
  assert "median_ms" not in rows[0]
  assert "oom" in logged[0] and "skipped" in logged[0]


def test_a_layers_sweep_times_models_of_each_depth():
  # Fig. 18: one series per depth; each row records its num_layers, and a deeper model plans
  # more bytes (its parameters and activations) than a shallower one.
  cfg = speed.SpeedConfig(configs=("small",), attentions=("identity",), directions=("causal",),
                          modes=("fwdbwd",), seq_lens=(16,), repeats=1, num_layers=(1, 3))
  assert [[s["num_layers"] for s in series] for series in speed.plan(cfg)] == [[1], [3]]
  rows = speed.run(cfg, progress=False).rows
  assert [(r["num_layers"], r["status"]) for r in rows] == [(1, "ok"), (3, "ok")]
  assert rows[1]["xla_bytes"] > rows[0]["xla_bytes"]
  assert "num_layers" not in speed.plan(speed.SpeedConfig(configs=("small",)))[0][0]
  # The "draw it with" hint names the figure that reads such a sweep.
  assert speed.figure_of(cfg) == "speed-layers"
  assert speed.figure_of(speed.SpeedConfig(configs=("small",))) == "speed"


def test_time_cap_gives_a_timeout_row():
  cfg = speed.SpeedConfig(configs=("small",), attentions=("identity",), directions=("causal",),
                          modes=("fwd",), seq_lens=(16, 32), repeats=1, time_cap=0.05)
  rows = speed.run(cfg, progress=False, log=lambda s: None).rows
  assert [r["status"] for r in rows] == ["timeout"]
  assert "0.05 s time cap" in rows[0]["detail"]


def test_jobs_run_series_side_by_side_in_plan_order():
  cfg = speed.SpeedConfig(configs=("small",), attentions=("identity", "exact"),
                          directions=("bidirectional", "causal"), modes=("fwd",),
                          seq_lens=(16,), repeats=1, jobs=3)
  rows = speed.run(cfg, progress=False, log=lambda s: None).rows
  assert [(r["attention"], r["direction"], r["L"]) for r in rows] == [
      (a, d, 16) for a in ("identity", "exact") for d in ("bidirectional", "causal")]
  assert all(r["status"] == "ok" and r["lock_wait_s"] >= 0 for r in rows), rows


def _waiting_on(path, timeout=300):
  """Waits until a process is blocked on the flock of `path` (a "->" line of /proc/locks)."""
  inode = os.stat(path).st_ino
  deadline = time.time() + timeout
  while time.time() < deadline:
    with open("/proc/locks") as f:
      if any("->" in line and line.split()[-3].endswith(f":{inode}") for line in f):
        return
    time.sleep(0.05)
  pytest.fail(f"no process waited on {path} within {timeout} s")


def test_a_job_compiles_and_runs_only_while_it_holds_the_device_lock(tmp_path):
  # The lock is held here until the worker (which imports jax first) is seen waiting for it,
  # then 1 s more: the worker compiles and runs only after it, and reports its wait.
  lock = str(tmp_path / "device.lock")
  one = speed_worker.spec("small", "identity", "causal", "fwd", 16, layer=True)
  cfg = speed.SpeedConfig(repeats=1, time_cap=300, jobs=2)
  rows = []
  with open(lock, "a") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    worker = threading.Thread(target=lambda: rows.append(speed.run_one(one, cfg, lock)))
    worker.start()
    _waiting_on(lock)
    time.sleep(1.0)
  worker.join()
  (row,) = rows
  assert row["status"] == "ok", row
  assert row["lock_wait_s"] > 0.9 and row["wall_s"] > row["lock_wait_s"]


def test_running_out_of_memory_while_compiling_is_oom(monkeypatch):
  # Seen on an H200: XLA's autotuner allocated the 128 GiB score matrix of float32 exact
  # attention at L = 65,536 while compiling, before any buffer plan existed.
  class Jitted:
    def lower(self, *args):
      return self

    def compile(self):
      raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 128.02GiB")

  monkeypatch.setattr(speed_worker.jax, "jit", lambda fn: Jitted())
  row = speed_worker.measure(dict(speed_worker.spec("small", "exact", "causal", "fwd", 16, layer=True),
                                  repeats=1))
  assert row["status"] == "oom" and "128.02GiB" in row["detail"] and row["compile_s"] is None


def test_a_worker_killed_by_the_kernel_is_oom_and_a_crash_is_an_error(monkeypatch):
  one = speed_worker.spec("small", "exact", "causal", "fwd", 16, layer=False)
  cfg = speed.SpeedConfig()
  killed = subprocess.CompletedProcess([], -9, stdout="", stderr="")
  monkeypatch.setattr(speed.subprocess, "run", lambda *a, **k: killed)
  assert speed.run_one(one, cfg)["status"] == "oom"
  crashed = subprocess.CompletedProcess([], 1, stdout="", stderr="Traceback\nValueError: boom\n")
  monkeypatch.setattr(speed.subprocess, "run", lambda *a, **k: crashed)
  row = speed.run_one(one, cfg)
  assert row["status"] == "error" and row["detail"] == "ValueError: boom"


def _row(attention, direction, mode, length, ms, *, layer, peak=None, status="ok"):
  row = dict(speed_worker.spec("regular", attention, direction, mode, length, layer=layer), status=status)
  if status == "ok":
    row.update(median_ms=ms, min_ms=ms, max_ms=ms, peak_bytes=peak or 1, memory_source="rss")
  return row


def test_ratios_from_rows_against_hand_computed_values():
  rows = [
      _row("performer_softmax", "causal", "fwdbwd", 8192, 260.0, layer=True),
      _row("performer_softmax", "bidirectional", "fwdbwd", 8192, 200.0, layer=True),
      _row(speed.SCAN, "causal", "fwdbwd", 8192, 1040.0, layer=True),
      _row("performer_softmax", "bidirectional", "fwd", 16384, 100.0, layer=True),
      _row("performer_softmax", "causal", "fwdbwd", 4096, 1.0, layer=True, peak=4096 * 1000),
      _row("performer_softmax", "causal", "fwdbwd", 32768, 1.0, layer=True, peak=32768 * 1150),
      _row("identity", "bidirectional", "fwdbwd", 8192, 4000.0, layer=False),
      _row("performer_softmax", "bidirectional", "fwdbwd", 8192, 4800.0, layer=False),
  ]
  for n, perf, exact in ((512, 30, 20), (1024, 50, 60), (2048, 90, 200)):
    rows += [_row("performer_softmax", "bidirectional", "fwdbwd", n, perf, layer=False),
             _row("exact", "bidirectional", "fwdbwd", n, exact, layer=False)]
  for attention, ms in (("performer_softmax", 36.0), ("identity", 20.0)):
    rows.append(dict(_row(attention, "causal", "fwdbwd", 64, ms, layer=False), config="recall"))
  table = {r["id"]: r for r in speed_targets.ratios(rows, {"status": "ok", "gflops": 400.0})}
  assert table["2r"]["value"] == pytest.approx(1.8) and table["2r"]["met"] is False
  assert "exact not measured" in table["2r"]["detail"]
  assert table["1a"]["value"] == pytest.approx(1.3) and table["1a"]["met"]
  assert table["1b"]["value"] == pytest.approx(4.0) and table["1b"]["met"]
  assert table["2B"]["value"] == pytest.approx(1.2) and table["2B"]["met"]
  assert table["2U"]["met"] is None  # not measured
  flops = 8 * 16384 * 256 * 64 * 8  # per forward, all heads
  assert table["3"]["value"] == pytest.approx(flops / 0.1 / 1e9 / 400.0)
  assert table["4"]["value"] == pytest.approx(1.15) and table["4"]["met"] is False
  assert table["5B"]["value"] == 1024 and table["5B"]["met"]
  lines = speed_targets.format_ratios(list(table.values()))
  assert any("[2U]" in l and "not measured" in l for l in lines)
  assert any("[4]" in l and "NOT met" in l for l in lines)


def test_crossover_needs_performer_faster_at_every_longer_length():
  def pair(n, perf, exact, exact_status="ok"):
    return [_row("performer_softmax", "causal", "fwdbwd", n, perf, layer=False),
            _row("exact", "causal", "fwdbwd", n, exact, layer=False, status=exact_status)]
  keys = dict(config="regular", layer=False, direction="causal", mode="fwdbwd")
  rows = pair(512, 10, 20) + pair(1024, 30, 20) + pair(2048, 40, 80)
  assert speed_targets.crossover(rows, **keys) == 2048  # faster at 512 alone does not count
  rows = pair(512, 30, 20) + pair(1024, 30, 0, exact_status="oom")
  assert speed_targets.crossover(rows, **keys) == 1024  # exact out of memory: Performer wins
  assert speed_targets.crossover(pair(512, 30, 20), **keys) is None


def test_crossover_and_memory_are_against_the_fastest_exact_peer():
  keys = dict(config="regular", layer=False, direction="bidirectional", mode="fwdbwd")

  def at(n, attention, ms, peak, status="ok"):
    return _row(attention, "bidirectional", "fwdbwd", n, ms, layer=False, peak=peak,
                status=status)
  rows = [at(512, "performer_softmax", 30, 300), at(1024, "performer_softmax", 50, 500),
          at(2048, "performer_softmax", 90, 900),
          at(512, "exact", 20, 400), at(1024, "exact", 60, 1200), at(2048, "exact", 200, 4000),
          at(512, "exact_blockwise", 40, 200), at(1024, "exact_blockwise", 45, 400),
          at(2048, "exact_blockwise", 0, 0, status="timeout")]
  # Naive exact alone: Performer faster from 1024; the blockwise peer is faster at 1024,
  # and its timeout at 2048 counts as slower there.
  assert speed_targets.crossover(rows, exact=("exact",), **keys) == 1024
  assert speed_targets.crossover(rows, **keys) == 2048
  # Memory: 300/200 at 512 and 500/400 at 1024 (blockwise smallest), 900/4000 at 2048.
  assert speed_targets.memory_ratio(rows, **keys) == (pytest.approx(1.5), 512)
  assert speed_targets.memory_ratio(rows, exact=("exact",), **keys) == (pytest.approx(0.75), 512)
  table = {r["id"]: r for r in speed_targets.ratios(rows, {"status": "error"})}
  assert table["5B"]["value"] == 2048 and table["5B"]["met"]
  assert "against naive exact alone: 1024" in table["5B"]["detail"]
  assert table["5mB"]["value"] == pytest.approx(1.5) and table["5mB"]["met"] is False
  assert table["5U"]["met"] is None and table["5pB"]["met"] is None


def test_a_deadline_skips_what_it_did_not_start_and_skipped_is_not_slower():
  cfg = speed.SpeedConfig(configs=("small",), attentions=("exact", "performer_softmax"),
                          directions=("causal",), modes=("fwd",), seq_lens=(16, 32), repeats=1,
                          deadline=0)
  result = speed.run(cfg, progress=False, log=lambda s: None)
  assert [(r["attention"], r["L"], r["status"]) for r in result.rows] == [
      (a, n, "skipped") for a in ("exact", "performer_softmax") for n in (16, 32)]
  assert "--deadline of 0 s" in result.rows[0]["detail"]
  # An exact row skipped for time says nothing of its speed; a timeout does.
  keys = dict(config="regular", layer=False, direction="causal", mode="fwdbwd")
  rows = [_row("performer_softmax", "causal", "fwdbwd", 1024, 30, layer=False),
          _row("exact", "causal", "fwdbwd", 512, 10, layer=False),
          _row("exact", "causal", "fwdbwd", 1024, 0, layer=False, status="skipped")]
  assert speed_targets.crossover(rows, **keys) is None
  rows[-1]["status"] = "timeout"
  assert speed_targets.crossover(rows, **keys) == 1024


def test_performer_pytorch_ratios_pair_equal_shapes():
  rows = [_row("performer_softmax", d, "fwdbwd", 8192, ms, layer=True)
          for d, ms in (("bidirectional", 100.0), ("causal", 120.0))]
  rows += [_row(speed_pytorch.NAME, d, "fwdbwd", 8192, ms, layer=True)
           for d, ms in (("bidirectional", 290.0), ("causal", 6000.0))]
  rows.append(_row(speed_pytorch.NAME, "causal", "fwd", 8192, 1.0, layer=True))  # no partner
  pairs = speed_targets.peer_ratios(rows)
  assert [(p["direction"], p["ratio"]) for p in pairs] == [
      ("bidirectional", pytest.approx(2.9)), ("causal", pytest.approx(50.0))]
  table = {r["id"]: r for r in speed_targets.ratios(rows, {"status": "error"})}
  assert table["5pB"]["met"] is False and table["5pU"]["met"] is True


def test_peers_flags_are_checked(monkeypatch):
  monkeypatch.setattr(speed.speed_pytorch, "missing", lambda: "needs torch (the peers extra)")
  with pytest.raises(UserError, match="needs torch"):
    speed.SpeedConfig(layer=True, peers=True)
  monkeypatch.setattr(speed.speed_pytorch, "missing", lambda: None)
  with pytest.raises(UserError, match="--peers compares attention layers: add --layer-only"):
    speed.SpeedConfig(peers=True)
  with pytest.raises(UserError, match="float32 only"):
    speed.SpeedConfig(layer=True, peers=True, dtype="bfloat16")


def test_performer_pytorch_against_ours_end_to_end_on_a_tiny_shape():
  reason = speed_pytorch.missing()
  if reason:
    pytest.skip(reason)
  cfg = speed.SpeedConfig(configs=("small",), attentions=("performer_softmax",),
                          modes=("fwd", "fwdbwd"), seq_lens=(16,), layer=True, repeats=1,
                          peers=True)
  result = speed.run(cfg, progress=False, log=lambda s: None)
  theirs = [r for r in result.rows if r["attention"] == speed_pytorch.NAME]
  assert len(theirs) == 4 and all(r["status"] == "ok" and r["peak_bytes"] > 0 for r in theirs)
  assert len(speed_targets.peer_ratios(result.rows)) == 4
  assert any("performer-pytorch / ours" in line for line in speed.report(cfg, result))


def test_performer_pytorch_estimates_the_same_attention_as_ours():
  # The comparison times one quantity: with many features both estimate exact softmax
  # attention of the same raw q, k, v (each scales by d^(-1/4) itself).
  reason = speed_pytorch.missing()
  if reason:
    pytest.skip(reason)
  import numpy as np  # pylint: disable=import-outside-toplevel
  from performer import favor  # pylint: disable=import-outside-toplevel
  for causal in (False, True):
    spec = {"config": "small", "direction": "causal" if causal else "bidirectional",
            "mode": "fwd", "L": 12}
    run, inputs = speed_pytorch.build(spec, speed_worker.CONFIGS["small"], num_features=8192)
    for x in inputs[:2]:  # q, k at a scale where m = 8192 features estimate well (Lemma 2)
      x.mul_(0.3)
    theirs = run().numpy().transpose(0, 2, 1, 3)  # [1, L, H, d] as ours
    q, k, v = (x.detach().numpy().transpose(0, 2, 1, 3) for x in inputs)
    exact = np.asarray(favor.softmax_attention(q, k, v, causal=causal))
    uniform = np.broadcast_to(v.mean(axis=1, keepdims=True), v.shape)  # attention ignored
    error = np.abs(theirs - exact).mean()
    assert error < 0.05 and error < 0.25 * np.abs(uniform - exact).mean(), error


@pytest.mark.parametrize("args, message", [
    (("--attention", "nope"), "unknown attention 'nope'; choose from exact, exact_blockwise, "
                              "exact_dot_product, identity, linear, linformer, "),
    (("--attention", "favor_scan"), "--layer-only"),
    (("--config", "huge"), "unknown config 'huge'; choose from regular, small"),
    (("--direction", "both"), "unknown direction 'both'; choose from bidirectional, causal"),
    (("--mode", "bwd"), "unknown mode 'bwd'; choose from fwd, fwdbwd"),
    (("--mode", ""), "give at least one mode"),
    (("--repeats", "0"), "--repeats must be >= 1"),
    (("--time-cap", "-1"), "--time-cap must be a finite number of seconds > 0"),
    (("--time-cap", "0"), "--time-cap must be a finite number of seconds > 0"),
    (("--time-cap", "inf"), "--time-cap must be a finite number of seconds > 0, got inf"),
    (("--seq-lens", "0"), "--seq-lens must be >= 1, got 0"),
    (("--seq-lens", ""), "--seq-lens: give at least one L"),
    (("--seq-lens", "512,512"), "512 is given twice in '512,512'"),
    (("--seq-lens", "512,,1024"), "expected comma-separated integers, got an empty item in "
                                  "'512,,1024'"),
    (("--seq-lens", "16,1000000000000"), "--seq-lens must be at most 2147483647 (int32 positions)"),
    (("--deadline", "-1"), "--deadline must be a finite number of seconds >= 0"),
    (("--memory-cap", "lots"), "a positive size such as 512M"),
    (("--memory-cap", "0"), "a positive size such as 512M"),
    (("--memory-cap", "inf"), "a positive size such as 512M"),
    (("--out", "/proc/nope/x.json"), "cannot"),
    (("--out", "/proc/x.json"), "cannot write to folder /proc"),  # os.access passes as root
    # Selections that measure nothing, or flags that would be ignored:
    (("--layer-only", "--attention", "favor_scan", "--direction", "bidirectional"),
     "this selection measures nothing: favor_scan runs causal only"),
    # which attentions take a form option is the registry's fact (linear takes a chunk_size too)
    (("--attention", "exact,identity", "--chunk-sizes", "64"),
     "--chunk-sizes applies to the attentions with a chunk_size option (linear, performer_favorpp, "
     "performer_favorsharp, performer_relu, performer_softmax, reformer); none is selected"),
    (("--attention", "linear", "--batch-tokens", "256"), "--batch-tokens applies to the "
     "attentions with a batch_tokens option (performer_favorpp, performer_favorsharp, "
     "performer_relu, performer_softmax); none is selected"),
    (("--attention", "performer_softmax", "--batch-tokens", "-1"),
     "batch tokens must be >= 0, got -1"),
    (("--attention", "performer_softmax", "--direction", "bidirectional", "--spans", "64"),
     "--spans applies to causal attention: add --direction causal"),
    (("--attention", "performer_softmax", "--spans", "0"), "spans must be >= 1"),
    # What --peers lacks is named before whether torch is installed (it is not in CI):
    (("--layers", "2,0"), "--layers must be >= 1, got 0"),
    (("--layers", "2", "--layer-only"), "--layers sets the model's depth: drop --layer-only"),
    (("--peers",), "--peers compares attention layers: add --layer-only"),
    (("--peers", "--layer-only", "--attention", "exact"), "keep performer_softmax in --attention"),
    (("--peers", "--layer-only", "--attention", "performer_softmax", "--dtype", "bfloat16"),
     "--peers runs float32 only"),
])
def test_bad_flags_are_one_line_errors(args, message, tmp_path):
  # --seq-lens 16 --config small: anything that got past the checks would finish fast.
  result = _cli("--seq-lens", "16", "--config", "small", "--out", str(tmp_path / "s.json"), *args)
  assert result.returncode == 2, result.stdout
  assert "Traceback" not in result.stderr
  assert message in result.stderr.strip().splitlines()[-1]
  assert not (tmp_path / "s.json").exists()


def test_a_failed_worker_s_row_names_its_exception_not_jax_s_note_after_it():
  stderr = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
            "OverflowError: An overflow was encountered while parsing an argument\n"
            "--------------------\nFor simplicity, JAX has removed its internal frames from the "
            "traceback of the following exception.\n")
  assert speed._exception_line(stderr, 1) == ("OverflowError: An overflow was encountered "
                                               "while parsing an argument")
  assert speed._exception_line("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: x\n", 1) == \
      "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: x"
  assert speed._exception_line("a warning\n", 1) == "a warning"
  assert speed._exception_line("", -6) == "worker exited with -6"


def test_nothing_is_measured_before_the_output_is_checked(monkeypatch):
  cfg = speed.SpeedConfig(configs=("small",), attentions=("exact",), directions=("causal",),
                          modes=("fwd",), seq_lens=(16,), repeats=1)
  monkeypatch.setattr(speed, "run", lambda *a, **k: pytest.fail("measured first"))
  with pytest.raises(UserError, match="cannot write to folder /proc"):
    results.main(speed, cfg, "/proc/speed.json", progress=False)


def test_sizes_are_printed_with_a_unit_that_fits():
  assert [memory.format_bytes(n) for n in (0, 512, 1024, 1536 * 2 ** 10, 20.2 * 2 ** 30)] == [
      "0 B", "512 B", "1.0 KiB", "1.5 MiB", "20.20 GiB"]


def test_the_recall_config_times_the_recall_studys_step():
  """Batch 64, two attention-only layers, FAVOR+ with m = 64 (gin/recall/base.gin's model)."""
  fn, (params, rest, tokens) = speed_worker._build(
      speed_worker.spec("recall", "performer_softmax", "causal", "fwdbwd", 64, layer=False))
  assert tokens.shape == (64, 65)
  shapes = {tuple(x.shape) for x in jax.tree.leaves(rest)}
  assert (64, 64) in shapes  # W: [m, d] with m = 64, d = 64
  loss, grads = fn(params, rest, tokens)
  assert jnp.isfinite(loss) and len(jax.tree.leaves(grads)) == len(jax.tree.leaves(params))
  assert not any("mlp" in str(path) for path, _ in jax.tree_util.tree_leaves_with_path(params))


def test_form_options_come_from_the_registry():
  # linear takes a chunk_size and a span (favor's causal form) but has no batch groups or m
  got = speed_worker.spec("small", "linear", "causal", "fwd", 16, layer=True, chunk_size=8, span=8,
                   batch_tokens=64)
  assert (got["chunk_size"], got["span"], got["batch_tokens"]) == (8, 8, None)
  assert speed_worker._options(got) == {"chunk_size": 8, "span": 8}  # pylint: disable=protected-access
  favor_plus = speed_worker.spec("small", "performer_softmax", "bidirectional", "fwd", 16, layer=True,
                          chunk_size=8, span=8, batch_tokens=64)
  assert (favor_plus["chunk_size"], favor_plus["span"], favor_plus["batch_tokens"]) == (8, None, 64)
  assert speed_worker._options(favor_plus) == {  # pylint: disable=protected-access
      "num_features": speed_worker.CONFIGS["small"].num_features, "chunk_size": 8,
      "batch_tokens": 64}
  assert speed_worker.form_options("exact") == speed_worker.form_options(speed.SCAN) == ()


def test_fused_flag_times_both_forms_of_the_performers_only(tmp_path):
  cfg = speed.SpeedConfig(configs=("small",), attentions=("performer_softmax", "exact"),
                          directions=("causal",), modes=("fwd",), seq_lens=(16,), layer=True,
                          repeats=1, fused=(True, False))
  rows = speed.run(cfg, progress=False, log=lambda s: None).rows
  assert [(r["attention"], r["fused"], r["status"]) for r in rows] == [
      ("performer_softmax", True, "ok"), ("performer_softmax", False, "ok"), ("exact", None, "ok")]
  assert not any(speed_targets._default_form(r) for r in rows[:2])  # pylint: disable=protected-access
  bad = subprocess.run([sys.executable, "-m", "performer.cli", "speed", "--fused", "yes"],
                       capture_output=True, text=True, env=ENV)
  assert bad.returncode == 2 and "--fused" in bad.stderr and "Traceback" not in bad.stderr
  only_exact = subprocess.run([sys.executable, "-m", "performer.cli", "speed", "--attention",
                               "exact", "--fused", "on"], capture_output=True, text=True, env=ENV)
  assert only_exact.returncode != 0 and "--fused applies to" in only_exact.stderr
