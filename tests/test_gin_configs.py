"""Every gin config parses and builds, says what it reproduces, and mini twins override sizes only."""

import glob
import os
import re

import pytest

from performer import configurables
from testlib import ROOT

PAPER = sorted(glob.glob("gin/*.gin", root_dir=ROOT) + glob.glob("gin/extras/*.gin", root_dir=ROOT))
TWINS = sorted(glob.glob("gin/mini/*.gin", root_dir=ROOT) + glob.glob("gin/mini/extras/*.gin", root_dir=ROOT))
BASES = ("gin/trembl_base.gin", "gin/pg19_base.gin")
SIZES = ("gin/mini/trembl_sizes.gin", "gin/mini/pg19_sizes.gin")
# What a mini twin may set after its includes: sizes, and attention sizes (m, k, buckets).
SIZE_KEYS = {"DataConfig.seq_len", "ModelConfig.num_layers", "ModelConfig.attention_options",
             "TrainConfig.init_from"}  # init_from: the mini run to start from (Fig. 5)


def _bindings(path):
  lines = open(os.path.join(ROOT, path), encoding="utf-8").read().splitlines()
  return [line.split("=")[0].strip() for line in lines
          if line and not line.startswith(("#", "include")) and "=" in line]


@pytest.mark.parametrize("path", PAPER + TWINS + ["gin/reproduce/mini.gin", "gin/reproduce/tiny.gin"])
def test_every_config_parses_and_builds(path):
  files = [os.path.join(ROOT, path)]
  if path.startswith("gin/reproduce/"):  # a budget goes after a paper file
    files.insert(0, os.path.join(ROOT, "gin/trembl_u_exact.gin"))
  configurables.parse(files, [])
  model = configurables.build("ModelConfig", vocab_size=28, max_len=configurables.build("DataConfig").seq_len)
  configurables.build("TrainConfig"), configurables.build("OptimConfig")
  assert model.d_model % model.num_heads == 0


@pytest.mark.parametrize("path", [p for p in PAPER if p not in BASES])
def test_paper_configs_say_their_figure_and_command(path):
  head = open(os.path.join(ROOT, path), encoding="utf-8").read().splitlines()[:2]
  assert head[0].startswith(f"# performer train --gin {path} --workdir ")
  assert re.match(r"# (Paper (Fig|Table|Sec)|EXTRA, not a paper experiment)", head[1]), head[1]
  twin = path.replace("gin/", "gin/mini/", 1)
  assert twin in TWINS, f"{path} has no CPU twin {twin}"


@pytest.mark.parametrize("path", [p for p in TWINS if p not in SIZES])
def test_mini_twins_include_their_paper_file_and_override_sizes_only(path):
  text = open(os.path.join(ROOT, path), encoding="utf-8").read()
  paper = path.replace("gin/mini/", "gin/", 1)
  kind = "pg19" if "pg19" in path else "trembl"
  assert re.findall(r"^include '(.*)'$", text, re.M) == [paper, f"gin/mini/{kind}_sizes.gin"]
  assert set(_bindings(path)) <= SIZE_KEYS, path


def test_the_paper_runs_reformer_in_u_only_and_linformer_in_b_only():
  main = [p for p in PAPER if p.startswith("gin/trembl_") and "/extras/" not in p]
  assert not [p for p in main if "_b_reformer" in p or "_u_linformer" in p or "linear" in p]
  assert "gin/extras/trembl_b_reformer.gin" in PAPER
  configurables.parse([os.path.join(ROOT, "gin/trembl_b_linformer.gin")], [])
  options = configurables.build("ModelConfig", vocab_size=28, max_len=1024).attention_options
  assert options == {"num_projections": 600, "projections": "random"}  # A.6


def test_concat_configs_are_fig7_right():
  for n in (1, 2, 3):
    configurables.parse([os.path.join(ROOT, f"gin/trembl_concat_u_exact_{n}l.gin")], [])
    m = configurables.build("ModelConfig", vocab_size=28, max_len=8192)
    assert (m.num_heads, m.num_layers, m.d_ff, m.d_model, m.attention) == (8, n, 256, 256, "exact")
  configurables.parse([os.path.join(ROOT, "gin/trembl_concat_u_performer_relu.gin")], [])
  m = configurables.build("ModelConfig", vocab_size=28, max_len=8192)
  assert (m.num_heads, m.num_layers, m.d_ff, m.d_model) == (8, 36, 1024, 512)
  assert configurables.build("DataConfig").task == "concat"
