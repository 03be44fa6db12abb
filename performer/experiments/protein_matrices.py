"""A trained protein model's attention matrices, exact and FAVOR: what attention-maps and
aa-similarity (paper App. C.4) both read."""

import numpy as np

from performer import favor
from performer.attention.performer import PerformerAttention
from performer.data import vocab
from performer.errors import UserError
from performer.train import trained


def model_input(residues, seq_len, causal):
  """Residue ids [n] -> the model input as training built it (pipeline._example), unpadded.

  (B): the residues clipped to seq_len; (U): [EOS] + residues, clipped to
  seq_len in all. Returns int32 [<= seq_len].
  """
  seq = np.asarray(residues, np.int32)
  if causal:
    seq = np.concatenate([[vocab.EOS], seq])
  return seq[:seq_len]


def is_performer(block):
  """Whether a block's attention is FAVOR (a Performer layer with its own W)."""
  return isinstance(block.attn, PerformerAttention)


def kernel_of(model):
  """The feature kernel of a Performer model's attention, None for other models."""
  return model.blocks[0].attn.kernel if is_performer(model.blocks[0]) else None


def layer_matrices(model, tokens, mask, layers):
  """Attention matrices of `layers` for a batch, with what checks them (a dict of lists).

  Args:
    model: a non-reversible `TransformerLM` in eval mode.
    tokens: [B, L] int ids; mask: [B, L] bool (True = real token).
    layers: layer indices.

  Returns:
    dict of lists, one [B, H, L, L] float32 per layer: 'exact' (softmax of
    the layer's q, k), 'favor' (its implicit FAVOR matrix; None unless the
    model is a Performer), and 'out' (the backend's own output [B, L, H, d])
    with 'v' [B, L, H, d], for the A @ v check.
  """
  causal = model.cfg.causal
  states = model.hidden_states(tokens, mask)
  result = {"exact": [], "favor": None, "v": [], "out": []}
  performer = all(is_performer(model.blocks[l]) for l in layers)
  if performer:
    result["favor"] = []
  for l in layers:
    block = model.blocks[l]
    q, k, v = block.heads(block.attention_input(states[l]))
    result["exact"].append(favor.softmax_matrix(q, k, mask=mask, causal=causal))
    if performer:
      att = block.attn
      result["favor"].append(favor.attention_matrix(q, k, att.W[...], kernel=att.kernel,
                                          kernel_epsilon=att.kernel_epsilon, mask=mask,
                                          causal=causal))
    result["v"].append(v)
    result["out"].append(block.attn(q, k, v, mask=mask, causal=causal))
  return result


def describe(attention, kernel=None):
  """What the 'favor' and 'exact' maps of a run are, in a sentence.

  attention: the run's ModelConfig.attention; kernel: its Performer layers'
  feature kernel (`kernel_of`), None for other models.
  """
  if kernel is not None:
    if kernel in favor.SOFTMAX_KERNELS:
      return (f"favor: the implicit attention matrix of {attention} ({kernel} features), the "
              "model's own attention; exact: softmax(q k^T / sqrt(d)) of the same q, k, the "
              "matrix FAVOR estimates")
    return (f"favor: the implicit attention matrix of {attention} ({kernel} kernel), the "
            "model's own attention; exact: softmax(q k^T / sqrt(d)) of the same q, k, which "
            "this kernel does not estimate: a comparison only")
  if attention == "exact":
    return ("exact: the model's own softmax attention; a Transformer has no FAVOR matrix, so "
            "only exact maps exist")
  return (f"exact: softmax(q k^T / sqrt(d)) of the run's q, k, not the {attention} attention "
          "the model uses; no FAVOR matrix for a non-Performer run")


def load_model(run):
  """trained.load(run) for these experiments: (Config, model, step).

  Raises:
    UserError: not a trained workdir, not a protein model, or a reversible
      (Reformer) model, whose residual stream `hidden_states` cannot give.
  """
  cfg, model, step = trained.load(run)
  if cfg.model.vocab_size != vocab.VOCAB_SIZE:
    raise UserError(f"{run}: not a protein model (vocabulary of {cfg.model.vocab_size} "
                    f"tokens, not the {vocab.VOCAB_SIZE} of performer/data/vocab.py)")
  if cfg.model.reversible:
    raise UserError(f"{run}: a reversible ({cfg.model.attention}) model; attention maps "
                    "need the plain residual stream of non-reversible models")
  return cfg, model, step
