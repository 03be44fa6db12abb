"""speed figure: against L, or against chunk size for a chunk study; legends off the curves."""

import json

import pytest

from performer import figures
from performer.errors import UserError
from testlib import drawn


def _row(attention, length, ms, *, chunk=None, direction="causal", status="ok"):
  row = {"config": "regular", "layer": True, "attention": attention, "direction": direction,
         "mode": "fwdbwd", "L": length, "chunk_size": chunk, "status": status}
  if status == "ok":
    row.update(median_ms=ms, peak_bytes=int(ms * 2 ** 20))
  return row


def _drawn(monkeypatch, tmp_path, rows):
  src = tmp_path / "speed.json"
  src.write_text(json.dumps({"experiment": "speed", "environment": {"device": "cpu"},
                             "rows": rows}))
  return drawn(monkeypatch, tmp_path, "speed", str(src))


def _legend(ax):
  return [t.get_text() for t in ax.get_legend().get_texts()]


def test_a_chunk_study_is_drawn_against_chunk_size(tmp_path, monkeypatch):
  chunks = (32, 64, 128, 256, 512, 1024)
  rows = [_row("performer_softmax", n, 100.0 + c / 10 + n / 100, chunk=c)
          for n in (512, 4096) for c in chunks]
  rows.append(_row("exact", 512, 80.0))  # no chunks: a flat line
  ax_time, ax_mem = _drawn(monkeypatch, tmp_path, rows).axes
  assert ax_time.get_xlabel().startswith("chunk size")
  lines = {line.get_label(): line for line in ax_time.get_lines()}
  for n in (512, 4096):
    line = lines[f"performer_softmax, L={n}"]
    assert list(line.get_xdata()) == list(chunks)
    seconds = [(100.0 + c / 10 + n / 100) / 1e3 for c in chunks]
    assert list(line.get_ydata()) == pytest.approx(seconds)
  # Numeric order (L=512 before L=4096), and one colour per curve.
  assert _legend(ax_mem) == ["exact, L=512", "performer_softmax, L=512",
                             "performer_softmax, L=4096"]
  performer = [lines[f"performer_softmax, L={n}"].get_color() for n in (512, 4096)]
  assert performer[0] != performer[1]
  assert list(lines["exact, L=512"].get_ydata()) == [0.08, 0.08]


def test_an_l_sweep_is_drawn_against_l_with_chunks_sorted_numerically(tmp_path, monkeypatch):
  rows = [_row("performer_softmax", n, n / 10) for n in (512, 1024, 2048)]
  rows += [_row("performer_softmax", n, n / 20, chunk=1024) for n in (512, 1024, 2048)]
  rows += [_row("exact", 512, 30.0), _row("exact", 1024, 0.0, status="timeout")]
  ax_time, ax_mem = _drawn(monkeypatch, tmp_path, rows).axes
  assert ax_time.get_xlabel() == "sequence length L"
  assert _legend(ax_mem) == ["exact (timeout at L=1024)", "performer_softmax",
                             "performer_softmax, chunk 1024"]
  lines = {line.get_label(): line for line in ax_time.get_lines()}
  assert list(lines["performer_softmax, chunk 1024"].get_xdata()) == [512, 1024, 2048]
  colours = {label: line.get_color() for label, line in lines.items()}
  assert colours["performer_softmax"] != colours["performer_softmax, chunk 1024"]


def test_chunk_labels_sort_as_numbers_not_strings(tmp_path, monkeypatch):
  rows = [_row("performer_softmax", 8192, 1.0, chunk=c) for c in (1024, 128, 32)]
  ax_time, _ = _drawn(monkeypatch, tmp_path, rows).axes
  (line,) = ax_time.get_lines()
  assert list(line.get_xdata()) == [32, 128, 1024]


def test_legends_sit_beside_the_panels(tmp_path, monkeypatch):
  rows = [_row(a, n, n / 10, direction=d) for a in ("exact", "performer_softmax", "identity")
          for d in ("bidirectional", "causal") for n in (512, 1024)]
  fig = _drawn(monkeypatch, tmp_path, rows)
  renderer = fig.canvas.get_renderer()
  legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()]
  assert len(legends) == 2  # one per row of panels
  for legend in legends:
    box = legend.get_window_extent(renderer)
    assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in fig.axes)
    assert box.x1 <= fig.canvas.get_width_height()[0]


def test_exact_peers_are_dash_dotted_and_name_their_implementation(tmp_path, monkeypatch):
  rows = [_row(a, n, n / 10) for a in ("exact", "exact_blockwise", "performer_softmax",
                                       "performer_pytorch") for n in (512, 1024)]
  rows += [dict(_row("exact_dot_product", n, n / 10), implementation="xla") for n in (512, 1024)]
  ax_time, ax_mem = _drawn(monkeypatch, tmp_path, rows).axes
  assert "exact_dot_product [xla]" in _legend(ax_mem)
  styles = {line.get_label(): line.get_linestyle() for line in ax_time.get_lines()}
  assert styles == {"exact": "-.", "exact_blockwise": "-.", "exact_dot_product [xla]": "-.",
                    "performer_softmax": "-", "performer_pytorch": ":"}


def test_a_group_with_nothing_measured_says_so(tmp_path, monkeypatch):
  rows = [_row("exact", 512, 0.0, status="skipped"), _row("performer_softmax", 512, 0.0,
                                                          status="oom")]
  rows.append({**_row("performer_softmax", 1024, 5.0, direction="bidirectional"),
               "peak_bytes": None})  # a time but no memory reading
  fig = _drawn(monkeypatch, tmp_path, rows)
  texts = [t.get_text() for ax in fig.axes for t in ax.texts]
  assert texts.count("nothing measured (oom, skipped)") == 2  # the (U) time and memory panels
  assert texts.count("nothing measured (ok)") == 1  # the (B) memory panel


def test_another_experiment_is_named_in_the_error(tmp_path):
  src = tmp_path / "r.json"
  src.write_text(json.dumps({"experiment": "approx_error", "rows": [{}]}))
  with pytest.raises(UserError, match="expected a result file of experiment 'speed', "
                                      "found 'approx_error'"):
    figures.render("speed", str(src), str(tmp_path / "f.png"))


def test_a_layers_sweep_is_drawn_against_depth_with_identity_as_opt(tmp_path, monkeypatch):
  rows = [dict(_row(a, 1024, ms * n, direction="bidirectional"), layer=False, num_layers=n)
          for a, ms in (("performer_softmax", 10.0), ("identity", 6.0)) for n in (1, 2, 4)]
  rows.append(dict(_row("exact", 1024, 0.0, status="timeout"), layer=False, num_layers=1))
  rows.append(_row("exact", 1024, 50.0))  # an L sweep's row: not drawn here
  src = tmp_path / "speed.json"
  src.write_text(json.dumps({"experiment": "speed", "rows": rows}))
  fig = drawn(monkeypatch, tmp_path, "speed-layers", str(src))
  (ax_time, _), (ax_time_u, ax_mem_u) = fig.axes[:2], fig.axes[2:]
  assert ax_time.get_xlabel() == "number of layers"
  lines = {line.get_label(): line for line in ax_time.get_lines()}
  assert list(lines["identity (X (OPT))"].get_xdata()) == [1, 2, 4]
  assert list(lines["performer_softmax"].get_ydata()) == pytest.approx([0.01, 0.02, 0.04])
  assert _legend(ax_mem_u) == ["exact (timeout at 1 layers)"]  # (U): the exact rows alone
  assert "(U)" in ax_time_u.get_title() and "L=1024" in ax_time_u.get_title()
  src.write_text(json.dumps({"experiment": "speed", "rows": [_row("exact", 1024, 50.0)]}))
  with pytest.raises(UserError, match="no row with num_layers"):
    figures.render("speed-layers", str(src), str(tmp_path / "g.png"))
