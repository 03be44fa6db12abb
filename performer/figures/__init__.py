"""Figures: each reads result files and writes an image; none recomputes anything.

`FIGURES` maps a figure name (as given to `performer figure NAME`) to the
module that renders it; each module has `render(input_path, out_path)`.
`INPUTS` gives each figure's default result file: where the experiment's
own `--out` default writes (runs/, never the committed results/).
"""

import importlib
import os

FIGURES = {
    "mse-vs-m": "performer.figures.mse_vs_m",  # paper Fig. 4
    "speed": "performer.figures.speed",  # paper Fig. 3
}


INPUTS = {
    "mse-vs-m": "runs/approx_error.json",
    "speed": "runs/speed.json",
}


def default_out(name, input_path):
  """The image beside input_path: <input stem>_<figure>.png (runs/a.json -> runs/a_mse_vs_m.png).

  The figure name in the file name keeps a re-render from landing on a
  committed figure (results/mse_vs_m.png, results/speed_*_cpu.png).
  """
  stem = os.path.splitext(input_path)[0]
  return f"{stem}_{name.replace('-', '_')}.png"


def render(name, input_path, out_path):
  """Renders figure `name` (a key of FIGURES) from input_path into out_path."""
  return importlib.import_module(FIGURES[name]).render(input_path, out_path)
