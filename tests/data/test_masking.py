"""MLM corruption: rates, pads, and independence from the batch an example lands in."""

import jax
import jax.numpy as jnp
import numpy as np

from performer.data import vocab
from performer.data.masking import MLM, mlm_mask

KW = dict(mask_id=vocab.MASK, pad_id=vocab.PAD, random_low=len(vocab.SPECIALS),
          random_high=vocab.VOCAB_SIZE)


def test_rates_and_pads():
  n, length, real = 400, 101, 80
  tokens = jax.random.randint(jax.random.key(0), (n, length), 3, vocab.VOCAB_SIZE)
  tokens = tokens.at[:, real:].set(vocab.PAD)
  inputs, weights = mlm_mask(tokens, jnp.arange(n), jax.random.key(1), **KW)
  inputs, weights, tokens = np.asarray(inputs), np.asarray(weights), np.asarray(tokens)
  assert weights[:, real:].sum() == 0 and (inputs[:, real:] == vocab.PAD).all()
  selected = weights.astype(bool)
  assert abs(selected[:, :real].mean() - 0.15) < 0.01
  masked = (inputs == vocab.MASK)[selected].mean()
  same = (inputs == tokens)[selected].mean()  # includes random picks equal to the original (~1/25)
  assert abs(masked - 0.8) < 0.02 and abs(same - (0.1 + 0.1 / 25)) < 0.02
  assert (inputs[~selected] == tokens[~selected]).all()
  replaced = selected & (inputs != vocab.MASK)
  assert (inputs[replaced] >= 3).all()  # random replacements are never special tokens


def test_same_example_same_mask_in_any_batch():
  tokens = jax.random.randint(jax.random.key(2), (6, 50), 3, vocab.VOCAB_SIZE)
  ids = jnp.array([10, 11, 12, 13, 14, 15])
  key = jax.random.key(3)
  full = mlm_mask(tokens, ids, key, **KW)
  other = mlm_mask(tokens[jnp.array([4, 1])], ids[jnp.array([4, 1])], key, **KW)
  for got, want in zip(other, full):
    np.testing.assert_array_equal(got, np.asarray(want)[[4, 1]])
  assert not np.array_equal(full[0][0], full[0][1])  # different examples, different masks


def test_other_proportions_give_their_frequencies():
  n, length = 400, 101
  tokens = jax.random.randint(jax.random.key(4), (n, length), 3, vocab.VOCAB_SIZE)
  inputs, weights = mlm_mask(tokens, jnp.arange(n), jax.random.key(5), **KW,
                             proportions=MLM(rate=0.4, mask=0.5, random=0.3))
  inputs, tokens, selected = np.asarray(inputs), np.asarray(tokens), np.asarray(weights) > 0
  assert abs(selected.mean() - 0.4) < 0.01
  masked = (inputs == vocab.MASK)[selected].mean()
  same = (inputs == tokens)[selected].mean()  # 20% unchanged, plus random picks of the original
  assert abs(masked - 0.5) < 0.02 and abs(same - (0.2 + 0.3 / 25)) < 0.02
  assert abs(1 - masked - same - 0.3 * 24 / 25) < 0.02  # the random share
