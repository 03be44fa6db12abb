"""What a results page may print: values read from committed files, and numbers quoted from papers.

Each function is a template global (pages/render.py); a lint render marks every output."""

import csv
import datetime
import json
import math
import os

from performer.errors import UserError

# Around every rendered reference in a lint render (render.lint): private-use characters that
# no page or file holds; QUOTED opens a quote's span instead of MARK.
MARK, END, QUOTED = "\ue000", "\ue001", "\ue002"


def load(root, path):
  """The parsed contents of `path` (relative to `root`, the results folder).

  .json: the object; .csv: a list of row dicts (strings); .jsonl: a list of records; .md: the
  text. Raises UserError on a missing or unparsable file."""
  full = os.path.join(root, path)
  try:
    with open(full, encoding="utf-8") as f:
      if path.endswith(".json"):
        return json.load(f)
      if path.endswith(".jsonl"):
        return [json.loads(line) for line in f if line.strip()]
      if path.endswith(".csv"):
        return list(csv.DictReader(f))
      if path.endswith(".md"):
        return f.read()
  except FileNotFoundError:
    raise UserError(f"{full}: no such file") from None
  except (json.JSONDecodeError, csv.Error, UnicodeDecodeError) as e:
    raise UserError(f"{full}: unreadable ({e})") from None
  raise UserError(f"{full}: a page reads .json, .jsonl, .csv or .md files")


def select(data, keys, where):
  """data[k1][k2]... for keys; a key "field=value" or a dict {field: value} picks the one row of
  a list whose fields equal those (as strings); an int indexes a list.

  Raises UserError naming `where` when a key is missing or a selection matches 0 or 2+ rows."""
  for key in keys:
    if isinstance(data, list) and isinstance(key, (str, dict)) and not isinstance(key, int):
      want = key if isinstance(key, dict) else dict([key.split("=", 1)]) if "=" in key else None
      if want is not None:
        hits = [r for r in data if isinstance(r, dict)
                and all(str(r.get(f)) == str(v) for f, v in want.items())]
        if len(hits) != 1:
          raise UserError(f"{where}: {len(hits)} rows match {want} (need exactly one)")
        data = hits[0]
        continue
    try:
      data = data[key]
    except (KeyError, IndexError, TypeError):
      raise UserError(f"{where}: no key {key!r}") from None
  return data


def formatted(value, fmt="", scale=1, where=""):
  """value as text. fmt is a format spec (".2f", ".1%", ",d"), or "date" / "time" (of an ISO
  timestamp), or "duration" (seconds -> "2 h 31 min", "4 min 10 s", "38 s"); numbers are
  multiplied by `scale` first (1000 for s -> ms). Raises UserError on a non-finite number."""
  if fmt in ("date", "time"):
    stamp = datetime.datetime.fromisoformat(str(value))
    return stamp.strftime("%Y-%m-%d" if fmt == "date" else "%H:%M")
  if isinstance(value, str) and fmt == "":
    return value
  if isinstance(value, str):
    value = float(value.replace(",", ""))
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
    raise UserError(f"{where}: {value!r} is not a finite number")
  value = value * scale
  if fmt == "duration":
    return duration(value)
  if fmt.endswith("d") and isinstance(value, float):
    if value != round(value):
      raise UserError(f"{where}: {value!r} is not an integer (format {fmt!r})")
    value = int(round(value))
  return format(value, fmt)


def duration(seconds):
  """Seconds as "2 h 31 min", "4 min 10 s" or "38 s" (rounded to the unit shown last)."""
  seconds = int(round(seconds))
  if seconds >= 3600:
    minutes = int(round(seconds / 60))
    return f"{minutes // 60} h {minutes % 60} min"
  if seconds >= 60:
    return f"{seconds // 60} min {seconds % 60} s"
  return f"{seconds} s"


class References:
  """The template globals of one render over the results folder `root`; lint=True marks them."""

  def __init__(self, root, lint=False):
    self.root, self.lint = root, lint
    self.read = {}  # path -> parsed contents: what this render read, each file once

  def mark(self, text):
    """text as this render prints a reference (marked in a lint render)."""
    return f"{MARK}{text}{END}" if self.lint else text

  def raw(self, path):
    """The parsed contents of results/`path` (see `load`), read once per render."""
    if path not in self.read:
      self.read[path] = load(self.root, path)
    return self.read[path]

  def _get(self, path, keys):
    return select(self.raw(path), keys, f"results/{path} {list(keys)}")

  def value(self, path, *keys, fmt="", scale=1):
    """The value at `keys` in results/`path`, formatted (see `formatted`)."""
    where = f"results/{path} {list(keys)}"
    return self.mark(formatted(self._get(path, keys), fmt, scale, where))

  def ratio(self, path, a, b, fmt=".2f"):
    """value(a) / value(b), both read from the one file `path` (key lists a and b)."""
    x, y = (float(self._get(path, k)) for k in (a, b))
    return self.mark(formatted(x / y, fmt, 1, f"results/{path}"))

  def difference(self, path, a, b, fmt=".2f", scale=1):
    """value(a) - value(b), both read from the one file `path` (key lists a and b)."""
    x, y = (float(self._get(path, k)) for k in (a, b))
    return self.mark(formatted(x - y, fmt, scale, f"results/{path}"))

  def count(self, path, *keys):
    """How many entries the list or object at `keys` in results/`path` holds."""
    return self.mark(str(len(self._get(path, keys))))

  def table(self, path):
    """A generated Markdown table (results/`path`, written by `performer figure`), verbatim."""
    return self.mark(self._get(path, ()).rstrip("\n"))

  def num(self, value, fmt="", scale=1):
    """A value taken from raw(...) (in a loop over a file's rows), formatted and marked; never
    a number typed into the template."""
    return self.mark(formatted(value, fmt, scale, "num"))

  def quote(self, text, source):
    """A number quoted from a paper or another project: "text (source)"."""
    if not source.strip():
      raise UserError(f"quote({text!r}): name the source (paper, table or figure)")
    said = f"{text} ({source})"
    return f"{QUOTED}{said}{END}" if self.lint else said

  def globals(self):
    """The functions a template calls, by name."""
    return {name: getattr(self, name) for name in
            ("value", "ratio", "difference", "count", "table", "quote", "raw", "num")}
