"""Figures: each reads result files and writes an image; none recomputes anything.

`FIGURES` maps a figure name (as given to `performer figure NAME`) to the
module that renders it; each module has `render(input_path, out_path)`.
`INPUTS` gives each figure's default result file.
"""

import importlib

FIGURES = {
    "mse-vs-m": "performer.figures.mse_vs_m",  # paper Fig. 4
    "speed": "performer.figures.speed",  # paper Fig. 3
}


INPUTS = {
    "mse-vs-m": "results/approx_error.json",
    "speed": "results/speed.json",
}


def render(name, input_path, out_path):
  """Renders figure `name` (a key of FIGURES) from input_path into out_path."""
  return importlib.import_module(FIGURES[name]).render(input_path, out_path)
