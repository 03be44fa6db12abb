"""Writing a table as Markdown (for reading) and CSV (for tools), shared by the table figures.

`--out X.md` writes X.md and X.csv; Markdown rounds per column, CSV keeps full precision."""

import csv
import dataclasses
import os

from performer.atomic import atomic_path, check_writable
from performer.errors import UserError

MISSING = "-"


@dataclasses.dataclass(frozen=True)
class Column:
  """A table column: its header and the format of its numbers in the Markdown."""
  name: str
  fmt: str = "{}"


def csv_path(out_path):
  """The CSV twin of a Markdown path (X.md -> X.csv).

  Raises:
    UserError: out_path does not end in .md, or cannot be written.
  """
  stem, ext = os.path.splitext(out_path)
  if ext.lower() != ".md":
    raise UserError(f"{out_path}: tables are written as NAME.md plus NAME.csv; give --out NAME.md")
  check_writable(out_path)
  return stem + ".csv"


def cell(value, fmt="{}"):
  """A Markdown cell: MISSING for None, numbers by fmt, anything else as text with | escaped."""
  if value is None:
    return MISSING
  if isinstance(value, (int, float)) and not isinstance(value, bool):
    return fmt.format(value)
  return str(value).replace("|", "\\|")


def markdown(columns, rows):
  """The Markdown table (header, rule, one line per row), without a trailing newline."""
  lines = ["| " + " | ".join(c.name for c in columns) + " |",
           "|" + " --- |" * len(columns)]
  for row in rows:
    lines.append("| " + " | ".join(cell(v, c.fmt) for v, c in zip(row, columns)) + " |")
  return "\n".join(lines)


def write_table(out_path, title, columns, rows, notes=()):
  """Writes out_path (title, table, notes as Markdown) and its CSV twin, each atomically.

  Args:
    out_path: a .md path; the CSV goes beside it (csv_path).
    title: the Markdown heading.
    columns: the Columns.
    rows: lists of cell values (numbers, strings, None), one per column.
    notes: lines printed under the table.

  Returns:
    (markdown path, csv path).

  Raises:
    UserError: see csv_path.
  """
  table_csv = csv_path(out_path)
  text = f"## {title}\n\n{markdown(columns, rows)}\n"
  if notes:
    text += "\n" + "\n".join(f"- {note}" for note in notes) + "\n"
  with atomic_path(table_csv) as tmp_csv, atomic_path(out_path) as tmp_md:
    with open(tmp_csv, "w", newline="") as f:
      writer = csv.writer(f)
      writer.writerow([c.name for c in columns])
      writer.writerows([["" if v is None else v for v in row] for row in rows])
    with open(tmp_md, "w") as f:
      f.write(text)
  return out_path, table_csv
