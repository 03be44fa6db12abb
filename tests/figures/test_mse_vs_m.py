"""mse-vs-m figure: renders from a small JSON fixture; bad inputs are user errors."""

import importlib
import json
import os

import matplotlib.image
import pytest

from performer import cli, figures
from performer.errors import UserError
from performer.figures import mse_vs_m
from testlib import drawn


def _row(kernel, kind, scaling, m, scale, mse):
  return {"kernel": kernel, "projection": kind, "scaling": scaling, "m": m,
          "mse_mean": mse, "mse_std": mse / 2, "mse_median": mse * 0.9, "samples": 3,
          "input_scale": scale, "L": 64, "d": 8, "query_norm_mean": scale}


def _write(path, record):
  path.write_text(json.dumps(record))
  return str(path)


def test_renders_a_png_with_one_row_per_scale(tmp_path):
  rows = [_row(k, p, s, m, scale, 1e-3 / m)
          for k, p, s in (("positive", "orthogonal", "chi"), ("trig", "iid", "chi"),
                          ("positive", "orthogonal", "sqrt_d"), ("positive", "iid", "chi"))
          for m in (4, 8, 16) for scale in (0.5, 2.0)]
  src = _write(tmp_path / "r.json", {"experiment": "approx_error", "rows": rows})
  out = tmp_path / "figs" / "fig.png"
  figures.render("mse-vs-m", src, str(out))
  image = matplotlib.image.imread(out)
  assert image.shape[0] > 800 and image.shape[1] > 1000  # two rows of two panels
  assert not list(out.parent.glob(".tmp-*"))


@pytest.mark.parametrize("content, match", [
    (None, "no such file"),
    ("{not json", "not a JSON result"),
    ({"experiment": "speed", "rows": [{}]},
     "expected a result file of experiment 'approx_error', found 'speed'"),
    ({"experiment": "approx_error", "rows": []}, "no rows"),
    ({"experiment": "approx_error", "rows": [{"kernel": "positive"}]}, "row 0 lacks"),
    ({"experiment": "approx_error", "rows": [{**_row("positive", "iid", "chi", 4, 1.0, 1e-3),
                                              "input_scale": None}]}, "input_scale = None"),
    ({"experiment": "approx_error", "rows": [{**_row("positive", "iid", "chi", 4, 1.0, 1e-3),
                                              "m": "4"}]}, "m = '4' is not a float"),
])
def test_bad_input_files(tmp_path, content, match):
  path = tmp_path / "r.json"
  if content is not None:
    path.write_text(content if isinstance(content, str) else json.dumps(content))
  with pytest.raises(UserError, match=match):
    figures.render("mse-vs-m", str(path), str(tmp_path / "out.png"))
  assert not (tmp_path / "out.png").exists()


def test_output_paths(tmp_path):
  rows = [_row("hyperbolic", "iid", "chi", m, 1.0, 1e-3 / m) for m in (4, 8)]
  src = _write(tmp_path / "r.json", {"experiment": "approx_error", "rows": rows})
  figures.render("mse-vs-m", src, str(tmp_path / "noext"))  # png without an extension
  assert (tmp_path / "noext").read_bytes()[:4] == b"\x89PNG"
  figures.render("mse-vs-m", src, str(tmp_path / "f.svg"))
  assert b"<svg" in (tmp_path / "f.svg").read_bytes()[:500]
  for bad, match in ((tmp_path / "f.txt", "cannot write .txt"), (tmp_path, "is a folder")):
    with pytest.raises(UserError, match=match):
      figures.render("mse-vs-m", src, str(bad))
  assert sorted(p.name for p in tmp_path.iterdir()) == ["f.svg", "noext", "r.json"]


def _drawn(monkeypatch, src, tmp_path):
  return drawn(monkeypatch, tmp_path, "mse-vs-m", src)


def test_kernel_panel_shows_trig_whatever_its_projection(tmp_path, monkeypatch):
  # trig only with iid projections: the right panel used to keep ORF curves alone.
  rows = [_row(k, p, s, m, 1.0, 1e-3 / m)
          for k, p, s in (("positive", "orthogonal", "chi"), ("trig", "iid", "chi"),
                          ("positive", "orthogonal", "sqrt_d"))
          for m in (4, 8)]
  src = _write(tmp_path / "r.json", {"experiment": "approx_error", "rows": rows})
  (right,) = _drawn(monkeypatch, src, tmp_path).axes  # one projection per kernel: no left column
  labels = lambda ax: [t.get_text() for t in ax.get_legend().get_texts()]
  assert labels(right) == ["positive (FAVOR+), ORF",
                           "positive (FAVOR+), ORF, SMREG (|w| = sqrt(d))",
                           "trig (SMtrig), IID"]
  assert right.get_title().startswith("Positive vs trig features (projections as labelled)")
  # With ORF for every kernel, the right panel compares ORF curves and says so.
  rows += [_row("trig", "orthogonal", "chi", m, 1.0, 1e-4 / m) for m in (4, 8)]
  src = _write(tmp_path / "r.json", {"experiment": "approx_error", "rows": rows})
  left, right = _drawn(monkeypatch, src, tmp_path).axes
  assert "trig (SMtrig), ORF" in labels(right) and "trig (SMtrig), IID" not in labels(right)
  assert "features (ORF)" in right.get_title()
  # The left column holds only kernels with several projections, and names them.
  assert labels(left) == ["trig (SMtrig), IID", "trig (SMtrig), ORF"]
  assert left.get_title().startswith("Projections ORF vs IID: input scale 1")


def test_legends_do_not_cover_the_curves(tmp_path, monkeypatch):
  rows = [_row(k, p, "chi", m, 1.0, 1e-3 / m) for k in ("positive", "trig", "hyperbolic")
          for p in ("orthogonal", "iid") for m in (4, 8, 16)]
  src = _write(tmp_path / "r.json", {"experiment": "approx_error", "rows": rows})
  fig = _drawn(monkeypatch, src, tmp_path)
  renderer = fig.canvas.get_renderer()
  for ax in fig.axes:
    legend = ax.get_legend().get_window_extent(renderer)
    assert not legend.overlaps(ax.get_window_extent(renderer)), ax.get_title()
  # ... and stay inside the image.
  width, height = fig.canvas.get_width_height()
  assert all(0 <= ax.get_legend().get_window_extent(renderer).x1 <= width for ax in fig.axes)


def test_cli_default_output_goes_beside_the_input(tmp_path, monkeypatch):
  # Following approx-error's hint on a small run must not touch results/.
  rows = [_row("positive", "iid", "chi", m, 1.0, 1e-3 / m) for m in (4, 8)]
  src = _write(tmp_path / "small.json", {"experiment": "approx_error", "rows": rows})
  monkeypatch.chdir(tmp_path)
  assert cli.main(["figure", "mse-vs-m", "--input", src]) == 0
  assert (tmp_path / "small_mse_vs_m.png").read_bytes()[:4] == b"\x89PNG"
  assert not (tmp_path / "results").exists()
  # Without --input: what approx-error writes by default, never the committed results/.
  defaults = cli._parser().parse_args(["approx-error"])
  assert figures.INPUTS["mse-vs-m"] == defaults.out == "runs/approx_error.json"
  assert cli._parser().parse_args(["speed"]).out == figures.INPUTS["speed"] == "runs/speed.json"
  assert figures.default_out("speed", "runs/speed.json") == "runs/speed_speed.png"
  from performer.data import trembl  # pylint: disable=import-outside-toplevel
  assert figures.INPUTS["table1"] == trembl.SAMPLE_OUT  # the one input no experiment writes


def test_every_figure_module_is_found_by_its_declarations():
  # figures/__init__.py derives its tables from each module's NAME, SUMMARY, READS, OUT, TABLE
  for name, module in figures.FIGURES.items():
    loaded = importlib.import_module(module)
    assert loaded.NAME == name and callable(loaded.render)
    assert (name in figures.RUNS) == (getattr(loaded, "READS", None) == "runs")
    assert (name in figures.RUNS) != (name in figures.INPUTS), name  # runs or one input
  assert len(figures.FIGURES) == 21


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs Linux /proc")
def test_unwritable_output_fails_before_drawing(tmp_path, monkeypatch):
  rows = [_row("positive", "iid", "chi", m, 1.0, 1e-3 / m) for m in (4, 8)]
  src = _write(tmp_path / "r.json", {"experiment": "approx_error", "rows": rows})
  monkeypatch.setattr(mse_vs_m.plt, "subplots", lambda *a, **k: pytest.fail("drew first"))
  with pytest.raises(UserError, match="cannot write to folder /proc"):  # even as root
    figures.render("mse-vs-m", src, "/proc/fig.png")
  # A wrong extension fails even before the input is read; a missing input
  # before any output folder is made.
  with pytest.raises(UserError, match="cannot write .txt"):
    figures.render("mse-vs-m", str(tmp_path / "missing.json"), str(tmp_path / "f.txt"))
  with pytest.raises(UserError, match="no such file"):
    figures.render("mse-vs-m", str(tmp_path / "missing.json"), str(tmp_path / "new" / "f.png"))
  assert not (tmp_path / "new").exists()
