"""Experiments: each computes rows of numbers and writes one JSON result file."""
