"""Writes results/recall_kv_design.json: the recall_kv study's seeds, from a look at recall_conv.

The look: recall_conv's archived seeds 0-3 of the rows recall_kv compares, on test_kv8 and
test_kv16 (figures/recall_kv.py design). It sizes the design and decides nothing; recall_kv's
verdicts use its fresh seeds alone. Run from the repository root:
  .venv/bin/python scripts/recall_kv_design.py
"""

import glob
import json
import os

from performer.atomic import atomic_path
from performer.figures import recall_kv
from performer.figures import runs as runs_lib

RUNS = "results/runs/recall_conv_L64_kv4_{row}_s[0-3]"
OUT = "results/recall_kv_design.json"


def main():
  paths = sorted(p for row in recall_kv.ROWS for p in glob.glob(RUNS.format(row=row)))
  _, rows = recall_kv._rows(runs_lib.load_runs(paths))  # pylint: disable=protected-access
  record = {"look": [os.path.basename(p) for p in paths], **recall_kv.design(rows)}
  with atomic_path(OUT) as tmp, open(tmp, "w") as f:
    json.dump(record, f, indent=1)
  print(f"wrote {OUT}: {record['seeds']} seeds at level {record['level']:.4g}")


if __name__ == "__main__":
  main()
