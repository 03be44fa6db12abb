"""Write-then-rename, so that an output file appears complete or not at all."""

import contextlib
import os
import stat
import tempfile

from performer.errors import UserError


@contextlib.contextmanager
def atomic_path(path):
  """Yields a temporary path beside `path`; renames it onto `path` on success.

  Parent folders are created. On any exception the temporary file is removed
  and `path` is left as it was. The file gets the usual 0666 & ~umask mode.
  An existing special file (/dev/null, a FIFO) is written in place instead:
  renaming over it would replace the device.

  Raises:
    UserError: `path` is empty or a folder, or its folder cannot be created.
  """
  check_writable(path)
  if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):
    yield path
    return
  folder = os.path.dirname(os.path.abspath(path))
  fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.splitext(path)[1])
  os.close(fd)
  try:
    yield tmp
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def check_writable(path):
  """Raises UserError unless `path` can be written as a file (folders are created)."""
  if not path:
    raise UserError("the output path is empty")
  if os.path.isdir(path):
    raise UserError(f"{path} is a folder; give a file name inside it")
  writable_folder(os.path.dirname(os.path.abspath(path)))


def writable_folder(folder):
  """Creates `folder` if needed; raises UserError unless it can be written."""
  try:
    os.makedirs(folder, exist_ok=True)
  except OSError as e:
    raise UserError(f"cannot create folder {folder}: {e.strerror}") from None
  if not os.access(folder, os.W_OK):
    raise UserError(f"cannot write to folder {folder}")
