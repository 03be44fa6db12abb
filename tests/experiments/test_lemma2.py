"""lemma2: Lemma 2's ratio r against hand-derived values, Monte Carlo against closed form, JSON, CLI."""

import json
import math

import numpy as np
import pytest

from performer import cli
from performer.errors import UserError
from performer.experiments import lemma2, results
from performer.favor import theory

SMALL = {"features": 32, "angles": 16, "lengths": 8, "slice_angles": 8, "samples": 4000}


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
  cfg = lemma2.Lemma2Config(**SMALL)
  out = tmp_path_factory.mktemp("lemma2") / "sub" / "lemma2.json"
  result, _ = results.main(lemma2, cfg, str(out), progress=False)
  rows, extra = result.rows, result.extra
  return cfg, rows, extra, out


def _hand_r(phi, l):
  """Lemma 2's ratio written out for |x| = |y| = l at angle phi (docs/ARCHITECTURE.md,
  experiments/lemma2.py)."""
  c = np.cos(phi)
  return (0.5 * np.exp(-4 * l * l * c) * (1 - np.exp(-2 * l * l * (1 - c))) ** 2
          / (1 - np.exp(-2 * l * l * (1 + c))))


def test_utility_is_lemma2_ratio_and_symmetric():
  rng = np.random.default_rng(0)
  phi, l = rng.uniform(-3.1, 3.1, 50), rng.uniform(-2, 2, 50)
  np.testing.assert_allclose(lemma2.utility(phi, l), _hand_r(phi, l), rtol=1e-9)
  r = lemma2.utility(phi, l)
  for other in (lemma2.utility(-phi, l), lemma2.utility(phi, -l), lemma2.utility(-phi, -l)):
    np.testing.assert_allclose(other, r, rtol=1e-12)
  # The same pair in a higher dimension and at another m gives the same MSE ratio.
  x, y = lemma2.pair(phi, l, d=7)
  np.testing.assert_allclose(theory.softmax_kernel_mse(x, y, 5, "trig")
                             / theory.softmax_kernel_mse(x, y, 5, "positive"), r, rtol=1e-9)


def test_known_values_of_r():
  for l in (0.3, 1.0, 2.0):
    assert lemma2.utility(0.0, l) == 0.0  # x = y: sin^2 + cos^2 = 1, trig is exact
    # phi = pi/2: x.y = 0 and |x + y|^2 = |x - y|^2 = 2 l^2, so r = (1 - exp(-2 l^2)) / 2.
    assert lemma2.utility(math.pi / 2, l) == pytest.approx((1 - math.exp(-2 * l * l)) / 2, rel=1e-12)
  assert lemma2.utility(math.pi / 2, 1.0) == pytest.approx(0.4323323584, rel=1e-9)
  # phi = 3pi/4, l = 1: 1/2 e^(2 sqrt 2) (1 - e^-(2 + sqrt 2))^2 / (1 - e^-(2 - sqrt 2)).
  assert lemma2.utility(3 * math.pi / 4, 1.0) == pytest.approx(17.84645, rel=1e-6)
  # phi -> pi: (pi - phi)^2 r -> 2 sinh(2 l^2)^2 / l^2 (= 26.308 at l = 1): r -> infinity.
  for l in (0.5, 1.0):
    psi = 1e-4
    assert psi ** 2 * lemma2.utility(math.pi - psi, l) == pytest.approx(
        2 * math.sinh(2 * l * l) ** 2 / (l * l), rel=1e-6)
  assert 2 * math.sinh(2) ** 2 == pytest.approx(26.30823, rel=1e-6)
  assert math.isinf(lemma2.utility(math.pi, 1.0))
  # Small kernel values (phi near pi): positive features win by orders of magnitude.
  for l in (0.5, 1.0, 2.0):
    assert lemma2.utility(math.pi - 0.1, l) > 100
  # r increases with phi on [0, pi) and crosses 1 once.
  curve = lemma2.utility(np.linspace(0, math.pi - 1e-3, 2001), 1.0)
  assert np.all(np.diff(curve) > 0)
  star = lemma2.crossing_angle(1.0)
  assert lemma2.utility(star, 1.0) == pytest.approx(1.0, abs=1e-9)
  assert 1.74 < star < 1.75


@pytest.mark.parametrize("kernel", ["positive", "trig"])
@pytest.mark.parametrize("phi, l", [(0.4, 0.5), (2.0, 1.0), (3.0, 0.8)])
def test_feature_moments_by_quadrature(kernel, phi, l):
  """One feature's term is a function of a standard normal g; Gauss-Hermite integrates it."""
  x, y = lemma2.pair(phi, l)
  g, weight = np.polynomial.hermite_e.hermegauss(200)
  weight = weight / math.sqrt(2 * math.pi)
  if kernel == "positive":
    term = np.exp(np.linalg.norm(x + y) * g - 0.5 * (x @ x + y @ y))
  else:
    term = math.exp(0.5 * (x @ x + y @ y)) * np.cos(np.linalg.norm(x - y) * g)
  mean = weight @ term
  assert mean == pytest.approx(math.exp(x @ y), rel=1e-10)  # unbiased
  var, mu4 = lemma2.feature_moments(kernel, x, y)
  assert var == pytest.approx(weight @ (term - mean) ** 2, rel=1e-8)
  assert mu4 == pytest.approx(weight @ (term - mean) ** 4, rel=1e-6)
  assert var / 17 == pytest.approx(theory.softmax_kernel_mse(x, y, 17, kernel), rel=1e-10)


@pytest.mark.parametrize("phi, l", [(math.pi / 2, 1.0), (3 * math.pi / 4, 1.0), (2.8, 1.5),
                                    (1.0, 0.5)])
def test_monte_carlo_agrees_with_lemma2(phi, l):
  import jax  # pylint: disable=import-outside-toplevel
  m, n = 32, 4000
  x, y = lemma2.pair(phi, l, d=3)  # d = 3: the estimator's law does not depend on d
  for i, kernel in enumerate(("trig", "positive")):
    exact = theory.softmax_kernel_mse(x, y, m, kernel)
    se = lemma2.mc_standard_error(kernel, x, y, m, n)
    assert se < 0.2 * exact  # a point where a z-test means something
    mc, sample_se = lemma2.monte_carlo(kernel, x, y, m, n, jax.random.key(100 + i))
    assert abs(mc - exact) < 4 * se, (kernel, mc, exact, se)
    if kernel == "trig":  # bounded terms: the sample s.e. estimates the exact one well
      assert 0.8 < sample_se / se < 1.25


def test_writes_the_result_file(small_run):
  _, rows, extra, out = small_run
  record = json.loads(out.read_text())
  assert record["experiment"] == "lemma2" and record["rows"] == rows
  assert record["config"]["features"] == 32 and record["config"]["dim"] == 2
  assert not list(out.parent.glob(".tmp-*"))
  # Rows: the slice l = 1 at phi = k pi / 8, closed forms from theory.py.
  assert [r["phi"] for r in rows] == pytest.approx([k * math.pi / 8 for k in range(8)])
  for row in rows:
    x, y = lemma2.pair(row["phi"], 1.0)
    assert row["l"] == 1.0 and row["kernel_value"] == pytest.approx(math.exp(math.cos(row["phi"])))
    for kernel in lemma2.KERNELS:
      assert row[f"mse_{kernel}"] == pytest.approx(theory.softmax_kernel_mse(x, y, 32, kernel))
      assert row[f"mc_{kernel}_se"] >= 0 and f"mc_{kernel}_z" in row
    assert row["r"] == pytest.approx(_hand_r(row["phi"], 1.0), rel=1e-9)
    assert row["low_kernel"] == (row["phi"] >= 3 * math.pi / 4 - 1e-12)
  # phi = 0: trig is exact (MSE 0, no z-test), its Monte Carlo MSE float32 rounding.
  assert rows[0]["mse_trig"] == 0 and rows[0]["mc_trig_z"] is None
  assert rows[0]["mc_trig"] < 1e-10 and not rows[0]["mc_trig_reliable"]
  for row in rows:  # every testable point within 4 exact standard errors
    for kernel in lemma2.KERNELS:
      if row[f"mc_{kernel}_reliable"]:
        assert abs(row[f"mc_{kernel}_z"]) < 4
  # Grid: cell centres, r[i][j] at (phi[j], l[i]), mirror-symmetric in both axes.
  grid = extra["grid"]
  phi, l, r = np.array(grid["phi"]), np.array(grid["l"]), np.array(grid["r"])
  assert r.shape == (8, 16) and phi[0] == pytest.approx(-math.pi + math.pi / 16)
  assert l == pytest.approx(np.arange(-1.75, 2, 0.5))
  np.testing.assert_allclose(r, _hand_r(phi[None, :], l[:, None]), rtol=1e-9)
  np.testing.assert_allclose(r, r[::-1, ::-1], rtol=1e-12)
  np.testing.assert_allclose(r, r[:, ::-1], rtol=1e-12)
  # Key angles and the low-kernel region.
  key = {a["label"]: a["r"] for a in extra["key_angles"]}
  assert key == {"0": 0.0, "pi/2": pytest.approx(0.4323323584), "3pi/4": pytest.approx(17.84645)}
  low = extra["low_kernel"]
  assert low["points"] == 2 and low["r_min"] == pytest.approx(17.84645)  # k = 6, 7
  assert low["crossing_angle"] == pytest.approx(lemma2.crossing_angle(1.0))
  assert low["kernel_at_crossing"] == pytest.approx(math.exp(math.cos(low["crossing_angle"])))
  assert low["grid_fraction_r_above_1"] == pytest.approx(np.mean(r > 1))
  assert low["mse_positive_mean"] < low["mse_trig_mean"] / 10
  assert extra["agreement"]["trig"]["reliable_points"] == 7  # all but phi = 0
  curve = extra["curve"]
  assert len(curve["phi"]) == len(curve["r"]) == 256 and curve["phi"][-1] < math.pi


@pytest.mark.parametrize("kwargs, message", [
    ({"dim": 1}, "--dim must be >= 2"),
    ({"samples": 1}, "--samples must be >= 2"),
    ({"features": 0}, "--features must be >= 1"),
    ({"angles": 15}, "--angles must be even"),
    ({"lengths": 9}, "--lengths must be even"),
    ({"max_length": 6.0}, r"--max-length must be in \(0, 5\]"),
    ({"slice_length": float("nan")}, r"--slice-length must be in \(0, 2\]"),
    ({"slice_length": 0.0}, r"--slice-length must be in \(0, 2\]"),
    ({"low_kernel_angle": 4.0}, r"--low-kernel-angle must be in \(0, pi\)"),
    ({"seed": -1}, "--seed must be in"),
])
def test_bad_configurations(kwargs, message):
  with pytest.raises(UserError, match=message):
    lemma2.Lemma2Config(**kwargs)


@pytest.mark.parametrize("args, message", [
    (("--angles", "7"), "--angles must be even"),
    (("--slice-length", "3"), "--slice-length must be in (0, 2]"),
    (("--samples", "many"), "invalid int value: 'many'"),
    (("--out", ""), "output path is empty"),
])
def test_cli_bad_flags_are_one_line_errors(capsys, args, message):
  try:
    status = cli.main(["lemma2", *args])
  except SystemExit as e:  # argparse's own errors (a non-number)
    status = e.code
  assert status == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert message in err[-1] and "Traceback" not in "\n".join(err)


def test_cli_run_prints_a_summary(tmp_path, capsys):
  out = tmp_path / "l2.json"
  flags = [f"--{k.replace('_', '-')}={v}" for k, v in SMALL.items()]
  assert cli.main(["lemma2", *flags, "--out", str(out)]) == 0
  text = capsys.readouterr().out
  assert "phi=pi/2: 0.4323" in text and "phi=3pi/4: 17.85" in text and "phi*" in text
  assert f"figure lemma2 --input {out}" in text
  assert json.loads(out.read_text())["experiment"] == "lemma2"
