"""approx-error: rows, orderings on a small real sweep, and bad configurations."""

import json
import os

import numpy as np
import pytest

from performer import cli
from performer.errors import UserError
from performer.experiments import approx_error, results


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
  cfg = approx_error.ApproxErrorConfig(
      seq_len=256, dim=16, features=(8, 64), samples=8, input_scales=(0.5, 2.0),
      variants=(("positive", "orthogonal", "chi"), ("positive", "iid", "chi"),
                ("trig", "orthogonal", "chi"), ("trig", "iid", "chi")))
  out = tmp_path_factory.mktemp("ae") / "sub" / "result.json"
  rows = results.main(approx_error, cfg, str(out), progress=False)[0].rows
  return cfg, rows, out


def _mse(rows, scale, kernel, kind, m, stat="mse_median"):
  (row,) = [r for r in rows if (r["input_scale"], r["kernel"], r["projection"], r["m"])
            == (scale, kernel, kind, m)]
  return row[stat]


def test_writes_complete_rows(small_run):
  cfg, rows, out = small_run
  record = json.loads(out.read_text())
  assert record["experiment"] == "approx_error" and record["rows"] == rows
  assert record["config"]["seq_len"] == 256 and record["environment"]["jax"]
  assert len(rows) == 2 * 4 * 2  # scales x variants x m
  for row in rows:
    for key in ("kernel", "projection", "scaling", "m", "mse_mean", "mse_std", "mse_median",
                "samples", "L", "d", "seed", "input_scale", "query_norm_mean", "logit_std"):
      assert key in row
    assert row["samples"] == 8 and row["mse_min"] <= row["mse_median"] <= row["mse_max"]
  # The documented normalisation: scaled |x| ~ s, logit std ~ s^2 / sqrt(d).
  for row in rows:
    s = row["input_scale"]
    assert abs(row["query_norm_mean"] - s) < 0.1 * s
    assert abs(row["logit_std"] - s * s / 4) < 0.15 * s * s / 4
  assert not list(out.parent.glob(".tmp-*"))  # no temporary file left behind


def test_orderings_hold(small_run):
  _, rows, _ = small_run
  for kernel in ("positive", "trig"):  # more features, less error
    assert _mse(rows, 0.5, kernel, "orthogonal", 64) < _mse(rows, 0.5, kernel, "orthogonal", 8)
  # Small kernel values (scale 2): positive beats trig by orders of magnitude.
  for m in (8, 64):
    assert _mse(rows, 2.0, "positive", "orthogonal", m) * 100 < _mse(rows, 2.0, "trig", "orthogonal", m)
  # Near-uniform attention (scale 0.5): trig is the more accurate one.
  assert _mse(rows, 0.5, "trig", "orthogonal", 64) < _mse(rows, 0.5, "positive", "orthogonal", 64)
  # Orthogonal below iid at every m; by a wide margin for trig once whole
  # d x d blocks are used (m=64), modestly for positive (Theorem 2: ~2/(d+2)).
  for kernel in ("positive", "trig"):
    for m in (8, 64):
      assert _mse(rows, 0.5, kernel, "orthogonal", m) < _mse(rows, 0.5, kernel, "iid", m)
  assert _mse(rows, 0.5, "trig", "orthogonal", 64) * 3 < _mse(rows, 0.5, "trig", "iid", 64)


def test_mse_matches_an_independent_computation():
  cfg = approx_error.ApproxErrorConfig(seq_len=64, dim=8, features=(16,), samples=2,
                                       input_scales=(1.0,),
                                       variants=(("positive", "iid", "chi"),))
  (row,) = approx_error.run(cfg, progress=False).rows
  mses = []
  for sample in range(2):
    q, k, v = (np.asarray(a[0, :, 0], np.float64) for a in approx_error._inputs(cfg, 1.0, sample))
    W = np.asarray(approx_error.projection_for(cfg, ("positive", "iid", "chi"), 16, sample),
                   np.float64)
    logits = q @ k.T / np.sqrt(8)
    p = np.exp(logits - logits.max(1, keepdims=True))
    exact = (p / p.sum(1, keepdims=True)) @ v
    x, y = q * 8 ** -0.25, k * 8 ** -0.25
    phi = lambda z: np.exp(z @ W.T - 0.5 * (z * z).sum(1, keepdims=True)) / 4.0
    a = phi(x) @ phi(y).T
    mses.append(np.mean(((a @ v) / a.sum(1, keepdims=True) - exact) ** 2))
  assert row["mse_mean"] == pytest.approx(np.mean(mses), rel=1e-3)
  assert row["mse_median"] == pytest.approx(np.median(mses), rel=1e-3)


def test_a_data_dependent_estimator_matches_an_independent_computation():
  # FAVOR++ on anisotropic inputs: A* from the sample's own moments, in float64 numpy.
  variant = ("gerf", "orthogonal", "chi")
  cfg = approx_error.ApproxErrorConfig(seq_len=64, dim=8, features=(16,), samples=2,
                                       input_scales=(1.5,), variants=(variant,), anisotropy=8.0)
  (row,) = approx_error.run(cfg, progress=False).rows
  mses = []
  for sample in range(2):
    q, k, v = (np.asarray(a[0, :, 0], np.float64) for a in approx_error._inputs(cfg, 1.5, sample))
    W = np.asarray(approx_error.projection_for(cfg, variant, 16, sample), np.float64)
    p = np.exp(q @ k.T / np.sqrt(8) - (q @ k.T / np.sqrt(8)).max(1, keepdims=True))
    exact = (p / p.sum(1, keepdims=True)) @ v
    x, y = q * 8 ** -0.25, k * 8 ** -0.25
    rho = ((x * x).sum(1).mean() + (y * y).sum(1).mean() + 2 * x.mean(0) @ y.mean(0)) / 8
    A = (1 - 2 * rho - np.sqrt((2 * rho + 1) ** 2 + 8 * rho)) / 16
    phi = lambda z: np.exp(A * (W * W).sum(1) + np.sqrt(1 - 4 * A) * z @ W.T
                           - 0.5 * (z * z).sum(1, keepdims=True)) * (1 - 4 * A) ** 2 / 4.0
    a = phi(x) @ phi(y).T
    mses.append(np.mean(((a @ v) / a.sum(1, keepdims=True) - exact) ** 2))
  assert row["mse_mean"] == pytest.approx(np.mean(mses), rel=1e-3)
  assert row["anisotropy"] == 8.0 and abs(row["query_norm_mean"] - 1.5) < 0.2
  q, k, _ = approx_error._inputs(cfg, 1.5, 0)
  # Queries spread unevenly over directions that are not the axes, keys over others.
  cov = lambda x: np.cov(np.asarray(x[0, :, 0]).T)
  spread = np.linalg.eigvalsh(cov(q))
  assert spread.max() / spread.min() > 8 and np.abs(cov(q) - np.diag(np.diag(cov(q)))).max() > 0.1
  assert not np.allclose(cov(q), cov(k), atol=0.1)


@pytest.mark.parametrize("kwargs, match", [
    # Messages name the command's flags, not the config's fields.
    (dict(seq_len=0), "--seq-len must be >= 1, got 0"),
    (dict(dim=-2), "--dim must be >= 1, got -2"),
    (dict(samples=0), "--samples must be >= 1, got 0"),
    (dict(features=()), "--features must be counts m >= 1"),
    (dict(features=(8, 0)), "--features must be counts m >= 1, got 8,0"),
    (dict(input_scales=(0.0,)), "--input-scale values must be finite and > 0, got 0"),
    (dict(input_scales=(float("nan"),)), "finite"),
    (dict(input_scales=(1.0, 1.0004)), "--input-scale values must not repeat"),
    (dict(features=(16, 16)), "^--features values must not repeat$"),
    (dict(seed=2 ** 40), "--seed"),
    (dict(variants=(("relu", "iid", "chi"),)),
     "not a softmax kernel; choose from positive, hyperbolic, trig, gerf, derf, saderf$"),
    (dict(anisotropy=0.5), "--anisotropy must be a finite ratio >= 1, got 0.5"),
    (dict(dim=1, variants=(("positive", "simplex", "chi"),)), "--dim >= 2"),
    (dict(variants=(("positive", "qr", "chi"),)), "unknown projection 'qr'; choose from iid, "),
    (dict(variants=(("positive", "iid", "unit"),)), "unknown scaling"),
    (dict(dim=12, variants=(("positive", "hadamard", "chi"),)), "power of two"),
    (dict(variants=(("positive", "iid", "chi"),) * 2), "must not repeat"),
])
def test_bad_configurations_are_user_errors(kwargs, match):
  with pytest.raises(UserError, match=match):
    approx_error.ApproxErrorConfig(**kwargs)


def test_parse_variants():
  assert approx_error.parse_variants("positive/iid/chi, trig/orthogonal/sqrt_d") == (
      ("positive", "iid", "chi"), ("trig", "orthogonal", "sqrt_d"))
  with pytest.raises(UserError, match="kernel/projection/scaling"):
    approx_error.parse_variants("positive/iid")
  with pytest.raises(UserError, match="empty"):
    approx_error.parse_variants("")
  assert all(v[1] != "hadamard" for v in approx_error.ApproxErrorConfig(dim=12).variants)
  assert any(v[1] == "hadamard" for v in approx_error.ApproxErrorConfig(dim=16).variants)


def test_unwritable_output_fails_before_the_sweep(tmp_path):
  cfg = approx_error.ApproxErrorConfig(seq_len=8, dim=4, features=(4,), samples=1,
                                       input_scales=(1.0,))
  with pytest.raises(UserError, match="is a folder"):
    results.main(approx_error, cfg, str(tmp_path), progress=False)
  blocker = tmp_path / "file"
  blocker.write_text("")
  with pytest.raises(UserError, match="cannot create folder"):
    results.main(approx_error, cfg, str(blocker / "sub" / "r.json"), progress=False)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs Linux /proc")
def test_an_output_folder_that_refuses_files_fails_before_the_sweep(monkeypatch):
  # /proc exists and passes os.access for root, but no file can be made there.
  cfg = approx_error.ApproxErrorConfig(seq_len=8, dim=4, features=(4,), samples=1,
                                       input_scales=(1.0,))
  monkeypatch.setattr(approx_error, "run", lambda *a, **k: pytest.fail("swept first"))
  with pytest.raises(UserError, match="cannot write to folder /proc"):
    results.main(approx_error, cfg, "/proc/approx_error.json", progress=False)


@pytest.mark.parametrize("args, message", [
    (("--samples", "0"), "--samples must be >= 1, got 0"),
    (("--seq-len", "-8"), "--seq-len must be >= 1, got -8"),
    (("--features", "0"), "--features must be counts m >= 1, got 0"),
    (("--features", ""), "--features must be counts m >= 1, got nothing"),
    (("--input-scale", "1,-1"), "--input-scale values must be finite and > 0, got 1,-1"),
])
def test_bad_flags_are_one_line_errors_naming_the_flag(args, message, tmp_path, capsys,
                                                       monkeypatch):
  monkeypatch.setattr(approx_error, "run", lambda *a, **k: pytest.fail("swept"))
  assert cli.main(["approx-error", *args, "--out", str(tmp_path / "a.json")]) == 2
  assert capsys.readouterr().err == f"performer approx-error: error: {message}\n"
  assert not list(tmp_path.iterdir())


def test_scales_past_max_norm_are_refused_before_the_sweep(tmp_path, monkeypatch):
  cfg = approx_error.ApproxErrorConfig(seq_len=32, dim=16, features=(4,), samples=2,
                                       input_scales=(1.0, 200.0))
  monkeypatch.setattr(approx_error, "_squared_errors", lambda *a: pytest.fail("swept"))
  with pytest.raises(UserError, match=r"--input-scale 200: scaled queries and keys reach "
                     r"\|x\| = \d+.*past favor.MAX_NORM = 100"):
    results.main(approx_error, cfg, str(tmp_path / "a.json"), progress=False)
  assert not (tmp_path / "a.json").exists()
