"""The learning-rate schedules of OptimConfig against their closed forms."""

import math

import pytest

from performer.train.config import OptimConfig
from performer.train.state import learning_rate


def test_constant_is_the_papers_fixed_rate():
  lr = learning_rate(OptimConfig(learning_rate=1e-3), 100)
  assert [float(lr(t)) for t in (0, 50, 99)] == pytest.approx([1e-3] * 3)


def test_cosine_warms_up_linearly_then_decays_to_zero_at_the_last_step():
  peak, warmup, steps = 2e-3, 10, 110
  lr = learning_rate(OptimConfig(learning_rate=peak, schedule="cosine", warmup_steps=warmup), steps)
  for t in (0, 5, 10, 35, 60, 109, 110):
    want = (peak * t / warmup if t < warmup
            else peak * 0.5 * (1 + math.cos(math.pi * (t - warmup) / (steps - warmup))))
    assert float(lr(t)) == pytest.approx(want, abs=1e-9), t
  assert float(lr(steps)) == pytest.approx(0.0, abs=1e-12)


def test_bad_schedules_are_refused_by_name():
  with pytest.raises(ValueError, match="OptimConfig.schedule must be one of"):
    OptimConfig(schedule="linear")
  with pytest.raises(ValueError, match="OptimConfig.warmup_steps must be an integer >= 0"):
    OptimConfig(warmup_steps=-1)
