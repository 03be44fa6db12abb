"""gin registrations: gin reaches the library only through these config dataclasses.

Library code never imports gin. A gin file binds fields, e.g.
`ModelConfig.attention = 'performer_relu'`; an unknown name or field is an error.
"""

import os

import gin

from performer.data.pipeline import DataConfig
from performer.models.config import ModelConfig
from performer.train.config import OptimConfig, TrainConfig

_CONFIGS = {cls.__name__: gin.external_configurable(cls, cls.__name__)
            for cls in (DataConfig, ModelConfig, OptimConfig, TrainConfig)}


def build(name, **overrides):
  """An instance of config class `name` with the parsed gin bindings applied."""
  return _CONFIGS[name](**overrides)


# `include 'gin/...'` resolves from the repository root as well as the working folder.
gin.add_config_file_search_path(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse(files, bindings):
  """Parses gin files and NAME=VALUE bindings (raises ValueError naming what is wrong)."""
  gin.clear_config()
  gin.parse_config_files_and_bindings(files, bindings)


def operative_config():
  return gin.config_str()
