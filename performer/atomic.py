"""Write-then-rename, so that an output file appears complete or not at all."""

import contextlib
import os
import tempfile


@contextlib.contextmanager
def atomic_path(path):
  """Yields a temporary path beside `path`; renames it onto `path` on success.

  Parent folders are created. On any exception the temporary file is removed
  and `path` is left as it was. The file gets the usual 0666 & ~umask mode.
  """
  folder = os.path.dirname(os.path.abspath(path))
  os.makedirs(folder, exist_ok=True)
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
