"""Flags built from typed configs: names, types, defaults that exist once, and the CLI table."""

import argparse
import dataclasses
import importlib

import pytest

from performer import cli, flags
from performer.errors import UserError


def _parse(s):
  if s == "bad":
    raise UserError("bad value")
  return s.upper()


@dataclasses.dataclass(frozen=True)
class _Example:
  run: str = flags.flag(help="required")
  seq_len: int = flags.flag(4096, "L")
  scales: tuple[float, ...] = flags.flag((0.5, 1.0), "s")
  dedup: bool = flags.flag(True, "keep duplicates")
  fast: bool = flags.flag(False, "go fast")
  cap: int | None = flags.flag(None, "cap", shown="the device's")
  names: tuple[str, ...] = flags.flag((), "repeatable", action="append")
  word: str = flags.flag("x", "parsed", parse=_parse, name="--the-word")  # argparse parses "x"
  not_a_flag: dict = None


def _parser():
  parser = argparse.ArgumentParser(exit_on_error=False)
  flags.add(parser, _Example)
  return parser


def test_defaults_types_and_names_come_from_the_fields():
  args = _parser().parse_args(["--run", "r"])
  assert flags.build(_Example, args, not_a_flag={}) == _Example(run="r", word="X", not_a_flag={})
  args = _parser().parse_args(["--run", "r", "--seq-len", "7", "--scales", "1, 2.5", "--no-dedup",
                               "--fast", "--cap", "3", "--names", "a,b", "--names", "c",
                               "--the-word", "w"])
  assert flags.build(_Example, args) == _Example(
      run="r", seq_len=7, scales=(1.0, 2.5), dedup=False, fast=True, cap=3, names=("a,b", "c"),
      word="W")


def test_bad_values_are_argparse_errors_naming_the_flag():
  for argv, message in ((["--seq-len", "x"], "invalid int value: 'x'"),
                        (["--scales", "1,y"], "expected comma-separated numbers, got '1,y'"),
                        (["--scales", "1,,2"], "got an empty item in '1,,2'"),
                        (["--scales", "1,"], "got an empty item in '1,'"),
                        (["--scales", "2,1,2.0"], "2.0 is given twice in '2,1,2.0'"),
                        (["--the-word", "bad"], "bad value")):
    with pytest.raises(argparse.ArgumentError, match=message):
      _parser().parse_args(["--run", "r", *argv])
  with pytest.raises(SystemExit):  # required flag missing
    _parser().parse_args([])


def test_help_states_each_default_once_from_the_field():
  text = _parser().format_help()
  assert "L (default 4096)" in text and "s (default 0.5,1)" in text
  assert "cap (default the device's)" in text and "required" in text
  assert "(default" not in text.split("go fast")[1].split("\n")[0]  # switches state none
  with pytest.raises(TypeError, match="immutable"):
    flags.flag([1], "a list")


@pytest.mark.parametrize("name", cli.EXPERIMENTS)
def test_each_experiment_command_builds_its_config_with_the_dataclass_defaults(name):
  module = importlib.import_module("performer.experiments." + name)
  required = {f.name: "x" for f in dataclasses.fields(module.CONFIG)
              if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
              and "flag" in f.metadata}
  argv = [name.replace("_", "-")] + [a for k, v in required.items() for a in (f"--{k}", v)]
  if getattr(module, "GIN", False):
    argv += ["--gin", "gin/tiny.gin"]
  args = cli._parser().parse_args(argv)
  given = {"run": {}} if getattr(module, "GIN", False) else {}
  assert flags.build(module.CONFIG, args, **given) == module.CONFIG(**required, **given)
  assert args.out == module.OUT and args.out.endswith(".json")


def test_data_commands_resolve_sample_defaults_in_their_modules():
  from performer.data import pg19, trembl  # pylint: disable=import-outside-toplevel
  args = cli._parser().parse_args(["prepare-trembl", "a.fasta"])
  cfg = flags.build(trembl.TremblConfig, args)
  assert (cfg.inputs, cfg.valid_fraction, cfg.test_fraction, cfg.dedup) == (
      ("a.fasta",), trembl.VALID_FRACTION, trembl.TEST_FRACTION, True)
  args = cli._parser().parse_args(["prepare-trembl", "--sample", "--test-fraction", "0.1"])
  overrides = {k: v for k, v in trembl.SAMPLE.items() if getattr(args, k) is None}
  assert overrides == {"valid_fraction": 0.05}
  assert flags.build(pg19.PG19Config, cli._parser().parse_args(
      ["prepare-pg19", "books"])).vocab_size == pg19.VOCAB_SIZE == 32768
