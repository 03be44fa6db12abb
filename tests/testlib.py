"""What tests in several folders share: the repository's root and the tiny model's gin overlay."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "tests", "tiny.gin")  # DataConfig and ModelConfig of a tiny model


def gin(config):
  """The gin files of experiment config `config` (a path under ROOT) with the tiny model over it."""
  return [os.path.join(ROOT, config), TINY]


def qkv(shape, seed=0, scale=1.0, dtype="float32", scale_values=True):
  """q, k, v: independent standard normal arrays of `shape` from key `seed`, times `scale` (v
  too unless scale_values=False), cast to `dtype`."""
  import jax  # pylint: disable=import-outside-toplevel  # jax only for the tests that use it
  q, k, v = (jax.random.normal(key, shape) for key in jax.random.split(jax.random.key(seed), 3))
  return ((scale * q).astype(dtype), (scale * k).astype(dtype),
          ((scale if scale_values else 1.0) * v).astype(dtype))


def drawn(monkeypatch, tmp_path, name, source, **options):
  """The matplotlib figure `performer figure NAME` draws from `source`, drawn (legends placed),
  instead of saved."""
  import importlib  # pylint: disable=import-outside-toplevel
  from performer import figures  # pylint: disable=import-outside-toplevel
  module = importlib.import_module(figures.FIGURES[name])
  found = []
  monkeypatch.setattr(module, "save_figure", lambda fig, out: found.append(fig))
  monkeypatch.setattr(module.plt, "close", lambda fig: None)
  figures.render(name, source, str(tmp_path / "f.png"), **options)
  (fig,) = found
  fig.canvas.draw()
  return fig
