"""TransformerLM with every attention backend: causality, padding, and learning on real data."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from performer import attention
from performer.data import samples, trembl, vocab
from performer.data.masking import mlm_mask
from performer.data.shards import TokenShards
from performer.models.config import ModelConfig
from performer.models.transformer import TransformerLM

L = 48
OPTIONS = {"performer_softmax": {"num_features": 16, "chunk_size": 16},
           "performer_relu": {"num_features": 16, "chunk_size": 16},
           "linformer": {"num_projections": 16}, "reformer": {"chunk_size": 8, "n_buckets": 4}}
CAUSAL = [n for n in attention.names() if attention.info(n).causal]


def _model(name, causal, dropout=0.0):
  cfg = ModelConfig(vocab_size=vocab.VOCAB_SIZE, max_len=64, num_layers=2, num_heads=2,
                    d_model=32, d_ff=64, dropout=dropout, attention=name,
                    attention_options=OPTIONS.get(name, {}), causal=causal)
  return TransformerLM(cfg, rngs=nnx.Rngs(0))


def _fixed(model, protein_batches):
  """The model after one training call on other sequences, in evaluation: the state a layer
  learns from batches (FAVOR++'s running moments) is set and then held, as in eval and decoding."""
  model(protein_batches[2:4])
  model.eval()
  return model


@pytest.fixture(scope="module")
def protein_batches(tmp_path_factory):
  """Real sequences of the sample proteome, clipped to L and padded: [n, L] int32."""
  out = tmp_path_factory.mktemp("prot") / "d"
  trembl.prepare(trembl.TremblConfig(inputs=(samples.fetch("protein"),), valid_fraction=0.05,
                                     test_fraction=0.05), str(out), workers=1, progress=False)
  source = TokenShards(str(out / "single" / "train"))
  rows = np.full((64, L), vocab.PAD, np.int32)
  for i in range(64):
    seq = np.concatenate([source[i], [vocab.EOS]])[:L]
    rows[i, :len(seq)] = seq
  return jnp.asarray(rows)


@pytest.mark.parametrize("kwargs, match", [
    (dict(d_model=30, num_heads=4), "not divisible"),
    (dict(attention="softmax"), "unknown attention"),
    (dict(attention="linformer", causal=True), "bidirectional only"),
    (dict(dropout=1.0), "dropout"),
])
def test_config_errors(kwargs, match):
  with pytest.raises(ValueError, match=match):
    ModelConfig(**{"vocab_size": 28, "max_len": 16, "d_model": 32, "num_heads": 2, **kwargs})


@pytest.mark.parametrize("name", CAUSAL)
def test_unidirectional_model_is_causal(name, protein_batches):
  model = _fixed(_model(name, causal=True), protein_batches)
  tokens = protein_batches[:2]
  base = model(tokens)
  for i in (0, 17, 40):
    changed = tokens.at[:, i + 1:].set((tokens[:, i + 1:] + 5) % vocab.VOCAB_SIZE)
    np.testing.assert_allclose(model(changed)[:, :i + 1], base[:, :i + 1], rtol=1e-5, atol=1e-5)
    assert not np.allclose(model(changed)[:, i + 1:], base[:, i + 1:])


def test_d_ff_zero_makes_attention_only_blocks_that_decode_like_the_full_pass(protein_batches):
  cfg = ModelConfig(vocab_size=vocab.VOCAB_SIZE, max_len=64, num_layers=2, num_heads=2,
                    d_model=32, d_ff=0, dropout=0.0, attention="performer_relu",
                    attention_options={"num_features": 16})
  model = TransformerLM(cfg, rngs=nnx.Rngs(0))
  names = {"/".join(map(str, path)) for path, _ in nnx.to_flat_state(nnx.state(model, nnx.Param))}
  assert names and not any("mlp" in n for n in names)
  params = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
  per_block = 2 * 32 + 32 * 96 + 96 + 32 * 32 + 32  # LayerNorm, qkv, proj
  assert params == vocab.VOCAB_SIZE * 32 * 2 + 64 * 32 + 2 * per_block + 2 * 32 + vocab.VOCAB_SIZE
  tokens = protein_batches[:2, :6]
  full = model(tokens)
  model.eval()
  caches = model.decode_init(2)
  for t in range(6):
    logits, caches = model.decode_step(tokens[:, t], t, caches)
    np.testing.assert_allclose(logits, full[:, t], rtol=2e-4, atol=2e-4)
  with pytest.raises(ValueError, match="d_ff must be >= 0"):
    ModelConfig(vocab_size=28, max_len=16, d_model=32, num_heads=2, d_ff=-1)


@pytest.mark.parametrize("reversible", [False, True])
def test_logits_at_positions_are_the_full_logits_there(reversible, protein_batches):
  cfg = ModelConfig(vocab_size=vocab.VOCAB_SIZE, max_len=64, num_layers=2, num_heads=2,
                    d_model=32, d_ff=64, dropout=0.0, reversible=reversible)
  model = TransformerLM(cfg, rngs=nnx.Rngs(0))
  tokens = protein_batches[:3]
  positions = jnp.array([[0, 5, 47], [3, 3, 9], [46, 1, 20]])
  full = model(tokens)
  got = model(tokens, positions=positions)
  assert got.shape == (3, 3, vocab.VOCAB_SIZE)
  np.testing.assert_allclose(got, full[jnp.arange(3)[:, None], positions], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", attention.names())
@pytest.mark.parametrize("causal", [True, False])
def test_padding_does_not_change_real_positions(name, causal, protein_batches):
  if causal and name not in CAUSAL:
    pytest.skip(f"{name} is bidirectional only")
  model = _fixed(_model(name, causal), protein_batches)
  real = 30
  tokens = protein_batches[:2, :real]
  alone = model(tokens)
  padded = jnp.concatenate([tokens, jnp.full((2, L - real), 7, jnp.int32)], axis=1)
  mask = jnp.broadcast_to(jnp.arange(L) < real, (2, L))
  np.testing.assert_allclose(model(padded, mask)[:, :real], alone, rtol=2e-4, atol=2e-4)


def _loss(model, inputs, targets, weights, mask):
  logits = model(inputs, mask)
  nll = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  return jnp.sum(nll * weights) / jnp.sum(weights)


@pytest.mark.parametrize("name", attention.names())
@pytest.mark.parametrize("causal", [True, False])
def test_a_few_steps_lower_the_loss_on_real_proteins(name, causal, protein_batches):
  if causal and name not in CAUSAL:
    pytest.skip(f"{name} is bidirectional only")
  model = _model(name, causal)
  optimizer = nnx.Optimizer(model, optax.adam(3e-3), wrt=nnx.Param)
  tokens = protein_batches
  mask = tokens != vocab.PAD
  if causal:  # next-token prediction over all real positions
    inputs, targets, weights, in_mask = tokens[:, :-1], tokens[:, 1:], mask[:, 1:], mask[:, :-1]
  else:  # masked LM: loss on the selected positions only
    inputs, weights = mlm_mask(tokens, jnp.arange(len(tokens)), jax.random.key(0),
                               mask_id=vocab.MASK, pad_id=vocab.PAD, random_low=3,
                               random_high=vocab.VOCAB_SIZE)
    targets, in_mask = tokens, mask

  @nnx.jit
  def step(model, optimizer):
    loss, grads = nnx.value_and_grad(_loss)(model, inputs, targets, weights, in_mask)
    optimizer.update(model, grads)
    return loss

  losses = [float(step(model, optimizer)) for _ in range(8)]
  assert np.isfinite(losses).all()
  assert losses[-1] < losses[0] - 0.2, losses  # from ~log(28) = 3.3 towards amino-acid frequencies
