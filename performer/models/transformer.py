"""A pre-LayerNorm Transformer language model whose attention is chosen by name.

Transformer, Performer, Linformer and Reformer models differ only by `config.attention`."""

import jax
import jax.numpy as jnp
from flax import nnx

from performer import attention
from performer.models.reversible import reversible_stack
from performer.models.short_conv import ShortConv


class Block(nnx.Module):
  """x + conv(LN(x)) with a short convolution; x + attention(LN(x)); then x + MLP(LN(x))."""

  def __init__(self, cfg, layer, *, rngs):
    self.cfg = cfg
    dtype = jnp.dtype(cfg.dtype)  # of the computation; parameters stay float32
    if cfg.conv_kernel:
      self.ln_conv = nnx.LayerNorm(cfg.d_model, dtype=dtype, rngs=rngs)
      self.conv = ShortConv(cfg.d_model, cfg.conv_kernel, dtype=dtype, rngs=rngs)
    self.ln_attn = nnx.LayerNorm(cfg.d_model, dtype=dtype, rngs=rngs)
    width = cfg.num_heads * (2 * cfg.query_dim + cfg.head_dim)  # q and k of qk_dim, v of head_dim
    self.qkv = nnx.Linear(cfg.d_model, width, dtype=dtype, rngs=rngs)
    self.attn = attention.make(cfg.attention, num_heads=cfg.num_heads, head_dim=cfg.query_dim,
                               max_len=cfg.max_len, rngs=rngs, layer=layer,
                               **cfg.attention_options)
    self.proj = nnx.Linear(cfg.d_model, cfg.d_model, dtype=dtype, rngs=rngs)
    if cfg.d_ff:  # d_ff = 0: attention-only blocks (Zoology's recall models have no MLP)
      self.ln_mlp = nnx.LayerNorm(cfg.d_model, dtype=dtype, rngs=rngs)
      self.mlp_in = nnx.Linear(cfg.d_model, cfg.d_ff, dtype=dtype, rngs=rngs)
      self.mlp_out = nnx.Linear(cfg.d_ff, cfg.d_model, dtype=dtype, rngs=rngs)
    self.dropout = nnx.Dropout(cfg.dropout, rngs=rngs)

  def __call__(self, x, mask):  # x: [B, L, d_model], mask: [B, L] bool
    x = self.attention_input(x)
    x = x + self.attention_part(x, mask)
    return x + self.mlp_part(x)

  def attention_input(self, x):
    """x + Dropout(conv(LN(x))) with a short convolution (ModelConfig.conv_kernel), else x."""
    if not self.cfg.conv_kernel:
      return x
    return x + self.dropout(self.conv(self.ln_conv(x)))

  def attention_part(self, x, mask, key=None):
    """Dropout(proj(attention(LN(x)))): F of a reversible layer. key: explicit dropout key."""
    att = self.attn(*self.heads(x), mask=mask, causal=self.cfg.causal)
    return self._dropout(self.proj(att.reshape(*x.shape[:2], -1)), key)

  def heads(self, x):
    """The attention's inputs: x [B, L, d_model] (after attention_input) -> q, k [B, L, H,
    query_dim] and v [B, L, H, head_dim]."""
    return self._split(self.qkv(self.ln_attn(x)))

  def _split(self, qkv):
    """[..., H (2 query_dim + head_dim)] -> q, k, v, each [..., H, its dimension]."""
    cfg = self.cfg
    qk = cfg.num_heads * cfg.query_dim
    q, k, v = jnp.split(qkv, (qk, 2 * qk), axis=-1)
    return tuple(t.reshape(*t.shape[:-1], cfg.num_heads, -1) for t in (q, k, v))

  def mlp_part(self, x, key=None):
    """Dropout(MLP(LN(x))): G of a reversible layer; 0 without an MLP (d_ff = 0)."""
    if not self.cfg.d_ff:
      return jnp.zeros_like(x)
    return self._dropout(self.mlp_out(jax.nn.gelu(self.mlp_in(self.ln_mlp(x)))), key)

  def _dropout(self, x, key):
    return self.dropout(x) if key is None else self.dropout(x, rngs=nnx.Rngs(dropout=key))

  def decode_init(self, batch):
    """This block's cache: (short convolution's last inputs or None, the attention's cache)."""
    conv = (self.conv.decode_init(batch, self.cfg.d_model, jnp.dtype(self.cfg.dtype))
            if self.cfg.conv_kernel else None)
    return conv, self.attn.decode_init(batch, self.cfg.num_heads, self.cfg.head_dim)

  def decode_step(self, x, cache):
    """One token: x [B, d_model] -> (x, cache); dropout off (call model.eval() first)."""
    conv_cache, attn_cache = cache
    if self.cfg.conv_kernel:
      conv_cache, y = self.conv.decode_step(conv_cache, self.ln_conv(x))
      x = x + y
    attn_cache, att = self.attn.decode_step(attn_cache, *self._split(self.qkv(self.ln_attn(x))))
    x = x + self.proj(att.reshape(x.shape[0], -1))
    return x + self.mlp_part(x), (conv_cache, attn_cache)


class TransformerLM(nnx.Module):
  """tokens [B, L] int -> logits [B, L, vocab] float32 (whatever cfg.dtype computes in).

  Given positions [B, K], logits [B, K, vocab] of those positions only. A classifier
  (cfg.pooling) gives [B, 1, num_classes]: one pooled prediction per sequence.
  """

  def __init__(self, cfg, *, rngs):
    self.cfg = cfg
    dtype = jnp.dtype(cfg.dtype)
    self.embed = nnx.Embed(cfg.vocab_size, cfg.d_model, dtype=dtype, rngs=rngs)
    self.pos = (nnx.Embed(cfg.max_len, cfg.d_model, dtype=dtype, rngs=rngs)
                if cfg.position_embeddings else None)
    self.blocks = nnx.List([Block(cfg, i, rngs=rngs) for i in range(cfg.num_layers)])
    self.ln = nnx.LayerNorm(cfg.d_model, dtype=dtype, rngs=rngs)
    outputs = cfg.num_classes if cfg.pooling else cfg.vocab_size
    self.head = (None if cfg.tie_embeddings else
                 nnx.Linear(cfg.d_model, outputs, dtype=dtype, rngs=rngs))
    self.dropout = nnx.Dropout(cfg.dropout, rngs=rngs)
    self.rngs = rngs  # dropout keys of the reversible stack

  def __call__(self, tokens, mask=None, positions=None):
    """Args: tokens [B, L] ids; mask [B, L] bool (True = real token) or None;
    positions [B, K] int or None: the logits of these positions only, [B, K,
    vocab] (the hidden states are gathered before the output layer, which
    at a large vocabulary would otherwise cost more than the blocks; MQAR
    scores K of L positions).

    Raises:
      ValueError: L exceeds config.max_len.
    """
    if self.cfg.reversible:
      x = reversible_stack(self.blocks, self._embed(tokens), mask, self.rngs.dropout())
    else:
      x = self.hidden_states(tokens, mask)[-1]
    if self.cfg.pooling:
      x = self.pooled(x, mask)[:, None]  # [B, 1, d_model]
    elif positions is not None:
      x = jnp.take_along_axis(x, positions[..., None], axis=1)  # [B, K, d_model]
    return self.logits(x)

  def pooled(self, x, mask):
    """[B, L, d_model] final states -> [B, d_model]: the first token's (cls), or the mean over
    the real tokens of `mask` (mean; every token without a mask)."""
    if self.cfg.pooling == "cls":
      return x[:, 0]
    if mask is None:
      return x.mean(axis=1)
    weights = mask.astype(x.dtype)[..., None]
    return (x * weights).sum(axis=1) / jnp.maximum(weights.sum(axis=1), 1)

  def logits(self, x):
    """[..., d_model] hidden states -> [..., vocab] float32: the final LayerNorm and head (the
    embedding's transpose when tied)."""
    x = self.ln(x)
    return (self.embed.attend(x) if self.head is None else self.head(x)).astype(jnp.float32)

  def _embed(self, tokens):
    length = tokens.shape[1]
    if length > self.cfg.max_len:
      raise ValueError(f"sequence length {length} exceeds max_len {self.cfg.max_len}")
    x = self.embed(tokens)
    if self.pos is not None:
      x = x + self.pos(jnp.arange(length))[None]
    return self.dropout(x)

  def hidden_states(self, tokens, mask=None):
    """The residual stream before the first block and after each: num_layers + 1 arrays.

    Each is [B, L, d_model]; the last, through `ln` and `head`, gives the
    logits (probes of a trained model call model.eval() first). Not for
    reversible models, whose stream is two halves.

    Raises:
      ValueError: L exceeds config.max_len.
    """
    states = [self._embed(tokens)]
    for block in self.blocks:
      states.append(block(states[-1], mask))
    return states

  def decode_init(self, batch):
    """Per-layer caches for incremental decoding of a causal model.

    Raises:
      ValueError: a bidirectional model, or an attention without a decoder
        (attention.info(name).decoding).
    """
    if not self.cfg.causal:
      raise ValueError("incremental decoding needs a causal (U) model")
    if not attention.info(self.cfg.attention).decoding:
      decoders = [n for n in attention.names() if attention.info(n).decoding]
      raise ValueError(f"attention {self.cfg.attention!r} has no incremental decoder; "
                       f"{', '.join(decoders)} do")
    return [b.decode_init(batch) for b in self.blocks]

  def decode_step(self, tokens, position, caches):
    """tokens [B] at `position` -> (logits [B, vocab] float32, caches): O(1) in the length.

    Raises:
      ValueError: a concrete `position` outside [0, max_len), as the full
        forward pass raises for L > max_len. Under jit (a traced position)
        no check is possible: such a position gives NaN logits (the position
        embedding's out-of-range fill), so check it before jitting a loop.
    """
    if not isinstance(position, jax.core.Tracer) and not 0 <= int(position) < self.cfg.max_len:
      raise ValueError(f"position {int(position)} is outside the model's positions 0 .. "
                       f"{self.cfg.max_len - 1} (max_len {self.cfg.max_len})")
    x = self.embed(tokens)
    if self.pos is not None:
      x = x + self.pos(jnp.asarray(position, jnp.int32))[None]
    new = []
    for block, cache in zip(self.blocks, caches):
      x, cache = block.decode_step(x, cache)
      new.append(cache)
    return self.logits(x), new
