"""Output folders of prepared datasets: locked, checked first, built aside, swapped in.

`prepare` is every prepare-* command's protocol; a dataset is its options and its inputs' sha256."""

import hashlib
import json
import os
import shutil
import sys

from performer.version import __version__
from performer.atomic import exclusive_lock, writable_folder
from performer.errors import UserError

MARKER = ".performer-partial"


def prepare(out, inputs, fingerprint, force, build):
  """Locks `out`, checks it, builds the dataset beside it and swaps it in.

  Args:
    out, inputs, fingerprint, force: as `check`.
    build: callable(folder) -> (stats dict, a line saying what was built or
      None); writes the dataset into the empty build folder `<out>.partial`
      (`write` puts stats.json and manifest.json). The line is printed, with
      "-> out", once the dataset is in place.

  Returns:
    (stats, built): the stats of the dataset now in `out`, and False when
    `out` already held this very dataset (its stats.json is read back).

  Raises:
    UserError: see `lock` and `check`; whatever `build` raises is raised
      after the build folder is removed.
  """
  with lock(out):
    if check(out, inputs, fingerprint, force):
      print(f"{out} already holds this dataset (same input contents and options); nothing to do")
      with open(os.path.join(out, "stats.json")) as f:
        return json.load(f), False
    tmp = begin(out)
    try:
      result, line = build(tmp)
    except BaseException:
      abort(tmp)
      raise
    commit(tmp, out)
  if line:
    print(f"{line} -> {out}")
  return result, True


def write(folder, stats, manifest, markdown=None):
  """Writes a dataset's stats.json, manifest.json (with the performer version that made it)
  and, given `markdown`, stats.md into `folder`."""
  manifest = {**manifest, "product": f"performer {__version__}"}
  for name, obj in (("stats.json", stats), ("manifest.json", manifest)):
    with open(os.path.join(folder, name), "w") as f:
      json.dump(obj, f, indent=1, sort_keys=True)
      f.write("\n")
  if markdown is not None:
    with open(os.path.join(folder, "stats.md"), "w") as f:
      f.write(markdown)


def print_stats(out):
  """Prints the stats.md of the dataset in `out` (what prepare-* commands end with)."""
  with open(os.path.join(out, "stats.md")) as f:
    print(f.read().rstrip())


def _check_name(out):
  if not out or os.path.abspath(out) in ("/", os.path.abspath(os.sep)) or out.strip("./") == "":
    raise UserError(f"--out {out!r} cannot be the output folder; name a new folder")


def lock(out):
  """Context manager holding `<out>.lock` for a whole run.

  Raises:
    UserError: another run holds it (naming its pid, host and command), or
      `out` is not a usable name.
  """
  _check_name(out)
  return exclusive_lock(out.rstrip("/") + ".lock", f"--out {out}")


def file_stat(path):
  """{"realpath", "bytes", "mtime_ns", "ctime_ns"} of a file: when a recorded sha256 still holds.

  Raises:
    UserError: the file cannot be read.
  """
  try:
    st = os.stat(path)
  except OSError as e:
    raise UserError(f"{path}: {e.strerror}") from None
  return {"realpath": os.path.realpath(path), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns,
          "ctime_ns": st.st_ctime_ns}


def file_digest(path, known=()):
  """`file_stat(path)` plus "sha256", taken from `known` when it holds this unchanged file.

  Args:
    path: a file.
    known: digests recorded earlier (as this function returns them); one with
      the same realpath, size, mtime and ctime is trusted instead of reading.

  Raises:
    UserError: the file cannot be read.
  """
  entry = file_stat(path)
  for old in known:
    if isinstance(old, dict) and old.get("sha256") and all(
        old.get(k) == v for k, v in entry.items()):
      return {**entry, "sha256": old["sha256"]}
  sha = hashlib.sha256()
  try:
    with open(path, "rb") as f:
      for chunk in iter(lambda: f.read(1 << 20), b""):
        sha.update(chunk)
  except OSError as e:
    raise UserError(f"{path}: {e.strerror}") from None
  return {**entry, "sha256": sha.hexdigest()}


def check(out, inputs, fingerprint, force):
  """Validates `out`; returns True if it already holds this very dataset.

  Args:
    out: the output folder.
    inputs: paths read by the run (files or folders).
    fingerprint: callable(manifest) -> JSON-able description of this run's
      input contents and options, given the manifest.json of the dataset now
      in `out` (to reuse its recorded digests); only called when there is
      one, so a run into a new folder reads no input twice.
    force: replace an `out` that holds another performer dataset.

  Raises:
    UserError: an unusable path, an `out` that is or holds an input, or one
      that holds something else (another dataset without --force).
  """
  _check_name(out)
  target = os.path.realpath(out)
  for path in inputs:
    source = os.path.realpath(path)
    if source == target or source.startswith(target + os.sep):
      raise UserError(f"--out {out} is or holds the input {path}; choose another folder")
  check_place(out)
  if not os.path.exists(out) or not os.listdir(out):
    return False
  manifest = os.path.join(out, "manifest.json")
  if not os.path.isfile(manifest):
    raise UserError(f"{out} exists and is not a prepared dataset; choose another --out"
                    + (" (--force only replaces prepared datasets)" if force else ""))
  with open(manifest) as f:
    held = json.load(f)
  if "mtime_ns" in json.dumps(held.get("fingerprint")):  # by path and time: an older performer's
    print(f"{out}: prepared by an older performer, which identified inputs by path and time; "
          "rebuilding it", file=sys.stderr)
    return False
  same = held.get("fingerprint") == fingerprint(held)
  if same and not force:
    return True
  if not force:
    raise UserError(f"{out} already holds a different dataset (its manifest.json lists other "
                    "inputs or options); choose another --out or pass --force")
  return False


def check_place(out):
  """The checks of `check` that need no input: a usable name, not a file, a writable parent.

  Commands run it before fetching a sample, so a bad --out fails at once.

  Raises:
    UserError: an unusable `out`.
  """
  _check_name(out)
  if os.path.exists(out) and not os.path.isdir(out):
    raise UserError(f"--out {out} exists and is a file, not a folder")
  writable_folder(os.path.dirname(os.path.realpath(out)))


def begin(out):
  """Creates and returns the marked build folder `<out>.partial`.

  Raises:
    UserError: `<out>.partial` exists and was not made by this code.
  """
  tmp = out.rstrip("/") + ".partial"
  if os.path.exists(tmp):
    if not os.path.exists(os.path.join(tmp, MARKER)):
      raise UserError(f"{tmp} exists and was not made by performer; move it away")
    shutil.rmtree(tmp)  # left by a killed run
  os.makedirs(tmp)
  open(os.path.join(tmp, MARKER), "w").close()  # pylint: disable=consider-using-with
  return tmp


def commit(tmp, out):
  """Swaps the finished build folder in for `out`."""
  os.remove(os.path.join(tmp, MARKER))
  if os.path.exists(out):
    shutil.rmtree(out)  # check() verified it holds a performer dataset
  os.replace(tmp, out)


def abort(tmp):
  """Removes a build folder after a failure."""
  if os.path.exists(os.path.join(tmp, MARKER)):
    shutil.rmtree(tmp, ignore_errors=True)
