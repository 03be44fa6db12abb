"""Attention backends behind one signature, chosen by name (see registry.py)."""

from performer.attention import (blockwise, dot_product, exact, identity,  # registers all
                                 linear, linformer, performer, reformer)
from performer.attention.registry import (BackendInfo, RandomFeatures, by_label, colour, info,
                                          make, names, options, redraw, register)

__all__ = ["BackendInfo", "RandomFeatures", "by_label", "colour", "info", "make", "names",
           "options", "redraw", "register", "blockwise", "dot_product", "exact", "identity",
           "linear", "linformer", "performer", "reformer"]
