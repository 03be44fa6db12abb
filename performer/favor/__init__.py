"""FAVOR+: the mathematics of Performer attention as pure JAX functions (no Flax, no state).

Re-exports the public entry points of the favor modules; see __all__."""

from performer.favor import exponential
from performer.favor.attention import FORMS, Form, favor_attention, form
from performer.favor.decoding import causal_decode_init, causal_decode_step
from performer.favor.features import Features, feature_map, feature_parts
from performer.favor.kernels import (DATA_DEPENDENT_KERNELS, DETERMINISTIC_ONLY,
                                     EXPONENTIAL_KERNELS, GENERALIZED_KERNELS, KERNELS,
                                     SOFTMAX_KERNELS, Kernel, kernel)
from performer.favor.numerics import MAX_NORM
from performer.favor.projections import KINDS, SCALINGS, projection
from performer.favor.reference import (attention_matrix, causal_linear_attention_scan,
                                       softmax_attention, softmax_matrix)

__all__ = [
    "DATA_DEPENDENT_KERNELS", "DETERMINISTIC_ONLY", "EXPONENTIAL_KERNELS", "FORMS",
    "GENERALIZED_KERNELS", "KERNELS", "KINDS", "Kernel", "MAX_NORM", "SCALINGS", "SOFTMAX_KERNELS",
    "Features", "Form", "attention_matrix", "causal_decode_init", "causal_decode_step",
    "causal_linear_attention_scan", "exponential", "favor_attention", "feature_map",
    "feature_parts", "form", "kernel", "projection", "softmax_attention", "softmax_matrix",
]
