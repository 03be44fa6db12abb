"""Figures: each reads result files and writes an image; none recomputes anything.

`FIGURES` maps a figure name (as given to `performer figure NAME`) to the
module that renders it; each module has `render(input_path, out_path)`.
"""

import importlib

FIGURES = {
    "mse-vs-m": "performer.figures.mse_vs_m",  # paper Fig. 4
}


def render(name, input_path, out_path):
  """Renders figure `name` (a key of FIGURES) from input_path into out_path."""
  return importlib.import_module(FIGURES[name]).render(input_path, out_path)
