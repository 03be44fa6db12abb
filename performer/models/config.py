"""The typed model configuration, checked once when built."""

import dataclasses

from performer import attention


DTYPES = ("float32", "bfloat16")
POOLINGS = ("", "cls", "mean")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """A Transformer language model; defaults are the paper's regular size (Fig. 3).

  causal=True is the unidirectional (U) next-token model, False the
  bidirectional (B) masked LM. `attention` names a registered backend and
  `attention_options` its settings (e.g. {"num_features": 256}).
  dtype 'bfloat16' is mixed precision: bfloat16 activations and matmuls,
  float32 parameters, optimizer state, logits, softmax and FAVOR's
  features and sums (the attention functions compute in float32).
  """
  vocab_size: int
  max_len: int
  num_layers: int = 6
  num_heads: int = 8
  d_model: int = 512
  d_ff: int = 2048  # 0: attention-only blocks, no MLP
  dropout: float = 0.1
  attention: str = "exact"
  attention_options: dict = dataclasses.field(default_factory=dict)
  causal: bool = True
  reversible: bool = False  # reversible residual layers (Reformer), models/reversible.py
  dtype: str = "float32"  # of activations and matmuls; parameters stay float32 (see DTYPES)
  # Zoology's recall models (Arora et al. 2023): a gated causal short convolution of this kernel
  # before each block's attention (0: none), queries and keys of qk_dim per head (0: head_dim),
  # no position embeddings, the output layer tied to the embedding.
  conv_kernel: int = 0
  qk_dim: int = 0
  position_embeddings: bool = True
  tie_embeddings: bool = False
  # Sequence classification (LRA's ListOps): a (B) encoder whose final states are pooled, at
  # the first token ("cls") or averaged over the real tokens ("mean"), into a linear head of
  # num_classes logits; "" is the language model.
  pooling: str = ""
  num_classes: int = 0

  def __post_init__(self):
    for name in ("vocab_size", "max_len", "num_layers", "num_heads", "d_model"):
      if getattr(self, name) < 1:
        raise ValueError(f"ModelConfig.{name} must be >= 1, got {getattr(self, name)}")
    for name in ("conv_kernel", "qk_dim"):
      if getattr(self, name) < 0:
        raise ValueError(f"ModelConfig.{name} must be >= 0 (0: none), got {getattr(self, name)}")
    if self.conv_kernel and self.reversible:
      raise ValueError("ModelConfig.conv_kernel: reversible layers have no short convolution")
    if self.d_ff < 0:
      raise ValueError(f"ModelConfig.d_ff must be >= 0 (0: no MLP), got {self.d_ff}")
    if self.d_model % self.num_heads:
      raise ValueError(f"d_model {self.d_model} is not divisible by num_heads {self.num_heads}")
    if not 0 <= self.dropout < 1:
      raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
    if self.attention not in attention.names():
      raise ValueError(f"unknown attention {self.attention!r}; choose from "
                       f"{', '.join(attention.names())}")
    if self.dtype not in DTYPES:
      raise ValueError(f"ModelConfig.dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
    if self.pooling not in POOLINGS:
      raise ValueError(f"ModelConfig.pooling must be one of {POOLINGS}, got {self.pooling!r}")
    if self.pooling and (self.causal or self.num_classes < 2 or self.tie_embeddings):
      raise ValueError("ModelConfig.pooling classifies with a (B) encoder: it needs causal = "
                       "False, num_classes >= 2 and no tied embeddings")
    if self.causal and not attention.info(self.attention).causal:
      raise ValueError(f"{self.attention} attention is bidirectional only: use causal=False")

  @property
  def head_dim(self):
    """Per-head dimension of the values (and of queries and keys unless qk_dim is set)."""
    return self.d_model // self.num_heads

  @property
  def query_dim(self):
    """Per-head dimension of queries and keys: qk_dim, or head_dim."""
    return self.qk_dim or self.head_dim
