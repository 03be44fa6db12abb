"""Fig. 5 from hand-made fine-tuned run folders: variants named from configs, lines as given."""

import json

import matplotlib
import pytest

from performer import figures
from performer.errors import UserError
from performer.figures import backward_compat, runs

matplotlib.use("Agg")


def _finetuned(make_run, name, attention, options, *, source, causal=True, start=0.07):
  """A run folder fine-tuned from `source`: valid at steps 0 (the transfer), 10, 20."""
  path = make_run(name, attention, causal=causal, metrics=[
      (0, "valid", start, 15.0, 2.7), (10, "train", 0.10, 14.0, 2.6),
      (10, "valid", 0.11, 13.0, 2.5), (20, "valid", 0.12, 12.5, 2.4)])
  with open(f"{path}/config.json") as f:
    config = json.load(f)
  config["model"]["attention_options"] = options
  config["train"]["init_from"] = source
  config["data"] = {"path": "/data/swissprot"}
  with open(f"{path}/config.json", "w") as f:
    json.dump(config, f)
  return path


def test_a_plan_run_is_named_by_its_recorded_variant(make_run):
  source = make_run("source", "exact", causal=True)
  path = _finetuned(make_run, "smreg", "performer_softmax", {"scaling": "sqrt_d"}, source=source)
  with open(f"{path}/config.json") as f:
    config = json.load(f)
  for recorded, name in (("smreg", "Performer SMREG"), ("no_redraw", "Performer positive, no redraw")):
    config["train"]["settings"] = {"direction": "u", "source": "u_exact", "variant": recorded}
    with open(f"{path}/config.json", "w") as f:
      json.dump(config, f)
    assert backward_compat.variant(runs.load_run(path)) == name  # the setting, not the options


def test_variants_are_named_from_attention_and_options(make_run):
  source = make_run("source", "exact", causal=True, metrics=[(100, "valid", 0.113, 17.0, 2.8)])
  cases = {
      "exact": ("exact", {}),
      "pos": ("performer_softmax", {"num_features": 64}),
      "no_redraw": ("performer_softmax", {"redraw_every": 0}),
      "trig": ("performer_softmax", {"kernel": "trig"}),
      "smreg": ("performer_softmax", {"scaling": "sqrt_d"}),
  }
  paths = {name: _finetuned(make_run, name, att, opts, source=source)
           for name, (att, opts) in cases.items()}
  names = {name: backward_compat.variant(runs.load_run(p)) for name, p in paths.items()}
  assert names == {"exact": "Transformer (continued)", "pos": "Performer positive, redraw",
                   "no_redraw": "Performer positive, no redraw", "trig": "Performer trig",
                   "smreg": "Performer SMREG"}


def test_figure_draws_each_variant_and_the_source_line(make_run, tmp_path, monkeypatch):
  source = make_run("source", "exact", causal=True, metrics=[(100, "valid", 0.113, 17.0, 2.8)])
  paths = [_finetuned(make_run, "pos", "performer_softmax", {}, source=source, start=0.071),
           _finetuned(make_run, "lin", "linformer", {}, source=source, causal=False)]
  drawn = {}
  real_save = backward_compat.save_figure

  def spy(fig, out):
    drawn.update({ax.get_title(): {line.get_label(): list(line.get_ydata())
                                   for line in ax.get_lines()} for ax in fig.axes})
    real_save(fig, out)
  monkeypatch.setattr(backward_compat, "save_figure", spy)
  out = str(tmp_path / "fig5.png")
  assert figures.figure("backward-compat", run_dirs=paths, out_path=out) == (out,)
  u = drawn["swissprot (U) unidirectional"]
  assert u["Performer positive, redraw (transferred: 7.1%)"] == pytest.approx([7.1, 11.0, 12.0])
  assert u["source Transformer, end of training (11.3%)"] == pytest.approx([11.3, 11.3])
  assert "Linformer (transferred: 7.0%)" in drawn["swissprot (B) bidirectional"]
  assert (tmp_path / "fig5.png").stat().st_size > 10_000
  # Archived (plans/archive.py): init_from names a run folder that is gone; the source of that
  # name beside the fine-tuned run still gives the line.
  for path in paths:
    with open(f"{path}/config.json") as f:
      config = json.load(f)
    config["train"]["init_from"] = "/gone/runs/source"
    with open(f"{path}/config.json", "w") as f:
      json.dump(config, f)
  drawn.clear()
  figures.figure("backward-compat", run_dirs=paths, out_path=out)
  assert "source Transformer, end of training (11.3%)" in drawn["swissprot (U) unidirectional"]


def test_runs_that_are_not_fine_tuned_are_refused(make_run, tmp_path):
  plain = make_run("plain", "exact", causal=True, metrics=[(10, "valid", 0.1, 17.0, 2.8)])
  with pytest.raises(UserError, match="not a fine-tuned run"):
    figures.figure("backward-compat", run_dirs=[plain], out_path=str(tmp_path / "x.png"))
  a = _finetuned(make_run, "a", "performer_softmax", {}, source=plain)
  b = _finetuned(make_run, "b", "performer_softmax", {"num_features": 32}, source=plain)
  with pytest.raises(UserError, match="both are Performer positive, redraw .* seed 0"):
    figures.figure("backward-compat", run_dirs=[a, b], out_path=str(tmp_path / "x.png"))


def test_default_file_is_fig5_beside_the_runs(make_run):
  assert figures.default_out("backward-compat", ["runs/x/a"]) == "runs/x/fig5_backward_compat.png"


def test_panels_wrap_and_legends_sit_below_them_with_whole_steps(make_run, tmp_path, monkeypatch):
  source = make_run("source", "exact", causal=True, metrics=[(100, "valid", 0.113, 17.0, 2.8)])
  paths = []
  for data in ("a", "b", "c"):  # three panels: two a row, not three side by side
    path = _finetuned(make_run, f"pos_{data}", "performer_softmax", {}, source=source)
    with open(f"{path}/config.json") as f:
      config = json.load(f)
    config["data"] = {"path": f"/data/{data}"}
    with open(f"{path}/config.json", "w") as f:
      json.dump(config, f)
    paths.append(path)
  drawn = []
  monkeypatch.setattr(backward_compat, "save_figure", lambda fig, out: drawn.append(fig))
  monkeypatch.setattr(backward_compat.plt, "close", lambda fig: None)
  figures.figure("backward-compat", run_dirs=paths, out_path=str(tmp_path / "f.png"))
  (fig,) = drawn
  fig.canvas.draw()
  renderer = fig.canvas.get_renderer()
  shown = [ax for ax in fig.axes if ax.get_visible()]
  assert len(shown) == 3 and fig.get_size_inches()[0] <= 13
  for ax in shown:
    assert ax.get_legend().get_window_extent(renderer).y1 <= ax.get_window_extent(renderer).y0
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)  # steps 0, 10, 20: no 2.5


def test_seeds_of_a_variant_are_a_mean_and_a_band_and_the_range_fits_validation(
    make_run, tmp_path, monkeypatch):
  source = make_run("source", "exact", causal=True, metrics=[(100, "valid", 0.113, 17.0, 2.8)])
  paths = [_finetuned(make_run, f"pos{seed}", "performer_softmax", {}, source=source,
                      start=0.07 + seed / 100) for seed in (0, 1)]
  with open(f"{paths[1]}/config.json") as f:
    config = json.load(f)
  config["train"]["seed"] = 1
  with open(f"{paths[1]}/config.json", "w") as f:
    json.dump(config, f)
  for path, accuracy in zip(paths, (0.3, 0.5)):  # train rows far above validation
    with open(f"{path}/metrics.jsonl", "a") as f:
      f.write(json.dumps({"step": 20, "split": "train", "accuracy": accuracy, "perplexity": 9.0,
                          "loss": 2.0}) + "\n")
  drawn = []
  monkeypatch.setattr(backward_compat, "save_figure", lambda fig, out: drawn.append(fig))
  figures.figure("backward-compat", run_dirs=paths, out_path=str(tmp_path / "f.png"))
  ax = drawn[0].axes[0]
  lines = {line.get_label(): line for line in ax.get_lines()}
  valid = lines["Performer positive, redraw (transferred: 7.5%)"]  # the seeds' mean start
  assert list(valid.get_ydata()) == pytest.approx([7.5, 11.0, 12.0])
  (band,) = ax.collections  # the seeds' range on validation
  assert band.get_paths()[0].vertices[:, 1].min() == pytest.approx(7.0)
  assert band.get_paths()[0].vertices[:, 1].max() == pytest.approx(12.0)
  low, high = ax.get_ylim()  # validation 7-12% and the source's 11.3%, not train's 40%
  assert 6 < low < 7 and 12 < high < 13
  assert "mean of 2 seeds" in ax.get_title()
  assert "train (dashed) partly outside the range: 10.0-40.0%" in ax.get_title()
  twin = _finetuned(make_run, "pos_again", "performer_softmax", {}, source=source)
  with pytest.raises(UserError, match="both are .* seed 0; give one run per"):
    figures.figure("backward-compat", run_dirs=[paths[0], twin], out_path=str(tmp_path / "x.png"))


def test_fig15_right_draws_fig5s_panels_with_a_trig_run_from_zero(make_run, tmp_path, monkeypatch):
  from performer.figures import trig_full  # pylint: disable=import-outside-toplevel
  source = make_run("source", "exact", causal=True, metrics=[(100, "valid", 0.113, 17.0, 2.8)])
  trig = _finetuned(make_run, "trig", "performer_softmax", {"kernel": "trig"}, source=source,
                    start=0.02)
  pos = _finetuned(make_run, "pos", "performer_softmax", {}, source=source)
  # No trig run on (B): no panel.
  lin = _finetuned(make_run, "lin", "linformer", {}, source=source, causal=False)
  drawn = {}
  real_save = trig_full.save_figure

  def spy(fig, out):
    drawn.update({ax.get_title(): (ax.get_ylim(), {line.get_label(): list(line.get_ydata())
                                                   for line in ax.get_lines()})
                  for ax in fig.axes})
    real_save(fig, out)
  monkeypatch.setattr(trig_full, "save_figure", spy)
  out = str(tmp_path / "fig15.png")
  assert figures.figure("trig-full", run_dirs=[pos, trig, lin], out_path=out) == (out,)
  assert list(drawn) == ["swissprot (U) unidirectional: every step, y-axis from 0"]
  (low, high), lines = drawn["swissprot (U) unidirectional: every step, y-axis from 0"]
  assert low == 0 and high == pytest.approx(1.05 * 12.0)  # Fig. 5 would fit 2-12%
  assert lines["Performer trig, seeds 0"] == pytest.approx([2.0, 11.0, 12.0])
  assert lines["Performer positive, redraw, seeds 0"] == pytest.approx([7.0, 11.0, 12.0])
  with pytest.raises(UserError, match="no trig fine-tune"):
    figures.figure("trig-full", run_dirs=[pos, lin], out_path=out)
