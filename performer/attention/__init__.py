"""Attention backends behind one signature, chosen by name (see registry.py)."""

from performer.attention import (exact, identity, linear, linformer, performer,  # registers all
                                 reformer)
from performer.attention.registry import make, names, redraw, register

__all__ = ["make", "names", "redraw", "register", "exact", "identity", "linear", "linformer", "performer",
           "reformer"]
