"""curves (Fig. 6): train dashed, validation solid, a colour per model, panels per direction."""

import pytest

from performer import cli, figures
from performer.errors import UserError
from testlib import drawn

ROWS = [(10, "train", 0.11, 17.0, 2.83), (20, "train", 0.17, 14.0, 2.64),
        (20, "valid", 0.13, 15.5, 2.74)]


def _drawn(monkeypatch, tmp_path, folders, metric):
  return drawn(monkeypatch, tmp_path, "curves", folders, metric=metric)


def _lines(ax):
  return {line.get_label(): line for line in ax.get_lines()}


def test_panels_styles_colours_and_values(tmp_path, monkeypatch, make_run):
  later = [(10, "train", 0.13, 16.0, 2.8), (20, "train", 0.19, 13.0, 2.6),
           (20, "valid", 0.15, 15.0, 2.7)]
  folders = [make_run("u0", "exact", causal=True, seed=0, metrics=ROWS, test=(0.13, 15.0)),
             make_run("u1", "exact", causal=True, seed=1, metrics=later, test=(0.15, 15.0)),
             make_run("b0", "exact", causal=False, seed=0, metrics=ROWS),
             make_run("b1", "linformer", causal=False, seed=0, metrics=ROWS)]
  u, b, u_zoom, b_zoom = _drawn(monkeypatch, tmp_path, folders, "accuracy").axes
  assert u.get_title().startswith("(U)") and b.get_title().startswith("(B)")
  assert u.get_ylabel() == "accuracy (%)"
  train, valid = _lines(u)["(U) Transformer train"], _lines(u)["(U) Transformer valid"]
  assert train.get_linestyle() == "--" and valid.get_linestyle() == "-"
  assert list(train.get_xdata()) == [10, 20]
  assert list(train.get_ydata()) == pytest.approx([12.0, 18.0])  # the mean of two seeds, in %
  assert list(valid.get_ydata()) == pytest.approx([14.0])
  (band,) = u.collections  # validation: from the lowest seed to the highest
  low, high = band.get_paths()[0].vertices[:, 1].min(), band.get_paths()[0].vertices[:, 1].max()
  assert (low, high) == pytest.approx((13.0, 15.0))
  # Same colour for the Transformer in both panels; another model another colour.
  assert _lines(b)["(B) Transformer valid"].get_color() == valid.get_color()
  assert _lines(b)["(B) Linformer valid"].get_color() != valid.get_color()
  assert not b.collections  # one seed each: no band
  # The empirical baseline (the test evals' 9.5%) as a dotted line, in the legend too.
  legend = [t.get_text() for t in u.get_legend().get_texts()]
  assert legend == ["Transformer (mean of 2 seeds, band: their range)",
                    "empirical baseline, test (9.5)", "train", "validation"]
  (baseline,) = [line for line in u.get_lines() if line.get_linestyle() == ":"]
  assert list(baseline.get_ydata()) == pytest.approx([9.5, 9.5])
  # Legends beside the panels, off the curves.
  renderer = u.figure.canvas.get_renderer()
  for ax in (u, b):
    assert not ax.get_legend().get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))
  # Below: validation alone, its y-range fitted to the seeds' band, not to the baseline (9.5).
  assert set(_lines(u_zoom)) == {"(U) Transformer valid"}
  assert list(_lines(u_zoom)["(U) Transformer valid"].get_ydata()) == pytest.approx([14.0])
  low, high = u_zoom.get_ylim()
  assert 12.5 < low <= 13.0 and 15.0 <= high < 15.5
  assert set(_lines(b_zoom)) == {"(B) Transformer valid", "(B) Linformer valid"}


def test_only_panels_with_runs_and_other_metrics(tmp_path, monkeypatch, make_run):
  folders = [make_run("u0", "performer_relu", causal=True, metrics=ROWS)]
  ax, _ = _drawn(monkeypatch, tmp_path, folders, "perplexity").axes
  assert list(_lines(ax)["(U) Performer-ReLU train"].get_ydata()) == [17.0, 14.0]
  monkeypatch.undo()
  figures.render("curves", folders, str(tmp_path / "loss.png"), metric="loss")
  assert (tmp_path / "loss.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_default_out_and_errors(tmp_path, make_run, capsys):
  folder = make_run("u0", "exact", causal=True, metrics=ROWS)
  assert cli.main(["figure", "curves", "--runs", folder, "--metric", "loss"]) == 0
  out = tmp_path / "runs" / "fig6_loss.png"
  assert f"wrote {out}" in capsys.readouterr().out
  assert out.read_bytes()[:4] == b"\x89PNG"
  assert figures.default_out("curves", ["a/b/run"], metric="accuracy") == "a/b/fig6_accuracy.png"
  assert figures.default_out("curves", ["run"]) == "fig6_accuracy.png"
  for flags, message in ((["--runs", folder, "--metric", "bpd"], "unknown metric 'bpd'"),
                         (["--runs", str(tmp_path / "nope")], "nope: no such run folder"),
                         (["--input", folder], "give --runs")):
    assert cli.main(["figure", "curves", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
  empty = make_run("e", "exact", causal=True)  # no rows yet
  with pytest.raises(UserError, match="no train or valid rows with accuracy"):
    figures.render("curves", [empty], str(tmp_path / "e.png"))
  with pytest.raises(UserError, match="cannot write .txt"):
    figures.render("curves", [folder], str(tmp_path / "e.txt"))
  assert not (tmp_path / "e.png").exists()


def test_runs_of_one_model_at_several_depths_are_told_apart(tmp_path, monkeypatch, make_run):
  """Fig. 7 right: Transformers of 1, 2, 3 layers are three models, each its own colour."""
  import json  # pylint: disable=import-outside-toplevel
  folders = []
  for layers in (1, 2, 3):
    folder = make_run(f"t{layers}", "exact", causal=True, metrics=ROWS)
    config = json.load(open(f"{folder}/config.json"))
    config["model"]["num_layers"] = layers
    json.dump(config, open(f"{folder}/config.json", "w"))
    folders.append(folder)
  folders.append(make_run("p", "performer_relu", causal=True, metrics=ROWS))
  u, _ = _drawn(monkeypatch, tmp_path, folders, "accuracy").axes
  lines = _lines(u)
  colours = {lines[f"(U) Transformer {n}-layer valid"].get_color() for n in (1, 2, 3)}
  colours.add(lines["(U) Performer-ReLU valid"].get_color())
  assert len(colours) == 4


def test_a_run_stopped_by_a_nan_is_named_in_the_legend(tmp_path, monkeypatch, make_run):
  folders = [make_run("u0", "exact", causal=True, metrics=ROWS),
             make_run("u1", "exact", causal=True, seed=1, metrics=ROWS[:1], diverged=15)]
  u, _ = _drawn(monkeypatch, tmp_path, folders, "accuracy").axes
  legend = [t.get_text() for t in u.get_legend().get_texts()]
  assert legend[0] == "Transformer (mean of 2 seeds, band: their range); u1 NaN at step 15"
  assert list(_lines(u)["(U) Transformer train"].get_xdata()) == [10]  # the steps both logged


def test_step_ticks_do_not_collide():
  # Issue 41 item 20: ticks every 150 steps to 1,200 printed "9001050" on a panel.
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  from performer.figures import curves  # pylint: disable=import-outside-toplevel
  fig, ax = plt.subplots(figsize=(4, 3))
  ax.plot([0, 1200], [0, 1])
  curves.step_axis(ax)
  fig.canvas.draw()
  ticks = [t for t in ax.get_xticks() if 0 <= t <= 1200]
  plt.close(fig)
  assert len(ticks) <= 6 and all(t == int(t) for t in ticks)
