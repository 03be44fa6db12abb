"""metrics.top1 against jnp.argmax, ties and NaN included."""

import jax.numpy as jnp
import numpy as np

from performer.train import metrics


def test_top1_is_argmax_with_ties_and_nan():
  rng = np.random.default_rng(0)
  logits = rng.integers(0, 3, size=(64, 5, 7)).astype(np.float32)  # many ties
  logits[rng.random(logits.shape) < 0.05] = np.nan  # some rows with NaN, some with several
  logits[0, 0] = 1.0  # a row of one value: only target 0 is right
  targets = rng.integers(0, 7, size=(64, 5))
  targets[0, 0] = 3
  want = np.argmax(logits, -1) == targets
  got = np.asarray(metrics.top1(jnp.asarray(logits), jnp.asarray(targets)))
  np.testing.assert_array_equal(got, want)
  assert not got[0, 0] and 0.1 < want.mean() < 0.9  # the draw exercises both answers
  targets[0, 0] = 0
  assert metrics.top1(jnp.asarray(logits[:1, :1]), jnp.asarray(targets[:1, :1]))[0, 0]


def test_top1_every_target_of_random_logits():
  logits = np.random.default_rng(1).normal(size=(3, 50)).astype(np.float32)
  for t in range(50):
    targets = np.full(3, t)
    np.testing.assert_array_equal(metrics.top1(jnp.asarray(logits), jnp.asarray(targets)),
                                  np.argmax(logits, -1) == t)
