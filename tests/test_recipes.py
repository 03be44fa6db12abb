"""docs/ARCHITECTURE.md's recipes, followed as written in a copy of the project: a feature kernel
(softplus) and an experiment with its figure and its place in a study (foo)."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from testlib import ROOT

# The recipe's steps as edits: (file, the line the step goes before, what it adds).
KERNEL = (
    ("performer/favor/features.py", '    "relu": jax.nn.relu,\n',
     '    "softplus": jax.nn.softplus,\n'),
    ("performer/favor/kernels.py", '    Kernel("taylor",',
     '    Kernel("softplus", "generalized", "softplus", "olive"),\n'),
    ("tests/favor/test_generalized_kernels.py", '    "tanh": np.tanh,\n',
     '    "softplus": lambda u: np.logaddexp(0.0, u),\n'),
)
PROBE = (("performer/plans/probes.py", "  return [probe for probe, _ in pairs]",
          '  pairs.append(_probe(ctx, "foo", ("foo",), ctx.result("foo.json"), '
          '"fig99_foo.png"))\n'),)
EXPERIMENT = '''"""foo: the mean of n standard normal draws, a stand-in experiment."""

import dataclasses

import numpy as np

from performer.experiments import results
from performer.flags import flag

NAME = "foo"
SUMMARY = "the mean of n normal draws"
DESCRIPTION = "Draws n standard normal numbers and writes their mean to a JSON file."
OUT = "runs/foo.json"
FIGURE = "foo"


@dataclasses.dataclass(frozen=True)
class FooConfig:
  n: int = flag(100, "how many draws")


CONFIG = FooConfig


def run(cfg, *, progress=True):
  del progress
  draws = np.random.default_rng(0).standard_normal(cfg.n)
  return results.Result(rows=[{"n": cfg.n, "mean": float(draws.mean())}])


def report(cfg, result):
  return [f"mean of {cfg.n} draws: {result.rows[0]['mean']:.4f}"]


FLAGS, main = results.command(__name__)
'''
FIGURE = '''"""foo's figure: its mean as a bar."""

import matplotlib.pyplot as plt

from performer.figures.io import load_rows, save_figure

NAME = "foo"
SUMMARY = "foo's mean (--input foo JSON)"


def render(input_path, out_path):
  _, rows = load_rows(input_path, "foo", {"n": float, "mean": float})
  fig, ax = plt.subplots()
  ax.bar([str(r["n"]) for r in rows], [r["mean"] for r in rows])
  save_figure(fig, out_path)
  return out_path
'''


def _insert(root, path, before, text):
  path = os.path.join(root, path)
  with open(path) as f:
    source = f.read()
  assert source.count(before) == 1, f"the recipe's anchor {before!r} moved in {path}"
  with open(path, "w") as f:
    f.write(source.replace(before, text + before))


@pytest.fixture(scope="module", name="copy")
def fixture_copy(tmp_path_factory):
  """The project with the recipes applied: performer/ and tests/ copied, the rest linked."""
  root = str(tmp_path_factory.mktemp("recipes") / "project")
  os.makedirs(root)
  for name in os.listdir(ROOT):
    if name in ("performer", "tests"):
      shutil.copytree(os.path.join(ROOT, name), os.path.join(root, name),
                      ignore=shutil.ignore_patterns("__pycache__"))
    elif not name.startswith("."):
      os.symlink(os.path.join(ROOT, name), os.path.join(root, name))
  for edit in KERNEL + PROBE:
    _insert(root, *edit)
  for folder, text in (("experiments", EXPERIMENT), ("figures", FIGURE)):
    with open(os.path.join(root, "performer", folder, "foo.py"), "w") as f:
      f.write(text)
  return root


def _run(copy, *argv, check=True):
  env = {**os.environ, "PYTHONPATH": copy, "JAX_PLATFORMS": "cpu"}
  done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=copy, env=env,
                        check=False)
  assert not check or done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  return done


def _performer(copy, *argv):
  return _run(copy, "-m", "performer.cli", *argv)


def test_the_copy_is_the_one_imported(copy):
  done = _run(copy, "-c", "import performer; print(performer.__file__)")
  assert done.stdout.strip() == os.path.join(copy, "performer", "__init__.py")


def test_a_kernel_added_by_the_recipe_passes_the_kernel_tests_and_is_known_everywhere(copy):
  # The tests the recipe names: the feature count, the label and colour, the values by formula.
  done = _run(copy, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-k",
              "softplus or families or formulas", "tests/favor/test_kernels.py",
              "tests/favor/test_generalized_kernels.py::test_feature_maps_match_their_formulas")
  families = "test_the_families_partition_the_kernels_and_labels_and_colours_are_one_per_kernel"
  assert f"{families} PASSED" in done.stdout
  assert "test_the_declared_feature_count_is_the_width_of_the_map[softplus] PASSED" in done.stdout
  assert "test_feature_maps_match_their_formulas PASSED" in done.stdout
  script = """
import json, jax, numpy as np
from flax import nnx
from performer import attention, favor
kernel = favor.kernel("softplus")
module = attention.make("performer_relu", num_heads=1, head_dim=4, max_len=16, rngs=nnx.Rngs(0),
                        kernel="softplus", num_features=6, chunk_size=4)
q, k, v = (jax.random.normal(jax.random.key(i), (1, 16, 1, 4)) for i in range(3))
outs = [np.asarray(module(q, k, v, causal=c)) for c in (False, True)]
print(json.dumps({"family": kernel.family, "label": kernel.label, "colour": kernel.colour,
                  "generalized": "softplus" in favor.GENERALIZED_KERNELS,
                  "state": attention.info("performer_relu").state_size(
                      {"kernel": "softplus", "num_features": 6}, 16, 4, 4),
                  "finite": all(bool(np.isfinite(o).all()) for o in outs),
                  "causal_differs": bool(np.abs(outs[0] - outs[1]).max() > 1e-3)}))
"""
  facts = json.loads(_run(copy, "-c", script).stdout.strip().splitlines()[-1])
  assert facts == {"family": "generalized", "label": "softplus", "colour": "olive",
                   "generalized": True, "state": 6 * 4, "finite": True, "causal_differs": True}


def test_an_experiment_added_by_the_recipe_is_a_command_a_figure_and_a_job(copy, tmp_path):
  assert "foo" in _performer(copy, "--help").stdout
  out = tmp_path / "foo.json"
  done = _performer(copy, "foo", "--n", "1000", "--out", str(out))
  mean = np.random.default_rng(0).standard_normal(1000).mean()
  assert f"mean of 1000 draws: {mean:.4f}" in done.stdout
  assert f"draw it with: performer figure foo --input {out}" in done.stdout
  assert json.loads(out.read_text())["rows"] == [{"n": 1000, "mean": pytest.approx(mean)}]
  png = tmp_path / "foo.png"
  assert _performer(copy, "figure", "foo", "--input", str(out), "--out", str(png)).returncode == 0
  assert png.read_bytes().startswith(b"\x89PNG")
  plan = _performer(copy, "reproduce", "--budget", "tiny", "--only", "fig99_foo", "--launcher",
                    "print", "--runs", str(tmp_path / "runs"), "--results", str(tmp_path / "res"))
  assert [line.rsplit("--job ", 1)[1] for line in plan.stdout.splitlines() if "--job " in line] \
      == ["foo", "fig99_foo"]


@pytest.mark.slow  # ~40 s: two trainings in a fresh process each
@pytest.mark.parametrize("u_or_b", ["u", "b"])
def test_a_model_with_the_added_kernel_trains(copy, data, tmp_path, u_or_b):
  _performer(copy, "train", "--gin", f"gin/mini/trembl_{u_or_b}_performer_relu.gin", "--gin",
             "tests/tiny.gin", "--workdir", str(tmp_path), "--gin_param",
             f"DataConfig.path = '{data}'", "--gin_param",
             "ModelConfig.attention_options = {'kernel': 'softplus', 'num_features': 8}")
  with open(tmp_path / "config.json") as f:
    assert json.load(f)["model"]["attention_options"]["kernel"] == "softplus"
  rows = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
  assert rows and all(np.isfinite(r["loss"]) for r in rows if "loss" in r)
