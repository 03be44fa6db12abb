"""FAVOR+: the mathematics of Performer attention as pure JAX functions.

No Flax, no state. Public entry points: `projection`, `feature_map`,
`softmax_attention`, `favor_attention`, `causal_linear_attention_scan`,
`causal_decode_init` / `causal_decode_step` (incremental decoding), and the
closed-form estimator errors of Lemma 2 in `theory`.
"""

from performer.favor.attention import (BIDIRECTIONAL_BLOCK, DEFAULT_CHUNK_SIZE, EXPONENTIAL_KERNELS,
                                       MAX_NORM,
                                       causal_decode_init, causal_decode_step,
                                       causal_linear_attention_scan, favor_attention,
                                       softmax_attention)
from performer.favor.features import (DETERMINISTIC_ONLY, GENERALIZED_KERNELS, KERNELS,
                                      SOFTMAX_KERNELS, Features, feature_map, feature_parts)
from performer.favor.projections import KINDS, SCALINGS, projection

__all__ = [
    "BIDIRECTIONAL_BLOCK", "DEFAULT_CHUNK_SIZE", "DETERMINISTIC_ONLY", "EXPONENTIAL_KERNELS",
    "GENERALIZED_KERNELS", "KERNELS", "KINDS",
    "MAX_NORM", "SCALINGS", "SOFTMAX_KERNELS", "Features", "causal_decode_init",
    "causal_decode_step", "causal_linear_attention_scan", "favor_attention", "feature_map",
    "feature_parts", "projection", "softmax_attention",
]
