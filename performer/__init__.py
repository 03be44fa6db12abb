"""performer: reproduce and extend "Rethinking Attention with Performers"."""

__version__ = "0.1.0"
