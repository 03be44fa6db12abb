"""Fixtures shared across test folders."""

import pytest

from performer.data import samples, trembl


@pytest.fixture(scope="session", name="data")
def fixture_sample_dataset(tmp_path_factory):
  """The real sample proteome prepared once per session (5% valid, 5% test), as a str path.

  Many tests train tiny models on it; it is read-only for them.
  """
  out = tmp_path_factory.mktemp("data") / "trembl"
  trembl.prepare(trembl.TremblConfig(inputs=(samples.fetch("protein"),), valid_fraction=0.05,
                                     test_fraction=0.05), str(out), workers=1, progress=False)
  return str(out)
