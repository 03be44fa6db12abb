"""Output folders of prepared datasets: checked first, built aside, swapped in when complete.

A dataset is built in `<out>.partial`, which holds a marker file so that only
folders this code made are ever deleted, and renamed to `<out>` at the end.
`--force` replaces an `<out>` only if it holds a performer dataset
(manifest.json), never a folder of other files, an input, or a folder that
holds an input.
"""

import json
import os
import shutil

from performer.atomic import writable_folder
from performer.errors import UserError

MARKER = ".performer-partial"


def check(out, inputs, fingerprint, force):
  """Validates `out`; returns True if it already holds this very dataset.

  Args:
    out: the output folder.
    inputs: paths read by the run (files or folders).
    fingerprint: JSON-able description of inputs and options.
    force: replace an `out` that holds another performer dataset.

  Raises:
    UserError: an unusable path, an `out` that is or holds an input, or one
      that holds something else (another dataset without --force).
  """
  if not out or os.path.abspath(out) in ("/", os.path.abspath(os.sep)) or out.strip("./") == "":
    raise UserError(f"--out {out!r} cannot be the output folder; name a new folder")
  target = os.path.realpath(out)
  for path in inputs:
    source = os.path.realpath(path)
    if source == target or source.startswith(target + os.sep):
      raise UserError(f"--out {out} is or holds the input {path}; choose another folder")
  if os.path.exists(out) and not os.path.isdir(out):
    raise UserError(f"--out {out} exists and is a file, not a folder")
  writable_folder(os.path.dirname(target))
  if not os.path.exists(out) or not os.listdir(out):
    return False
  manifest = os.path.join(out, "manifest.json")
  if not os.path.isfile(manifest):
    raise UserError(f"{out} exists and is not a prepared dataset; choose another --out"
                    + (" (--force only replaces prepared datasets)" if force else ""))
  with open(manifest) as f:
    same = json.load(f).get("fingerprint") == fingerprint
  if same and not force:
    return True
  if not force:
    raise UserError(f"{out} already holds a different dataset (its manifest.json lists other "
                    "inputs or options); choose another --out or pass --force")
  return False


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
