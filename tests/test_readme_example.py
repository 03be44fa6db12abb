"""The examples of README.md and docs/ run as written; their links stay inside the checkout."""

import os
import re

import numpy as np
import pytest

import testlib
from testlib import ROOT

README = os.path.join(ROOT, "README.md")
TRAINING = os.path.join(ROOT, "docs", "training.md")


def test_favor_example_runs_and_its_error_is_small():
  with open(README) as f:
    text = f.read()
  code = re.search(r"```python\n(import jax\nfrom performer import favor\n.*?)```", text, re.S)
  assert code, "README lost its performer.favor example"
  scope = {}
  exec(code.group(1), scope)  # pylint: disable=exec-used
  out, ref = np.asarray(scope["out"]), np.asarray(scope["ref"])
  assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 0.06  # the README says 4.7%


def test_using_a_trained_model_example_runs_on_a_trained_workdir(data, tmp_path, capsys):
  from performer import configurables  # pylint: disable=import-outside-toplevel
  from performer.train import loop  # pylint: disable=import-outside-toplevel
  configurables.parse(testlib.gin("gin/mini/trembl_u_performer_relu.gin"), [
      f"DataConfig.path = '{data}'", "TrainConfig.steps = 3", "TrainConfig.eval_batches = 1"])
  workdir = tmp_path / "run"
  loop.run(configurables.resolve(), str(workdir), progress=False)
  capsys.readouterr()  # what training said; the example's own lines follow
  with open(TRAINING) as f:
    text = f.read()
  code = re.search(r"```python\n(import jax.numpy as jnp\nimport performer\n.*?)```", text, re.S)
  assert code, "docs/training.md lost its performer.load example"
  source = code.group(1).replace("runs/quickstart/trembl_u_performer_relu", str(workdir))
  exec(source.replace("range(30)", "range(31)"), {})  # pylint: disable=exec-used
  step, residues = capsys.readouterr().out.strip().split(": ")
  assert step == "step 3" and len(residues) >= 31  # names of specials are longer than 1
  with pytest.raises(ValueError, match="outside the model's positions 0 .. 31"):
    exec(source.replace("range(30)", "range(33)"), {})  # pylint: disable=exec-used


@pytest.mark.parametrize("page", ["README.md", *(os.path.join("docs", n) for n in
                                                 sorted(os.listdir(os.path.join(ROOT, "docs"))))])
def test_links_stay_inside_the_repository(page):
  path = os.path.join(ROOT, page)
  with open(path) as f:
    text = re.sub(r"https?://\S+", "", f.read())
  targets = [t for t in re.findall(r"\]\(([^)#\s]+)\)", text)]
  assert targets or page != "README.md"
  for target in targets:
    where = os.path.normpath(os.path.join(os.path.dirname(path), target))
    assert where.startswith(ROOT + os.sep) and os.path.exists(where), (page, target)


def test_the_layer_example_is_causal_redraws_w_and_keeps_w_out_of_the_parameters():
  import jax  # pylint: disable=import-outside-toplevel
  from performer import favor  # pylint: disable=import-outside-toplevel
  with open(README) as f:
    text = f.read()
  code = re.search(r"```python\n(import jax\nimport jax.numpy as jnp\nfrom flax import nnx\n"
                   r"from performer import attention\n.*?)```", text, re.S)
  assert code, "README lost its attention layer example"
  scope = {}
  exec(code.group(1), scope)  # pylint: disable=exec-used
  layer, x, y = scope["layer"], scope["x"], scope["y"]
  assert y.shape == (2, 128, 64)
  drawn = layer.attn.W[...]
  np.testing.assert_array_equal(drawn, favor.projection(
      jax.random.fold_in(jax.random.fold_in(jax.random.key(0), 0), 1), 128, 16, "orthogonal",
      "chi"))  # step 1's W: a function of (seed, layer, step)
  later = x.at[:, 100:].set(0.0)
  np.testing.assert_allclose(layer(later)[:, :100], layer(x)[:, :100], atol=1e-6)  # causal
  params = jax.tree.leaves(scope["trained"])
  assert all(p.shape != drawn.shape for p in params) and len(params) == 4  # two kernels, biases
  assert not np.allclose(layer(x), y)  # the redrawn W changes the output
