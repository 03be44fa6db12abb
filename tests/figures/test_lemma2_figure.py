"""lemma2 figure (Fig. 2): renders from a small real run; wrong inputs are one-line user errors."""

import copy
import json

import matplotlib.image
import pytest

from performer import cli, figures
from performer.errors import UserError
from performer.experiments import lemma2, results


@pytest.fixture(scope="module")
def record(tmp_path_factory):
  """The JSON record of a small real `lemma2` run (the sizes of tests/experiments/test_lemma2.py)."""
  cfg = lemma2.Lemma2Config(features=32, angles=16, lengths=8, slice_angles=8, samples=4000)
  out = tmp_path_factory.mktemp("lemma2") / "lemma2.json"
  results.main(lemma2, cfg, str(out), progress=False)
  return json.loads(out.read_text())


def _write(path, record):
  path.write_text(json.dumps(record))
  return str(path)


def test_renders_a_png_from_a_small_run(tmp_path, record):
  src = _write(tmp_path / "l2.json", record)
  out = tmp_path / "figs" / "fig2.png"
  assert figures.render("lemma2", src, str(out)) == str(out)
  assert out.stat().st_size > 50_000
  image = matplotlib.image.imread(out)
  assert image.shape[0] > 600 and image.shape[1] > 2000  # three panels side by side
  assert not list(out.parent.glob(".tmp-*"))
  # Without --out it goes beside the input, named after the figure.
  assert figures.figure("lemma2", input_path=src) == (str(tmp_path / "l2_lemma2.png"),)
  assert (tmp_path / "l2_lemma2.png").read_bytes()[:4] == b"\x89PNG"


def _broken(record, change):
  broken = copy.deepcopy(record)
  change(broken)
  return broken


@pytest.mark.parametrize("change, match", [
    (None, "no such file"),
    ("{not json", "not a JSON result"),
    (lambda r: r.update(experiment="approx_error"),
     "expected a result file of experiment 'lemma2', found 'approx_error'"),
    (lambda r: r.pop("experiment"), "expected a result file of experiment 'lemma2', found None"),
    (lambda r: r["rows"][0].pop("mc_trig"), "row 0 lacks mc_trig"),
    (lambda r: r.pop("grid"), "`grid` must hold phi, l, r"),
    (lambda r: r["grid"]["r"].pop(), r"grid.r has shape \(7, 16\), expected \[len\(l\), len\(phi\)\]"),
    (lambda r: r["grid"]["r"][0].__setitem__(0, 0.0), "grid.r holds values <= 0"),
    (lambda r: r["grid"].update(l="abc"), "grid.l is not an array of numbers"),
    (lambda r: r["curve"].pop("r"), "`curve` must hold phi, mse_trig, mse_positive, r"),
])
def test_wrong_inputs_are_user_errors(tmp_path, record, change, match):
  path = tmp_path / "l2.json"
  if isinstance(change, str):
    path.write_text(change)
  elif change is not None:
    _write(path, _broken(record, change))
  with pytest.raises(UserError, match=match):
    figures.render("lemma2", str(path), str(tmp_path / "out.png"))
  assert not (tmp_path / "out.png").exists()


def test_cli_reports_a_wrong_input_on_one_line(tmp_path, capsys, record):
  src = _write(tmp_path / "l2.json", {**record, "experiment": "speed"})
  assert cli.main(["figure", "lemma2", "--input", src]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert err == [(f"performer figure: error: {src}: expected a result file of experiment "
                  "'lemma2', found 'speed'")]
