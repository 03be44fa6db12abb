"""atomic_path: complete file or nothing, usual permissions; exclusive_lock: one holder, named."""

import os
import stat
import subprocess
import sys

import pytest

from performer.atomic import atomic_path, check_writable, exclusive_lock
from performer.errors import UserError


def test_success_renames_with_umask_mode(tmp_path):
  target = tmp_path / "a" / "out.json"
  with atomic_path(str(target)) as tmp:
    with open(tmp, "w") as f:
      f.write("done")
    assert not target.exists()  # nothing visible until the block completes
  assert target.read_text() == "done"
  umask = os.umask(0)
  os.umask(umask)
  assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
  assert os.listdir(target.parent) == ["out.json"]


def test_failure_leaves_the_old_file_and_no_temporary(tmp_path):
  target = tmp_path / "out.json"
  target.write_text("old")
  with pytest.raises(RuntimeError):
    with atomic_path(str(target)) as tmp:
      with open(tmp, "w") as f:
        f.write("half")
      raise RuntimeError("interrupted")
  assert target.read_text() == "old"
  assert os.listdir(tmp_path) == ["out.json"]


def test_special_files_are_written_in_place_not_replaced(tmp_path):
  device = tmp_path / "null"
  try:
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # like /dev/null
  except PermissionError:
    pytest.skip("mknod needs root")
  with atomic_path(str(device)) as tmp:
    assert tmp == str(device)
    with open(tmp, "w") as f:
      f.write("discarded")
  assert stat.S_ISCHR(os.stat(device).st_mode)


@pytest.mark.parametrize("bad, match", [("", "empty"), (None, "is a folder")])
def test_unusable_paths_are_user_errors(tmp_path, bad, match):
  from performer.errors import UserError  # pylint: disable=import-outside-toplevel
  with pytest.raises(UserError, match=match):
    with atomic_path(str(tmp_path) if bad is None else bad):
      pass


_HOLDER = """
import sys, time
from performer.atomic import exclusive_lock
with exclusive_lock(sys.argv[1], "the test folder"):
  print("held", flush=True)
  time.sleep(60)
"""


def test_exclusive_lock_names_its_holder_and_a_killed_holder_does_not_block(tmp_path):
  lock = tmp_path / "out.lock"
  holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(lock)], stdout=subprocess.PIPE,
                            text=True)
  try:
    assert holder.stdout.readline() == "held\n"
    with pytest.raises(UserError, match=rf"^the test folder is in use by pid {holder.pid} on \S+ "
                                        rf"since [-0-9]+ [:0-9]+: -c {lock}; wait for it"):
      with exclusive_lock(str(lock), "the test folder"):
        pass
  finally:
    holder.kill()
    holder.wait()
  assert lock.exists()  # left by the killed holder, but no longer locked
  with exclusive_lock(str(lock), "the test folder"):
    assert lock.read_text().startswith(f"pid {os.getpid()} on ")
  assert not lock.exists()


def test_exclusive_lock_is_released_on_error_and_never_takes_a_users_file(tmp_path):
  lock = tmp_path / "sub" / "x.lock"
  with pytest.raises(KeyboardInterrupt):
    with exclusive_lock(str(lock), "x"):
      raise KeyboardInterrupt
  assert not lock.exists()
  with exclusive_lock(str(lock), "x"):
    pass
  lock.write_text("my notes")
  with pytest.raises(UserError, match="is not a performer lock file"):
    with exclusive_lock(str(lock), "x"):
      pass
  assert lock.read_text() == "my notes"


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs Linux /proc")
def test_a_folder_that_refuses_new_files_is_not_called_missing():
  with pytest.raises(UserError, match="cannot write to folder /proc: it accepts no new files"):
    check_writable("/proc/out.json")


def test_a_file_in_the_way_of_an_output_folder_is_named(tmp_path):
  (tmp_path / "x.fa").write_text(">a\nMK\n")
  with pytest.raises(UserError, match=r"cannot create folder .*x.fa/sub: .*x.fa is a file, not a "
                                      r"folder"):
    check_writable(str(tmp_path / "x.fa" / "sub" / "out.json"))
