"""scripts/gpu_check.sh end to end in its tiny mode, on the CPU: on a GPU it only has to start."""

import json
import os
import subprocess

import pytest

from performer import favor
from testlib import ROOT


@pytest.mark.slow  # about 3 minutes on 2 cores (a fresh process per configuration)
def test_gpu_check_runs_end_to_end_in_tiny_mode(tmp_path):
  env = {**os.environ, "OUT": str(tmp_path / "out"), "DATA": str(tmp_path / "data")}
  done = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_check.sh"), "--tiny"],
                        capture_output=True, text=True, env=env, cwd=ROOT, check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  assert done.stdout.startswith("device: cpu: ")
  out = tmp_path / "out"
  expected = {"speed_layer_bfloat16": {"exact", "exact_dot_product", "performer_softmax"},
              "speed_layer_float32": {"exact", "performer_softmax"},
              "speed_blocks_bfloat16": {"performer_softmax"},
              "speed_chunks_bfloat16": {"performer_softmax"},
              "speed_model_bfloat16": {"exact_dot_product", "performer_softmax", "identity"},
              "speed_fused_bfloat16": {"exact_dot_product", "performer_softmax"},
              "speed_fused_model_bfloat16": {"exact_dot_product", "performer_softmax"}}
  for name, attentions in expected.items():
    record = json.loads((out / f"{name}_tiny.json").read_text())
    rows = record["rows"]
    assert {r["attention"] for r in rows} == attentions
    assert all(r["status"] == "ok" for r in rows), [r for r in rows if r["status"] != "ok"]
    assert {r.get("implementation") for r in rows if r["attention"] == "exact_dot_product"} <= {
        "xla"}  # cudnn needs an NVIDIA GPU
    assert (out / f"{name}_tiny.png").stat().st_size > 10_000
  layers = json.loads((out / "speed_layers_bfloat16_tiny.json").read_text())["rows"]
  assert sorted((r["attention"], r["direction"], r["num_layers"]) for r in layers) == [
      (a, direction, n) for a in ("exact_dot_product", "identity", "performer_softmax")
      for direction in ("bidirectional", "causal") for n in (1, 2)]  # (B) and (U)
  assert (out / "speed_layers_bfloat16_tiny.png").stat().st_size > 10_000
  blocks = json.loads((out / "speed_blocks_bfloat16_tiny.json").read_text())["rows"]
  assert sorted((r["direction"], r["chunk_size"]) for r in blocks) == [
      ("bidirectional", 8), ("bidirectional", 16)]
  chunks = json.loads((out / "speed_chunks_bfloat16_tiny.json").read_text())["rows"]
  assert sorted((r["direction"], r["chunk_size"], r["span"]) for r in chunks) == [
      ("causal", c, s) for c in (8, 16) for s in (16, 32)]
  cpu = favor.form("cpu")._asdict()  # the form the CPU runs with, as the rows record it
  assert all(r["form"] == cpu for r in blocks + chunks), [r["form"] for r in blocks + chunks]
  for name in ("speed_fused_bfloat16", "speed_fused_model_bfloat16"):  # the kernels and XLA's
    rows = json.loads((out / f"{name}_tiny.json").read_text())["rows"]
    assert sorted((r["direction"], r["fused"]) for r in rows if r["fused"] is not None) == [
        (d, f) for d in ("bidirectional", "causal") for f in (False, True)]
  assert "== fused kernel tests" in done.stdout
  targets = json.loads((out / "speed_targets_tiny.json").read_text())
  assert {r["status"] for r in targets["rows"]} == {"skipped"}  # tiny: the plan only
  throughput = json.loads((out / "throughput_tiny.json").read_text())
  assert throughput["rows"] and all(r["tokens_per_s"] > 0 for r in throughput["rows"])
