"""Plans resolve the budgets' data folders (runs/data/...) from the working folder."""

import pytest


@pytest.fixture(autouse=True)
def _fresh_working_folder(tmp_path, monkeypatch):
  # A checkout that has prepared the mini data would make its data jobs done; a test sees the
  # fresh machine's plan unless it moves to a folder of its own.
  monkeypatch.chdir(tmp_path)
