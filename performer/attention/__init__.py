"""Attention backends behind one signature, chosen by name (see registry.py)."""

from performer.attention import (exact, identity, linear, linformer, performer,  # registers all
                                 reformer)
from performer.attention.registry import (BackendInfo, RandomFeatures, info, make, names,
                                          options, redraw, register)

__all__ = ["BackendInfo", "RandomFeatures", "info", "make", "names", "options", "redraw",
           "register", "exact", "identity", "linear", "linformer", "performer",
           "reformer"]
