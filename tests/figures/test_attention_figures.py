"""Figs. 10-11 (attention-maps) and Fig. 13 (aa-similarity) from small hand-made result files."""

import json

import numpy as np
import pytest

from performer import figures
from performer.errors import UserError
from performer.figures import aa_similarity as aa_figure
from performer.figures import attention_maps as maps_figure

LAYERS, HEADS, LENGTH = 2, 3, 27  # 27 tokens: the zoom shows the first 25
PNG = b"\x89PNG"


def _maps(favor=True):
  """exact: uniform rows; favor: head 0-1 the identity, head 1-2 all onto position 5."""
  exact = np.full((LAYERS, HEADS, LENGTH, LENGTH), 1.0 / LENGTH, np.float32)
  arrays = {"exact": exact, "tokens": np.arange(LENGTH, dtype=np.int32) % 20 + 3}
  if favor:
    f = exact.copy()
    f[0, 1] = np.eye(LENGTH)
    f[1, 2] = 0.0
    f[1, 2, :, 5] = 1.0
    arrays["favor"] = f
  return arrays


def _rows(favor=True):
  rows = []
  for layer in range(LAYERS):
    for head in range(HEADS):
      diagonal = 1.0 if (layer, head) == (0, 1) else 3 / LENGTH
      vertical = 1.0 if (layer, head) == (1, 2) else 1 / LENGTH
      row = {"layer": layer, "head": head, "name": f"{layer}-{head}", "own_matrix_check": 1e-7,
             "exact_diagonal_share": 3 / LENGTH, "exact_top_column_share": 1 / LENGTH,
             "exact_top_column": 0, "exact_mean_distance": 9.0}
      row.update({"favor_diagonal_share": diagonal, "favor_top_column_share": vertical,
                  "favor_top_column": 5 if vertical == 1.0 else 0, "favor_mean_distance": 9.0,
                  "tv_mean": 0.5, "tv_max": 0.9} if favor else
                 {"favor_diagonal_share": None, "favor_top_column_share": None, "tv_mean": None})
      rows.append(row)
  return rows


def _write_maps(folder, favor=True, arrays=None):
  folder.mkdir(parents=True, exist_ok=True)
  np.savez_compressed(folder / "maps.npz", **(arrays or _maps(favor)))
  record = {"experiment": "attention_maps", "rows": _rows(favor), "arrays": "maps.npz",
            "labels": list("ACDEFGHIKLMNPQRSTVWYACDEFGH"), "layers": [0, 1],
            "maps": ["favor", "exact"] if favor else ["exact"],
            "protein": {"accession": "P00974", "residues": LENGTH},
            "run": {"attention": "performer_softmax" if favor else "exact", "causal": False}}
  path = folder / "maps.json"
  path.write_text(json.dumps(record))
  return str(path)


def test_heads_for_the_zoom_are_the_most_diagonal_and_the_most_vertical():
  diagonal, vertical = maps_figure.choose_heads(_rows(), "favor")
  assert (diagonal["name"], vertical["name"]) == ("0-1", "1-2")


def test_attention_maps_figure_writes_the_grids_and_the_zoom(tmp_path):
  source = _write_maps(tmp_path / "runs")
  written = figures.figure("attention-maps", input_path=source)
  stem = str(tmp_path / "runs" / "maps_attention_maps")
  assert written == (stem + ".png", stem + "_exact.png", stem + "_zoom.png")
  for path in written:
    with open(path, "rb") as f:
      assert f.read(4) == PNG


def test_the_zoom_shows_the_first_25_tokens_as_they_are(tmp_path):
  with open(_write_maps(tmp_path)) as f:
    record = json.load(f)
  _, rows, maps = maps_figure.load(str(tmp_path / "maps.json"))
  fig = maps_figure._zoom(record, rows, maps, "favor")  # pylint: disable=protected-access
  axes = [ax for ax in fig.axes if ax.images]  # the panels, not their colour bars
  assert len(axes) == 4  # (diagonal, vertical) x (favor, exact)
  assert [t.get_text() for t in axes[0].get_xticklabels()] == record["labels"][:25]
  np.testing.assert_array_equal(axes[0].images[0].get_array(), np.eye(25))  # not renormalised
  np.testing.assert_allclose(axes[3].images[0].get_array(), np.full((25, 25), 1 / LENGTH))
  assert "head 1-2" in axes[2].get_title()


def test_an_exact_run_gives_one_grid_and_the_zoom(tmp_path):
  written = maps_figure.render(_write_maps(tmp_path, favor=False), str(tmp_path / "fig.png"))
  assert written == (str(tmp_path / "fig.png"), str(tmp_path / "fig_zoom.png"))
  assert not (tmp_path / "fig_exact.png").exists()


def test_attention_maps_figure_errors(tmp_path):
  source = _write_maps(tmp_path)
  (tmp_path / "maps.npz").unlink()
  with pytest.raises(UserError, match="maps.npz: no such file"):
    maps_figure.render(source, str(tmp_path / "fig.png"))
  bad = _maps()
  bad["favor"] = bad["favor"][:, :2]
  source = _write_maps(tmp_path, arrays=bad)
  with pytest.raises(UserError, match=r"favor maps of shape \(2, 2, 27, 27\) do not fit 2 layers "
                     "x 3 heads"):
    maps_figure.render(source, str(tmp_path / "fig.png"))
  with pytest.raises(UserError, match="cannot write .xyz"):
    maps_figure.render(source, str(tmp_path / "fig.xyz"))
  assert not list(tmp_path.glob("fig*"))


def _blosum():
  from performer.experiments import aa_similarity  # pylint: disable=import-outside-toplevel
  return aa_similarity.load_blosum62()


def _write_similarity(path, rows=None):
  sim = np.corrcoef(np.random.default_rng(0).normal(size=(16, 20)), rowvar=False).tolist()
  sim[4] = [None] * 20  # an undefined type
  base = {"maps": "favor", "heads_kept": 14, "heads": 16, "pairs_offdiagonal": 171,
          "r_offdiagonal": 0.42, "similarity": sim}
  record = {"experiment": "aa_similarity", "amino_acids": "ACDEFGHIKLMNPQRSTVWY",
            "blosum62": _blosum().tolist(), "sequences_used": 800,
            "config": {"split": "test", "min_attention": 0.1},
            "run": {"attention": "performer_softmax", "causal": False},
            "rows": rows or [base, {**base, "maps": "exact", "r_offdiagonal": None}]}
  path.write_text(json.dumps(record))
  return str(path)


def test_normalised_blosum_is_off_diagonal_min_max():
  n = aa_figure.normalised_blosum(_blosum())
  at = lambda a, b: n["ACDEFGHIKLMNPQRSTVWY".index(a), "ACDEFGHIKLMNPQRSTVWY".index(b)]
  assert at("F", "Y") == 1.0 and at("I", "V") == 1.0  # BLOSUM62 3, the largest off-diagonal
  assert at("W", "D") == 0.0  # -4, the smallest
  assert at("A", "C") == pytest.approx(4 / 7)  # 0 on [-4, 3]
  assert np.all(np.isnan(np.diag(n)))


def test_aa_similarity_figure_renders(tmp_path):
  source = _write_similarity(tmp_path / "aa.json")
  assert figures.figure("aa-similarity", input_path=source) == (
      str(tmp_path / "aa_aa_similarity.png"),)
  with open(tmp_path / "aa_aa_similarity.png", "rb") as f:
    assert f.read(4) == PNG


def test_aa_similarity_figure_errors(tmp_path):
  broken = {"maps": "favor", "heads_kept": 1, "heads": 16, "pairs_offdiagonal": 0,
            "similarity": [[0.0] * 3]}
  source = _write_similarity(tmp_path / "aa.json", rows=[broken])
  with pytest.raises(UserError, match="the favor row has no 20 x 20 similarity matrix"):
    aa_figure.render(source, str(tmp_path / "fig.png"))
  with pytest.raises(UserError, match="expected a result file of experiment 'aa_similarity'"):
    aa_figure.render(_write_maps(tmp_path / "m"), str(tmp_path / "fig.png"))
  assert not (tmp_path / "fig.png").exists()


def test_a_grid_of_few_heads_keeps_its_panels_large_and_its_title_inside(tmp_path):
  with open(_write_maps(tmp_path)) as f:
    record = json.load(f)
  _, rows, maps = maps_figure.load(str(tmp_path / "maps.json"))
  rows = [r for r in rows if r["layer"] == 0 and r["head"] < 2]
  maps = {k: v[:1, :2] for k, v in maps.items()}
  fig = maps_figure._grid(record, rows, maps, "favor")  # pylint: disable=protected-access
  fig.canvas.draw()
  renderer = fig.canvas.get_renderer()
  width, _ = fig.canvas.get_width_height()
  title = fig._suptitle.get_window_extent(renderer)  # pylint: disable=protected-access
  assert 0 <= title.x0 and title.x1 <= width  # the title used to be wider than the image
  panels = [ax.get_window_extent(renderer) for ax in fig.axes]
  assert all(p.width > 0.35 * width for p in panels)  # two heads share the width
