"""Speed target 6: `prepare-trembl --no-dedup` against `zcat` of the same file, in one run.

    .venv/bin/python scripts/prepare_speed.py runs/data/swissprot.fasta.gz \
        --out results/prepare_speed_cpu.json

Times both commands alternately (--repeats each, whole commands: start-up
included), prints the medians and their ratio (target <= 2) and writes them
as JSON. Only the ratio means something: the machine's load changes both.
prepare-trembl writes its shards (about twice the residues in bytes) under
$TMPDIR (default /tmp): set TMPDIR=/dev/shm to leave the disk out.
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

TARGET = 2.0


def _timed(command):
  start = time.perf_counter()
  subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  return time.perf_counter() - start


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("fasta", help="a gzip FASTA file, e.g. the one scripts/get_swissprot.sh builds")
  parser.add_argument("--repeats", type=int, default=3, help="runs of each command (default 3)")
  parser.add_argument("--out", help="JSON file to write (default: print only)")
  args = parser.parse_args()
  if not os.path.isfile(args.fasta):
    sys.exit(f"prepare_speed: {args.fasta}: no such file")
  performer = [sys.executable, "-m", "performer.cli", "prepare-trembl", "--no-dedup", "--force"]
  times = {"zcat": [], "prepare_trembl": []}
  with tempfile.TemporaryDirectory() as tmp:
    for i in range(args.repeats):
      times["zcat"].append(_timed(["zcat", args.fasta]))
      out = os.path.join(tmp, f"run{i}")
      times["prepare_trembl"].append(_timed(performer + [args.fasta, "--out", out]))
      shutil.rmtree(out)
  medians = {k: statistics.median(v) for k, v in times.items()}
  ratio = medians["prepare_trembl"] / medians["zcat"]
  verdict = "met" if ratio <= TARGET else "NOT met"
  print(f"zcat {medians['zcat']:.2f} s, prepare-trembl --no-dedup {medians['prepare_trembl']:.2f} s"
        f" (medians of {args.repeats}): ratio {ratio:.2f} (target <= {TARGET:g}: {verdict})")
  if args.out:
    record = {"input": os.path.basename(args.fasta), "bytes": os.path.getsize(args.fasta),
              "times_s": times, "median_s": medians, "ratio": ratio, "target": TARGET,
              "met": ratio <= TARGET, "output_folder": tempfile.gettempdir(),
              "cores": os.cpu_count(), "machine": platform.machine(),
              "load_average": os.getloadavg()}
    with open(args.out, "w") as f:
      json.dump(record, f, indent=1)
      f.write("\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
