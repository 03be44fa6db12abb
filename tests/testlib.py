"""What tests in several folders share: the repository's root and the tiny model's gin overlay."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "tests", "tiny.gin")  # DataConfig and ModelConfig of a tiny model


def gin(config):
  """The gin files of experiment config `config` (a path under ROOT) with the tiny model over it."""
  return [os.path.join(ROOT, config), TINY]
