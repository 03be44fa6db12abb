"""Write-then-rename, so that an output file appears complete or not at all."""

import contextlib
import errno
import fcntl
import os
import shlex
import socket
import stat
import sys
import tempfile
import time

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
    blocker = next((p for p in _ancestors(folder) if os.path.exists(p) and not os.path.isdir(p)),
                   None)
    reason = f"{blocker} is a file, not a folder" if blocker else e.strerror
    raise UserError(f"cannot create folder {folder}: {reason}") from None
  try:  # a real file, not os.access: root passes that check where writes still fail (/proc)
    fd, probe = tempfile.mkstemp(dir=folder, prefix=".tmp-")
  except OSError as e:  # /proc answers "No such file or directory" for a folder that exists
    reason = ("it accepts no new files (a virtual or read-only file system)"
              if e.errno == errno.ENOENT and os.path.isdir(folder) else e.strerror)
    raise UserError(f"cannot write to folder {folder}: {reason}") from None
  os.close(fd)
  os.unlink(probe)


def _ancestors(folder):
  """folder and its parents, outermost first."""
  parts, path = [], os.path.abspath(folder)
  while path != os.path.dirname(path):
    parts.append(path)
    path = os.path.dirname(path)
  return reversed(parts)


@contextlib.contextmanager
def exclusive_lock(path, what):
  """Holds an exclusive lock on the file `path` for the block; fails at once if it is taken.

  The lock is an fcntl.flock, so the kernel drops it when its holder dies: a
  lock file left by a killed run never blocks. While held, the file names its
  holder (pid, host, start time, command) for the error of a second run; it is
  removed on release. Folders are created. flock works between processes of
  one machine and, on Linux, over NFS v4; not on every network file system.

  Args:
    path: the lock file, e.g. `<folder>.lock` beside the folder it guards.
    what: what it guards, for the error message, e.g. "--out runs/data/x".

  Raises:
    UserError: another process holds the lock (naming it), or `path` cannot
      be created.
  """
  check_writable(path)
  while True:
    try:
      fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
      raise UserError(f"cannot create the lock file {path}: {e.strerror}") from None
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      with os.fdopen(fd, errors="replace") as f:
        holder = " ".join(f.read().split()) or "another process (starting up)"
      raise UserError(f"{what} is in use by {holder}; wait for it to finish "
                      f"(lock file {path})") from None
    try:  # the holder before us may have removed the file after we opened it
      same = os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
      same = False
    if same:
      break
    os.close(fd)
  if os.pread(fd, 4, 0) not in (b"", b"pid "):  # a stale lock of ours is fine, a user's file not
    os.close(fd)
    raise UserError(f"{path} exists and is not a performer lock file; move it away")
  try:
    os.ftruncate(fd, 0)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    command = " ".join(shlex.quote(a) for a in [os.path.basename(sys.argv[0]), *sys.argv[1:]])
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {started}: {command}\n"
             .encode())
    yield
  finally:
    with contextlib.suppress(FileNotFoundError):
      os.unlink(path)  # while still locked, so that no one can lock the removed file
    os.close(fd)
