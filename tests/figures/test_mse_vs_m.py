"""mse-vs-m figure: renders from a small JSON fixture; bad inputs are user errors."""

import json

import matplotlib.image
import pytest

from performer import figures
from performer.errors import UserError


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
                          ("positive", "orthogonal", "sqrt_d"))
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
    ({"experiment": "speed", "rows": [{}]}, "expected an approx_error result"),
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
