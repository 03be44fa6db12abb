"""Reading result files and writing figures, shared by every figure module."""

import json
import math
import os

import matplotlib
from matplotlib.backend_bases import FigureCanvasBase

from performer.atomic import atomic_path, check_writable
from performer.errors import UserError

# Files only, never a window, on any host: every figure module imports this module.
matplotlib.use("Agg")


def load_rows(path, experiment, required):
  """Loads a result JSON and checks it holds `experiment` rows with `required` keys.

  `required` maps each key to its type: `str`, or `float` for a finite
  number (bools excluded).

  Returns:
    (record, rows): the whole JSON object and its list of row dicts.

  Raises:
    UserError: missing file, invalid JSON, another experiment, no rows, or a
      row without one of the required keys.
  """
  try:
    with open(path) as f:
      record = json.load(f)
  except FileNotFoundError:
    raise UserError(f"{path}: no such file") from None
  except OSError as e:
    raise UserError(f"{path}: {e.strerror}") from None
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise UserError(f"{path}: not a JSON result file ({e})") from None
  if not isinstance(record, dict) or record.get("experiment") != experiment:
    found = record.get("experiment") if isinstance(record, dict) else type(record).__name__
    raise UserError(f"{path}: expected a result file of experiment {experiment!r}, found {found!r}")
  rows = record.get("rows")
  if not isinstance(rows, list) or not rows:
    raise UserError(f"{path}: the result holds no rows")
  for i, row in enumerate(rows):
    missing = [k for k in required if not isinstance(row, dict) or k not in row]
    if missing:
      raise UserError(f"{path}: row {i} lacks {', '.join(missing)}")
    for key, kind in required.items():
      value = row[key]
      ok = (isinstance(value, str) if kind is str else
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value))
      if not ok:
        raise UserError(f"{path}: row {i}: {key} = {value!r} is not a {kind.__name__}")
  return record, rows


def figure_format(out_path):
  """Returns the image format out_path names (png without an extension); touches no file.

  Raises:
    UserError: a format matplotlib cannot write.
  """
  ext = os.path.splitext(out_path)[1][1:].lower() or "png"
  formats = FigureCanvasBase.get_supported_filetypes()
  if ext not in formats:
    raise UserError(f"{out_path}: cannot write .{ext} images; use one of {', '.join(sorted(formats))}")
  return ext


def check_figure_path(out_path):
  """Returns the image format of out_path (png without an extension).

  Raises:
    UserError: a format matplotlib cannot write, or an unwritable path
      (its folders are created).
  """
  ext = figure_format(out_path)
  check_writable(out_path)
  return ext


def save_figure(fig, out_path):
  """Saves a matplotlib figure atomically, in the format its extension names."""
  ext = check_figure_path(out_path)
  with atomic_path(out_path) as tmp:
    # tight: legends placed outside the axes (Fig. 15's, below its panels) stay inside the image
    fig.savefig(tmp, dpi=130, format=ext, bbox_inches="tight")
