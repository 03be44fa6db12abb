"""kernels (Fig. 16) and redraw (Fig. 15): what they draw from hand-made run folders."""

import inspect
import os

import pytest
from matplotlib.colors import same_color

from performer import cli, figures
from performer.attention import performer as backends
from performer.errors import UserError
from performer.figures import kernels, redraw, runs
from testlib import drawn

# (step, split, accuracy, perplexity, loss)
GOOD = [(50, "train", 0.08, 18.0, 2.9), (100, "train", 0.12, 16.0, 2.8),
        (100, "valid", 0.10, 16.5, 2.8), (200, "train", 0.20, 12.0, 2.5),
        (200, "valid", 0.18, 13.0, 2.6)]
EARLY = GOOD[:3]  # a run stopped after step 100


def _drawn(monkeypatch, tmp_path, name, folders):
  return drawn(monkeypatch, tmp_path, name, folders)


def _lines(ax):
  return {line.get_label(): line for line in ax.get_lines()}


def _crosses(ax):
  return [line for line in ax.get_lines() if line.get_marker() == "x"]


def _legend(ax):
  return [t.get_text() for t in ax.get_legend().get_texts()]


def _kernel_run(make_run, name, kernel, **kwargs):
  return make_run(name, "performer_relu", causal=False, attention_options={"kernel": kernel},
                  **kwargs)


def test_kernels_log_log_one_colour_per_kernel_and_nan_crosses(tmp_path, monkeypatch, make_run):
  folders = [_kernel_run(make_run, "tanh", "tanh", metrics=EARLY, diverged=130),
             _kernel_run(make_run, "relu", "relu", metrics=GOOD),
             _kernel_run(make_run, "identity", "identity", diverged=0),  # NaN before any log
             _kernel_run(make_run, "trig", "trig", metrics=GOOD),
             make_run("softmax", "performer_softmax", causal=False, metrics=GOOD)]
  fig = _drawn(monkeypatch, tmp_path, "kernels", folders)
  ax, zoom = fig.axes
  assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
  assert ax.get_ylabel() == "accuracy (%)" and ax.get_title().startswith("(B)")
  lines = _lines(ax)
  relu_valid, relu_train = lines["relu valid"], lines["relu train"]
  assert list(relu_valid.get_xdata()) == [100, 200]
  assert list(relu_valid.get_ydata()) == pytest.approx([10.0, 18.0])  # in %
  assert list(relu_train.get_xdata()) == [50, 100, 200]
  assert relu_valid.get_linestyle() == "-" and relu_train.get_linestyle() == "--"
  assert same_color(relu_valid.get_color(), relu_train.get_color())
  colours = [lines[f"{k} valid"].get_color() for k in ("relu", "trig (SMtrig)", "tanh")]
  assert len({str(c) for c in colours}) == 3
  # Two NaN runs: two crosses, each in its run's colour at its diverged step.
  tanh_x, identity_x = sorted(_crosses(ax), key=lambda l: -l.get_xdata()[0])
  assert list(tanh_x.get_xdata()) == [130]
  assert list(tanh_x.get_ydata()) == pytest.approx([10.0])  # continues the validation curve
  assert same_color(tanh_x.get_color(), lines["tanh valid"].get_color())
  assert list(identity_x.get_xdata()) == [1]  # step 0 on a log axis
  assert list(identity_x.get_ydata()) == [0.03]  # no point to continue: the panel's bottom
  assert not any(l.startswith("identity f(x)") for l in lines)
  # Legend: the kernels in the registry's order with its labels (favor/kernels.py), NaN steps,
  # then the split key.
  legend = fig.legends[0]
  assert [t.get_text() for t in legend.get_texts()] == [
      "positive (FAVOR+)", "trig (SMtrig)", "relu", "identity f(x) = x: NaN at step 0",
      "tanh: NaN at step 130", "train", "validation"]
  renderer = fig.canvas.get_renderer()  # beside the panels, off the curves
  for panel in (ax, zoom):
    assert not legend.get_window_extent(renderer).overlaps(panel.get_window_extent(renderer))
  # The zoom: validation on linear axes, its y-range that of the kernels near the best end
  # (relu, trig and softmax end at 18%; tanh's 10% is left below it).
  assert zoom.get_yscale() == "linear" and len(zoom.get_lines()) == 4
  low, high = zoom.get_ylim()
  assert 17 < low < 18 <= high < 19



def test_kernels_control_line_and_seed_band(tmp_path, monkeypatch, make_run):
  later = [(100, "valid", 0.14, 16.0, 2.7), (200, "valid", 0.20, 12.5, 2.5)]
  folders = [_kernel_run(make_run, "relu", "relu", metrics=GOOD),
             _kernel_run(make_run, "relu1", "relu", metrics=later, seed=1,
                         settings={"kernel": "relu", "seed": 1}),
             make_run("control", "identity", causal=False, metrics=GOOD[:2] + [
                 (100, "valid", 0.09, 17.0, 2.9), (200, "valid", 0.095, 17.0, 2.9)])]
  ax, zoom = _drawn(monkeypatch, tmp_path, "kernels", folders).axes
  for axis in (ax, zoom):  # identity attention: the control's validation, dash-dot black
    (control,) = [line for line in axis.get_lines() if line.get_linestyle() == "-."]
    assert list(control.get_ydata()) == pytest.approx([9.0, 9.5])
    assert same_color(control.get_color(), "k")
  assert "identity attention (control), validation" in [
      t.get_text() for t in ax.figure.legends[0].get_texts()]
  (band,) = zoom.collections  # relu's two seeds: their range on validation
  ys = band.get_paths()[0].vertices[:, 1]
  assert (ys.min(), ys.max()) == pytest.approx((10.0, 20.0))


def test_kernels_draw_each_kernel_without_renormalization_beside_it(tmp_path, monkeypatch,
                                                                     make_run):
  # App. D.3: the same kernel without D^-1 keeps its colour, dotted with squares, its own
  # legend row and its own seed band; the run's recorded setting or its options say which.
  later = [(100, "valid", 0.16, 16.0, 2.7), (200, "valid", 0.22, 12.5, 2.5)]
  off = {"kernel": "relu", "renormalize": False}
  folders = [_kernel_run(make_run, "relu", "relu", metrics=GOOD),
             make_run("relu_off", "performer_relu", causal=False, attention_options=off,
                      metrics=GOOD[:3] + [(200, "valid", 0.12, 14.0, 2.7)], settings=off),
             make_run("relu_off1", "performer_relu", causal=False, attention_options=off,
                      metrics=later, seed=1, settings={**off, "seed": 1})]
  fig = _drawn(monkeypatch, tmp_path, "kernels", folders)
  ax, zoom = fig.axes
  lines = _lines(ax)
  on, off_valid = lines["relu valid"], lines["relu without D^-1 (relu_off) valid"]
  assert on.get_linestyle() == "-" and on.get_marker() == "o"
  assert off_valid.get_linestyle() == ":" and off_valid.get_marker() == "s"
  assert list(off_valid.get_ydata()) == pytest.approx([10.0, 12.0])
  assert same_color(on.get_color(), off_valid.get_color())
  assert lines["relu without D^-1 (relu_off) train"].get_linestyle() == "--"
  assert [t.get_text() for t in fig.legends[0].get_texts()][:3] == [
      "relu", "relu without D^-1 (relu_off)", "relu without D^-1 (relu_off1)"]
  (band,) = zoom.collections  # the off row's two seeds; the on row has one
  ys = band.get_paths()[0].vertices[:, 1]
  assert (ys.min(), ys.max()) == pytest.approx((10.0, 22.0))
  assert kernels.renormalized(runs.load_runs([folders[0]])[0])


def test_kernels_names_repeated_kernels_by_folder_and_refuses_what_it_cannot_draw(
    tmp_path, monkeypatch, make_run):
  folders = [_kernel_run(make_run, "relu_a", "relu", metrics=GOOD),
             _kernel_run(make_run, "relu_b", "relu", metrics=EARLY, seed=1)]
  fig = _drawn(monkeypatch, tmp_path, "kernels", folders)
  ax, _ = fig.axes
  assert [t.get_text() for t in fig.legends[0].get_texts()][:2] == ["relu (relu_a)",
                                                                  "relu (relu_b)"]
  first, second = _lines(ax)["relu (relu_a) valid"], _lines(ax)["relu (relu_b) valid"]
  assert same_color(first.get_color(), second.get_color())  # one colour per kernel
  assert second.get_linewidth() < first.get_linewidth() and second.get_alpha() < 1
  assert not _crosses(ax)
  monkeypatch.undo()
  exact = make_run("exact", "exact", causal=False, metrics=GOOD)
  with pytest.raises(UserError, match="attention 'exact' has no feature kernel"):
    kernels.render([exact], str(tmp_path / "f.png"))
  u = make_run("u", "performer_relu", causal=True, metrics=GOOD)
  with pytest.raises(UserError, match=r"is \(U\) and .* is \(B\).*one direction"):
    kernels.render([u, folders[0]], str(tmp_path / "f.png"))
  empty = _kernel_run(make_run, "empty", "gelu")
  with pytest.raises(UserError, match="no train or valid rows with accuracy"):
    kernels.render([empty], str(tmp_path / "f.png"))
  assert not os.path.exists(tmp_path / "f.png")


def test_kernels_from_the_command_line_default_name_and_one_line_errors(tmp_path, make_run,
                                                                        capsys):
  folders = [_kernel_run(make_run, "relu", "relu", metrics=GOOD),
             _kernel_run(make_run, "tanh", "tanh", metrics=EARLY, diverged=130)]
  assert cli.main(["figure", "kernels", "--runs", *folders]) == 0
  out = tmp_path / "runs" / "fig16_kernels.png"
  assert capsys.readouterr().out.strip() == f"wrote {out}" and out.stat().st_size > 0
  exact = make_run("exact", "exact", causal=False, metrics=GOOD)
  assert cli.main(["figure", "kernels", "--runs", exact, "--out", str(tmp_path / "x.png")]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("performer figure: error: ") and "exact" in err[0]
  assert figures.default_out("redraw", folders) == str(tmp_path / "runs" / "fig15_redraw.png")


def _softmax(make_run, name, **kwargs):
  return make_run(name, "performer_softmax", causal=True, **kwargs)


def test_redraw_sorts_runs_into_both_panels(tmp_path, monkeypatch, make_run):
  folders = [_softmax(make_run, "nr1", attention_options={"redraw_every": 0, "seed": 1},
                      metrics=EARLY, diverged=300),
             _softmax(make_run, "nr2", attention_options={"redraw_every": 0, "seed": 2},
                      metrics=GOOD),
             _softmax(make_run, "r1", attention_options={"seed": 1}, metrics=GOOD),
             make_run("relu", "performer_relu", causal=True, metrics=GOOD)]
  left, right = _drawn(monkeypatch, tmp_path, "redraw", folders).axes
  assert left.get_title() == redraw.LEFT and right.get_title() == redraw.RIGHT
  assert _legend(left) == ["feature seed 1, no redraw: NaN at step 300",
                           "feature seed 2, no redraw", "feature seed 1, redraw every step",
                           "train", "validation"]
  lines = _lines(left)
  assert same_color(lines["feature seed 1, no redraw valid"].get_color(), "C3")  # warm: never
  assert same_color(lines["feature seed 2, no redraw valid"].get_color(), "C1")
  assert same_color(lines["feature seed 1, redraw every step valid"].get_color(), "C0")  # cool
  assert list(lines["feature seed 2, no redraw valid"].get_ydata()) == pytest.approx([10.0, 18.0])
  (cross,) = _crosses(left)
  assert list(cross.get_xdata()) == [300] and list(cross.get_ydata()) == pytest.approx([10.0])
  assert same_color(cross.get_color(), "C3")
  # Right: only the redrawing softmax run, against ReLU, in Fig. 6's colours.
  assert _legend(right) == [
      "Performer-softmax (positive, redraw every step, feature seed 1, train seed 0)",
      "Performer-ReLU (feature seed 0, train seed 0)", "train", "validation"]
  rlines = _lines(right)
  assert same_color(rlines["Performer-ReLU (feature seed 0, train seed 0) valid"].get_color(), "C2")
  assert not _crosses(right)
  assert right.get_xscale() == "linear"
  renderer = left.figure.canvas.get_renderer()  # below the panels, clear of the axis labels
  for ax in (left, right):
    box = ax.get_legend().get_window_extent(renderer)
    assert not box.overlaps(ax.get_window_extent(renderer))
    assert not box.overlaps(ax.xaxis.label.get_window_extent(renderer))


def test_redraw_draws_the_panels_it_can_and_refuses_runs_that_make_none(tmp_path, monkeypatch,
                                                                        make_run):
  no_redraw = [_softmax(make_run, f"nr{s}", attention_options={"redraw_every": 0, "seed": s},
                        metrics=GOOD) for s in (0, 1)]
  redrawn = _softmax(make_run, "r", attention_options={"redraw_every": 100}, metrics=GOOD)
  (ax,) = _drawn(monkeypatch, tmp_path, "redraw", no_redraw + [redrawn]).axes
  assert ax.get_title() == redraw.LEFT
  assert "feature seed 0, redraw every 100" in _legend(ax)
  monkeypatch.undo()
  with pytest.raises(UserError, match="make neither panel of Fig. 15; add a redrawing "
                     "performer_softmax run, a performer_relu run"):
    redraw.render(no_redraw, str(tmp_path / "f.png"))
  trig = _softmax(make_run, "trig", attention_options={"kernel": "trig"}, metrics=GOOD)
  with pytest.raises(UserError, match="performer_softmax with trig features is in neither panel"):
    redraw.render(no_redraw + [trig], str(tmp_path / "f.png"))
  assert not os.path.exists(tmp_path / "f.png")


def test_the_figures_defaults_are_the_backends(make_run):
  defaults = inspect.signature(backends.PerformerAttention.__init__).parameters
  bare = runs.load_run(_softmax(make_run, "bare", metrics=GOOD))  # no attention options
  assert redraw.redraw_every(bare) == defaults["redraw_every"].default == 1
  assert redraw.feature_seed(bare) == 0
  assert kernels.kernel_of(bare) == backends.PerformerSoftmax.default_kernel == "positive"
  relu = runs.load_run(make_run("relu", "performer_relu", causal=True, metrics=GOOD))
  assert kernels.kernel_of(relu) == "relu"
