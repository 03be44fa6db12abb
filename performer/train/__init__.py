"""Training and evaluation: loop, steps, metrics, writer, checkpoints."""
