"""Reading result files and writing figures, shared by every figure module."""

import json

from performer.atomic import atomic_path
from performer.errors import UserError


def load_rows(path, experiment, required):
  """Loads a result JSON and checks it holds `experiment` rows with `required` keys.

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
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise UserError(f"{path}: not a JSON result file ({e})") from None
  if not isinstance(record, dict) or record.get("experiment") != experiment:
    found = record.get("experiment") if isinstance(record, dict) else type(record).__name__
    raise UserError(f"{path}: expected a {experiment!r} result, found {found!r}")
  rows = record.get("rows")
  if not isinstance(rows, list) or not rows:
    raise UserError(f"{path}: the result holds no rows")
  for i, row in enumerate(rows):
    missing = [k for k in required if not isinstance(row, dict) or k not in row]
    if missing:
      raise UserError(f"{path}: row {i} lacks {', '.join(missing)}")
  return record, rows


def save_figure(fig, out_path):
  """Saves a matplotlib figure atomically (temporary name, then rename)."""
  with atomic_path(out_path) as tmp:
    fig.savefig(tmp, dpi=130)
