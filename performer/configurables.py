"""gin registrations: gin reaches the library only through these config dataclasses.

Library code never imports gin; an unknown name or field in a gin file is an error."""

import ast
import dataclasses
import logging
import os
import re

import gin

from performer.data import pipeline
from performer.data.pipeline import DataConfig
from performer.errors import UserError
from performer.flags import binding, file, flag
from performer.models.config import ModelConfig
from performer.train.config import Config, OptimConfig, TrainConfig
from performer.train.sharding import MeshConfig

_CONFIGS = {cls.__name__: gin.external_configurable(cls, cls.__name__)
            for cls in (DataConfig, MeshConfig, ModelConfig, OptimConfig, TrainConfig)}


def build(name, **overrides):
  """An instance of config class `name` with the parsed gin bindings applied."""
  return _CONFIGS[name](**overrides)


def resolve():
  """The parsed gin config as a typed Config; relative data and init_from paths made absolute.

  The paths are resolved from the current folder, so that the operative
  config a run records works from any folder.

  Raises:
    UserError: an invalid configuration (e.g. a zero batch size, d_model
      not divisible by num_heads) or no prepared dataset at DataConfig.path.
  """
  try:
    resolve_paths()
    data, optim, train, mesh = (build(name) for name in ("DataConfig", "OptimConfig",
                                                         "TrainConfig", "MeshConfig"))
  except (ValueError, TypeError) as e:
    raise UserError(f"invalid configuration: {str(e).splitlines()[0]}") from None
  _check_data_fields_unbound()
  vocab = pipeline.vocab_ids(data)
  try:
    model = build("ModelConfig", vocab_size=vocab.size, max_len=data.seq_len)
  except (ValueError, TypeError) as e:
    raise UserError(f"invalid model configuration: {str(e).splitlines()[0]}") from None
  pipeline.check_model(data, model)
  return Config(data=data, model=model, optim=optim, train=train, mesh=mesh, vocab=vocab)


def settings(*, changed_only=False):
  """The parsed gin config as plain values, without reading the dataset: what a run will be.

  A plan checks and fingerprints its train jobs with it before any data
  exists; model.vocab_size and model.max_len (from the dataset and
  DataConfig.seq_len) are left out.

  Args:
    changed_only: leave out every field at its dataclass default and give the
      attention options resolved with the backend's defaults: what a plan
      fingerprints, so that a field added later with a default that keeps
      the old behaviour does not make finished runs look changed (changing
      an existing default does not either: name the value in the gin file).

  Returns:
    {"data": {...}, "model": {...}, "optim": {...}, "train": {...}, "mesh": {...}}.

  Raises:
    UserError: an invalid configuration, as resolve() raises it.
  """
  _check_data_fields_unbound()
  try:
    parts = {name: build(cls) for name, cls in (("data", "DataConfig"), ("optim", "OptimConfig"),
                                                ("train", "TrainConfig"), ("mesh", "MeshConfig"))}
    parts["model"] = build("ModelConfig", vocab_size=1, max_len=parts["data"].seq_len)
  except (ValueError, TypeError) as e:
    raise UserError(f"invalid configuration: {str(e).splitlines()[0]}") from None
  values = {name: dataclasses.asdict(cfg) for name, cfg in parts.items()}
  for field in ("vocab_size", "max_len"):
    del values["model"][field]
  if changed_only:
    from performer import attention  # pylint: disable=import-outside-toplevel
    for name, cfg in parts.items():
      defaults = {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                  for f in dataclasses.fields(cfg) if f.default is not dataclasses.MISSING
                  or f.default_factory is not dataclasses.MISSING}
      values[name] = {k: v for k, v in values[name].items()
                      if k not in defaults or v != defaults[k]}
    model = parts["model"]
    given = model.attention_options or {}
    values["model"]["attention_options"] = {
        k: v for k, v in attention.options(model.attention, given).items()
        if k in given or k not in LATER_OPTIONS or v != attention.info(model.attention).defaults[k]}
  return values


def _check_data_fields_unbound():
  """The model's vocabulary and length come from the data; a binding of them would be ignored
  while config.gin records it, so it is refused."""
  for field, source in (("vocab_size", "the dataset's vocabulary"),
                        ("max_len", "DataConfig.seq_len")):
    try:
      gin.query_parameter(f"ModelConfig.{field}")
    except ValueError:
      continue
    raise UserError(f"ModelConfig.{field} is set from {source}; remove its binding")


# Backend options added after finished runs were fingerprinted: left out at their default, so
# that those runs (and their archives) still match; any other default is fingerprinted resolved.
# A new option of any backend goes here (tests/plans/test_archive.py checks every committed
# archive against the plan).
LATER_OPTIONS = ("feature_dim", "batch_tokens", "span", "renormalize", "fused")


# `include 'gin/...'` resolves from the repository root as well as the working folder.
gin.add_config_file_search_path(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclasses.dataclass(frozen=True)
class GinFlags:
  """The gin files and bindings of a command that trains (train, throughput)."""
  gin: tuple[str, ...] = flag(help="gin config file (repeatable): an experiment config (gin/, "
                                   "gin/mini/), then overlays such as gin/cluster/*.gin",
                              action="append", parse=file)
  gin_param: tuple[str, ...] = flag((), "extra gin binding NAME=VALUE, e.g. "
                                        "TrainConfig.steps=500 (repeatable)", action="append",
                                    name="--gin_param", parse=binding)


def parse(files, bindings):
  """Parses gin files and NAME=VALUE bindings.

  Raises:
    UserError: a missing gin file (or a folder), one that is not UTF-8
      (named, an included one too), one that includes a missing file, an
      unknown name, or a malformed value (an unquoted string gets the
      binding with quotes).
  """
  for path in files:
    if os.path.isdir(path):
      raise UserError(f"{path} is a folder, not a gin file")
    if not os.path.isfile(path):
      raise UserError(f"{path}: no such gin file")
    _check_utf8(path)
  gin.clear_config()
  try:
    logging.disable(logging.ERROR)  # gin logs a missing include before raising it below
    gin.parse_config_files_and_bindings(files, bindings)
  except UnicodeDecodeError as e:  # an included file: gin names the include, not the file
    lines = [line.strip() for line in str(e).strip().splitlines()]
    included = next((m.group(1) for m in map(_INCLUDE.match, lines) if m), "an included file")
    where = next((f" ({line})" for line in lines if line.startswith("In file")), "")
    raise UserError(f"gin: {included}: not UTF-8 text (byte {e.start}){where}") from None
  except (OSError, ValueError, KeyError, SyntaxError) as e:
    for binding in bindings:
      name, _, value = (part.strip() for part in binding.partition("="))
      if _unquoted(value):
        raise UserError(f"gin: {binding}: strings need quotes, as in {name}={value!r}") from None
      if "malformed node" in str(e) and _not_a_value(value):
        raise UserError(f"gin: {binding}: not a gin value (a number, a 'string', True, False, "
                        "None, a list, dict or tuple of them, an @reference or a %macro)"
                        ) from None
    lines = [line.strip() for line in str(e).strip().splitlines()]
    where = next((f" ({line})" for line in lines[1:] if line.startswith("In file")), "")
    raise UserError(f"gin: {lines[0]}{where}") from None
  finally:
    logging.disable(logging.NOTSET)


def _check_utf8(path):
  """Raises UserError naming gin file `path` unless it is UTF-8 text, as gin reads it."""
  try:
    with open(path, "rb") as f:
      f.read().decode("utf-8")
  except UnicodeDecodeError as e:
    raise UserError(f"{path}: not UTF-8 text (byte {e.start}); gin files are UTF-8") from None
  except OSError as e:
    raise UserError(f"{path}: {e.strerror}") from None


_INCLUDE = re.compile(r"""include\s+['"](.+)['"]""")


def check_names_a_model():
  """Refuses parsed gin that names no model: an overlay (gin/cluster/*.gin, *_sizes.gin) alone.

  Without an experiment config, training would silently fall back to the
  dataclasses' defaults (a regular-size model on the sample data).

  Raises:
    UserError: ModelConfig.attention is bound by no file or binding.
  """
  try:
    gin.query_parameter("ModelConfig.attention")
  except ValueError:
    raise UserError("the gin files name no model (ModelConfig.attention is unbound): "
                    "gin/cluster/*.gin and *_sizes.gin are overlays; give an experiment config "
                    "first, e.g. --gin gin/mini/trembl_u_exact.gin --gin gin/cluster/bfloat16.gin"
                    ) from None


def _not_a_value(value):
  """Whether a binding's value is no literal gin reads (e.g. float('nan'), an expression)."""
  if value.startswith(("@", "%")):
    return False
  try:
    ast.literal_eval(value)
    return False
  except (ValueError, SyntaxError):
    return True


def _unquoted(value):
  """Whether a binding's value is a bare word or path that gin cannot read, e.g. concat."""
  if not re.fullmatch(r"[\w.~/-]+", value) or value in ("True", "False", "None"):
    return False
  try:
    ast.literal_eval(value)  # a number
    return False
  except (ValueError, SyntaxError):
    return True


def resolve_paths():
  """Rebinds DataConfig.path and TrainConfig.init_from as absolute paths (from this folder).

  Called when a run starts, so that the config.gin it records works from any folder.
  """
  for name, field in (("DataConfig", "path"), ("TrainConfig", "init_from")):
    value = getattr(build(name), field)
    if value and not os.path.isabs(value):
      with gin.unlock_config():
        gin.bind_parameter(f"{name}.{field}", os.path.abspath(value))


def operative_config():
  return gin.config_str()
