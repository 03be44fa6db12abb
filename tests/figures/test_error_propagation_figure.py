"""error-propagation figure: draws a hand-made JSON's numbers; bad inputs are user errors."""

import json

import matplotlib.image
import pytest

from performer import figures
from performer.errors import UserError
from performer.figures import error_propagation


def _rows(setting, num_layers, ms, error=lambda m, q, l: 0.1 * l / m):
  return [{"setting": setting, "quantity": q, "m": m, "layer": layer, "num_layers": num_layers,
           "error_mean": error(m, q, layer), "error_min": 0.5 * error(m, q, layer),
           "error_max": 2 * error(m, q, layer), "draws": 3, "sequences": 5, "split": "test",
           "attention": "performer_softmax", "projection": "orthogonal"}
          for m in ms for q in ("hidden", "output", "attention")
          for layer in range(1, num_layers + 1)]


def _write(path, rows, experiment="error_propagation"):
  path.write_text(json.dumps({"experiment": experiment, "rows": rows}))
  return str(path)


@pytest.fixture(name="drawn")
def fixture_drawn(monkeypatch):
  """Keeps the figure that render saves, to read its lines back."""
  kept = []
  save = error_propagation.save_figure

  def keep(fig, path):
    kept.append(fig)
    save(fig, path)

  monkeypatch.setattr(error_propagation, "save_figure", keep)
  return kept


def test_the_depth_claim_is_decided_over_the_draws_paired(tmp_path):
  # Output error per draw j: grows with depth at m = 16, falls at m = 64, flat and noisy at 256.
  noise = [0.02, -0.01, 0.015, -0.02, 0.0]
  shape = {16: lambda l: 0.1 * l, 64: lambda l: 0.5 / l, 256: lambda l: 0.3}
  rows = [r for m in shape for r in _rows("init", 4, (m,))]
  for r in rows:
    r["errors"] = [shape[r["m"]](r["layer"]) + n * (r["layer"] if r["m"] == 256 else
                                                      r["layer"] / 40) for n in noise]
  src = _write(tmp_path / "r.json", rows)
  figures.figure("error-propagation", input_path=src, out_path=str(tmp_path / "f14.png"))
  table = (tmp_path / "f14_claims.md").read_text()
  verdict = lambda m: next(line for line in table.splitlines()
                           if line.startswith(f"| init, m = {m}:")).split(" | ")[6]
  assert (verdict(16), verdict(64), verdict(256)) == ("reproduced", "contradicted",
                                                      "inconclusive")
  assert "| +0.300 |" in table  # block 4 minus block 1 at m = 16, mean over the draws
  # without per-draw errors (an older file) the claims are not tested
  for r in rows:
    del r["errors"]
  figures.figure("error-propagation", input_path=_write(tmp_path / "old.json", rows),
                 out_path=str(tmp_path / "old.png"))
  assert (tmp_path / "old_claims.md").read_text().count("| not tested | the file has fewer") == 3


def test_draws_one_line_per_m_in_a_panel_per_setting_and_quantity(tmp_path, drawn):
  src = _write(tmp_path / "r.json", _rows("trained", 2, (16, 64)) + _rows("init", 4, (16, 64)))
  out = tmp_path / "figs" / "fig.png"
  assert figures.render("error-propagation", src, str(out)) == (
      str(out), str(tmp_path / "figs" / "fig_claims.md"))
  assert matplotlib.image.imread(out).shape[1] > 900
  (fig,) = drawn
  panels = [ax for ax in fig.axes if ax.get_title()]
  assert len(panels) == 2 * 3  # settings x quantities
  first = panels[0]  # trained, residual stream
  assert "trained" in first.get_title() and "residual stream" in first.get_title()
  assert first.get_yscale() == "log"
  lines = {line.get_label(): line for line in first.get_lines()}
  assert sorted(lines) == ["m = 16", "m = 64"]
  assert list(lines["m = 16"].get_xdata()) == [1, 2]
  assert list(lines["m = 16"].get_ydata()) == pytest.approx([0.1 / 16, 0.2 / 16])
  init_output = next(ax for ax in panels if "initialisation" in ax.get_title()
                     and "output" in ax.get_title())
  assert [list(line.get_xdata()) for line in init_output.get_lines()] == [[1, 2, 3, 4]] * 2
  assert not list(out.parent.glob(".tmp-*"))


def test_the_exact_control_draws_zeros_on_a_linear_axis(tmp_path, drawn):
  src = _write(tmp_path / "control.json", _rows("trained", 2, (16,), error=lambda *_: 0.0))
  figures.render("error-propagation", src, str(tmp_path / "c.png"))
  assert all(ax.get_yscale() == "linear" for ax in drawn[0].axes if ax.get_title())


def test_default_output_is_beside_the_input(tmp_path):
  src = _write(tmp_path / "ep.json", _rows("init", 3, (8,)))
  assert figures.figure("error-propagation", input_path=src) == (
      str(tmp_path / "ep_error_propagation.png"), str(tmp_path / "ep_error_propagation_claims.md"))
  assert (tmp_path / "ep_error_propagation.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("rows, experiment, match", [
    (_rows("init", 2, (8,)), "approx_error",
     "expected a result file of experiment 'error_propagation', found 'approx_error'"),
    ([{**_rows("init", 2, (8,))[0], "error_max": None}], "error_propagation", "error_max = None"),
    ([{**_rows("init", 2, (8,))[0], "quantity": "loss"}], "error_propagation",
     "no rows of quantity hidden, output, attention"),
])
def test_bad_input_files(tmp_path, rows, experiment, match):
  src = _write(tmp_path / "r.json", rows, experiment)
  with pytest.raises(UserError, match=match):
    figures.render("error-propagation", src, str(tmp_path / "out.png"))
  assert not (tmp_path / "out.png").exists()
