"""Table 1: TrEMBL split sizes and sequence lengths, ours beside the paper's (App. C.1)."""

import json
import os

from performer.errors import UserError
from performer.figures import paper
from performer.figures.tables import Column, cell, csv_path, write_table

NAME = "table1"  # performer figure NAME
SUMMARY = "Table 1 TrEMBL split statistics beside the paper's (--input dataset folder)"
TABLE = True
INPUT = "runs/data/trembl-sample"  # prepare-trembl --sample writes it (trembl.SAMPLE_OUT)

SPLITS = ("train", "valid", "test", "ood")
FIELDS = ("min", "max", "mean", "std", "median")
COLUMNS = (Column("task"), Column("split"), Column("source"),
           Column("sequences / chunks", "{:,.0f}"), Column("min", "{:,.0f}"),
           Column("max", "{:,.0f}"), Column("mean", "{:,.2f}"), Column("std", "{:,.2f}"),
           Column("median", "{:,.2f}"))


def load_stats(input_path):
  """The stats dict of a dataset folder (or of its stats.json itself)."""
  path = os.path.join(input_path, "stats.json") if os.path.isdir(input_path) else input_path
  try:
    with open(path) as f:
      stats = json.load(f)
  except FileNotFoundError:
    raise UserError(f"{path}: no such file; is {input_path} a `performer prepare-trembl` "
                    "folder?") from None
  except OSError as e:
    raise UserError(f"{path}: {e.strerror}") from None
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise UserError(f"{path}: not valid JSON ({e})") from None
  single = stats.get("single") if isinstance(stats, dict) else None
  if not isinstance(single, dict) or not all(isinstance(v, dict) for v in single.values()):
    raise UserError(f"{path}: no per-split length statistics ('single'); is it a "
                    "`performer prepare-trembl` stats.json?")
  return path, stats


def _ood_note(stats):
  ood = stats.get("ood")
  if isinstance(ood, dict):
    return (f"OOD: {ood.get('families_held_out', '?')} of {ood.get('families_in_mapping', '?')} "
            "families held out (the paper holds out 20 Pfam families).")
  return f"OOD: {ood or 'no OOD split'}; its row shows '-'."


def render(input_path, out_path):
  """Reads DATASET/stats.json and writes out_path (Markdown) and its .csv twin.

  Returns:
    (markdown path, csv path).

  Raises:
    UserError: out_path is not a .md path or unwritable; no stats.json, or
      not one written by prepare-trembl.
  """
  csv_path(out_path)  # a wrong --out fails before reading
  path, stats = load_stats(input_path)
  single = stats["single"]
  rows = []
  for split in SPLITS:
    ours = single.get(split)
    if ours is None and split not in paper.TABLE1_SINGLE:
      continue
    ours = ours or {}
    rows.append(["single", split, "ours", ours.get("count")] + [ours.get(f) for f in FIELDS])
    theirs = paper.TABLE1_SINGLE.get(split, {})
    rows.append(["single", split, "paper", theirs.get("count")] + [theirs.get(f) for f in FIELDS])
  notes = [(f"Ours: {path}. Lengths are residues per sequence before clipping to "
            f"L = {stats.get('single_clipped_to', '?')}; std is the population standard "
            "deviation."),
           _ood_note(stats)]
  concat = stats.get("concat")
  if isinstance(concat, dict):
    for split in SPLITS:
      ours = concat.get(split)
      count = paper.TABLE1_CONCAT.get(split)
      if ours is None and count is None:
        continue
      if isinstance(ours, dict) and ours.get("count"):
        n = ours.get("length")
        rows.append(["concat", split, "ours", ours["count"], n, n, n, 0, n])
      else:
        rows.append(["concat", split, "ours", (ours or {}).get("count")] + [None] * 5)
      n = paper.CONCAT_LEN if count is not None else None
      rows.append(["concat", split, "paper", count, n, n, n, 0 if n else None, n])
    notes.append("Concat: EOS-joined sequences cut into chunks of exactly the chunk length; the "
                 "paper builds only train and valid chunks.")
  else:
    notes.append("Concat: this stats.json has no concat task counts.")
  notes.append("Paper: Table 1 (App. C.1), the Jan. 2019 TrEMBL release, deduplicated.")
  records = {k: stats.get(k) for k in ("records_read", "records_kept", "duplicates_dropped")}
  if all(v is not None for v in records.values()):
    read, kept, dropped = (cell(v, "{:,}") for v in records.values())
    notes.append(f"Ours: {read} records read, {kept} kept, duplicates dropped: {dropped}.")
  return write_table(out_path, "Table 1: protein dataset statistics, ours beside the paper's TrEMBL",
                     COLUMNS, rows, notes)
