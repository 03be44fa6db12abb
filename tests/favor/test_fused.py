"""The fused Pallas kernels (favor/fused.py, interpret mode here) pass the XLA forms' tests, and
each platform's choice of form is explicit."""

import functools
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import test_attention as xla_tests
import test_generalized_kernels as generalized_tests
from performer import favor
from testlib import ROOT


@pytest.fixture(autouse=True, name="fused_form")
def fixture_fused_form(monkeypatch):
  """This platform's form with the fused kernels on, so that every favor_attention call of the
  borrowed tests (fused=None) runs them."""
  platform = jax.default_backend()
  monkeypatch.setitem(favor.FORMS, platform, favor.form(platform)._replace(fused=True))


def _pallas_calls(fn, *args):
  return str(jax.make_jaxpr(fn)(*args)).count("pallas_call")


# A few settings of each borrowed test: interpret mode compiles every one (a few s each).
@pytest.mark.parametrize("kernel, eps, block", [  # None: one block (L = 37); 5 does not divide L
    ("positive", 0.0, None), ("positive", 0.0, 5), ("relu", 1e-3, 5), ("trig", 0.0, 5)])
def test_bidirectional_equals_explicit_formula(kernel, eps, block):
  xla_tests.test_bidirectional_equals_explicit_formula(kernel, eps, block)


@pytest.mark.parametrize("kernel, eps, chunk", [  # 64: one chunk
    ("positive", 0.0, 1), ("positive", 0.0, 3), ("positive", 0.0, 16), ("positive", 0.0, 64),
    ("relu", 1e-3, 3), ("trig", 0.0, 3)])
def test_causal_chunks_equal_per_token_oracle(kernel, eps, chunk):
  xla_tests.test_causal_chunks_equal_per_token_oracle(kernel, eps, chunk, None)


@pytest.mark.parametrize("kernel, eps, chunk", [("positive", 0.0, 8), ("trig", 0.0, 5),
                                                ("relu", 1e-3, 8)])
def test_future_tokens_never_change_past_outputs(kernel, eps, chunk):
  xla_tests.test_future_tokens_never_change_past_outputs(functools.partial(
      favor.favor_attention, kernel=kernel, kernel_epsilon=eps, chunk_size=chunk))


@pytest.mark.parametrize("kernel, eps", [("positive", 0.0), ("relu", 1e-3)])
def test_padding_never_changes_real_outputs(kernel, eps):
  xla_tests.test_padding_never_changes_real_outputs(kernel, eps)


@pytest.mark.parametrize("causal, scale", [(False, 12.0), (True, 12.0)])
def test_large_norms_stay_finite_and_exact(causal, scale):
  xla_tests.test_large_norms_stay_finite_and_exact(causal, scale)


@pytest.mark.parametrize("chunk", [16, 64])
def test_large_norm_keys_take_the_exact_path_and_stay_causal(chunk):
  xla_tests.test_large_norm_keys_take_the_exact_path_and_stay_causal(chunk, None)


@pytest.mark.parametrize("causal", [False, True])
def test_max_norm_limit_both_sides(causal):
  xla_tests.test_max_norm_limit_both_sides(causal)


@pytest.mark.parametrize("causal", [False, True])
def test_bf16_inputs_accumulate_in_float32(causal):
  xla_tests.test_bf16_inputs_accumulate_in_float32(causal, None)


@pytest.mark.parametrize("kernel, causal, scale, chunk", [
    ("positive", False, 1.0, 8), ("positive", True, 1.0, 8), ("positive", True, 7.0, 64)])  # scaled norms ~12 in one chunk: keys outgrow the reference
def test_gradients_match_float64_autodiff(kernel, causal, scale, chunk):
  xla_tests.test_gradients_match_float64_autodiff(kernel, causal, scale, None, chunk, 0)


def test_identical_under_jit_grad_and_vmap():
  xla_tests.test_identical_under_jit_grad_and_vmap()


@pytest.mark.parametrize("kernel", ["relu"])
@pytest.mark.parametrize("causal, block", [(False, 5), (True, 16)])
def test_without_renormalization_favor_is_the_numerator_alone(kernel, causal, block):
  generalized_tests.test_without_renormalization_favor_is_the_numerator_alone(kernel, causal,
                                                                               block)


@pytest.mark.parametrize("causal", [False, True])
def test_the_kernels_replace_the_xla_forms_only_where_chosen(causal):
  q, k, v = xla_tests._qkv(12)  # pylint: disable=protected-access
  W = xla_tests._W()  # pylint: disable=protected-access
  attend = lambda fused, kernel="positive", **kw: functools.partial(
      favor.favor_attention, W=W, kernel=kernel, causal=causal, fused=fused, **kw)
  assert _pallas_calls(attend(None), q, k, v) == 1  # the (patched) platform's choice
  assert _pallas_calls(attend(False), q, k, v) == 0
  np.testing.assert_allclose(attend(True)(q, k, v), attend(False)(q, k, v), rtol=1e-5,
                             atol=1e-6)
  # The data-dependent kernels keep the XLA forms by default and refuse the kernels.
  stats = favor.exponential.moments(k * 8 ** -0.25)
  kw = dict(statistics=(stats, stats)) if causal else {}
  assert _pallas_calls(attend(None, "gerf", **kw), q, k, v) == 0
  with pytest.raises(ValueError, match="fused kernels do not compute"):
    attend(True, "gerf", **kw)(q, k, v)


def test_no_platform_chooses_the_kernels_before_they_are_measured(monkeypatch):
  monkeypatch.undo()  # the forms as shipped
  assert not any(f.fused for f in favor.FORMS.values())
  assert not favor.form("gpu").fused and not favor.form("tpu").fused


def test_gradients_flow_to_q_k_v_and_not_through_the_mask():
  q, k, v = xla_tests._qkv(13)  # pylint: disable=protected-access
  W = xla_tests._W()  # pylint: disable=protected-access
  mask = jnp.ones(k.shape[:2], bool).at[:, -5:].set(False)
  loss = lambda fused: lambda q, k, v: jnp.sum(jnp.sin(favor.favor_attention(
      q, k, v, W, causal=True, mask=mask, chunk_size=8, fused=fused)))
  for got, want in zip(jax.grad(loss(True), argnums=(0, 1, 2))(q, k, v),
                       jax.grad(loss(False), argnums=(0, 1, 2))(q, k, v)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  assert not np.asarray(jax.grad(loss(True), argnums=1)(q, k, v))[:, -5:].any()


@pytest.mark.parametrize("length", [256, 1000])  # 1,000: rows padded to whole chunks
def test_both_kernels_lower_to_triton_for_cuda(length):
  # scripts/fused_lowering.py lowers them for an NVIDIA GPU on this CPU: every product a 2D
  # matrix product, no primitive Pallas' Triton backend lacks.
  done = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "fused_lowering.py"),
                         str(length)], capture_output=True, text=True, check=False,
                        env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert done.stdout.splitlines() == [f"{direction} {kernel}: lowers for cuda"
                                      for kernel in ("positive", "relu")
                                      for direction in ("bidirectional", "causal")], done.stdout
  assert done.returncode == 0
