"""Fixtures shared across test folders."""

import math

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


def _largest(jaxpr):
  """Element count of the largest array a jaxpr builds, its inner jaxprs (scan, cond,
  checkpoint, custom gradients) included."""
  sizes = [0]
  for eqn in jaxpr.eqns:
    sizes += [math.prod(o.aval.shape) for o in eqn.outvars if hasattr(o.aval, "shape")]
    for param in eqn.params.values():
      for inner in param if isinstance(param, (tuple, list)) else (param,):
        inner = getattr(inner, "jaxpr", inner)
        if hasattr(inner, "eqns"):
          sizes.append(_largest(inner))
  return max(sizes)


@pytest.fixture(name="largest_intermediate")
def fixture_largest_intermediate():
  """(f, *args) -> the element count of the largest array f builds on args: a memory bound
  read off the program itself, not off a machine."""
  import jax  # pylint: disable=import-outside-toplevel
  return lambda f, *args: _largest(jax.make_jaxpr(f)(*args).jaxpr)
