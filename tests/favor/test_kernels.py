"""The kernel registry (favor/kernels.py): its facts agree with the feature maps of features.py."""

import jax
import pytest

from performer import favor

D, M = 5, 7


@pytest.mark.parametrize("name", favor.KERNELS)
def test_the_declared_feature_count_is_the_width_of_the_map(name):
  kernel = favor.kernel(name)
  x = jax.random.normal(jax.random.key(0), (3, D))
  params = favor.exponential.identity(D) if name in favor.DATA_DEPENDENT_KERNELS else None
  if kernel.random:
    W = favor.projection(jax.random.key(1), M, D, "iid", "chi")
    assert favor.feature_map(x, W, name, params=params).shape[-1] == kernel.num_features(M, D)
  if name in favor.GENERALIZED_KERNELS:  # without W: phi(x) = f(x)
    assert (favor.feature_map(x, None, name).shape[-1]
            == kernel.num_features(M, D, deterministic=True))


def test_the_families_partition_the_kernels_and_labels_and_colours_are_one_per_kernel():
  families = favor.SOFTMAX_KERNELS + favor.DATA_DEPENDENT_KERNELS + favor.GENERALIZED_KERNELS
  assert sorted(families) == sorted(favor.KERNELS)
  assert set(favor.SOFTMAX_KERNELS) == {"positive", "hyperbolic", "trig"}  # Lemma 1, Sec. 2.3
  kernels = [favor.kernel(n) for n in favor.KERNELS]
  assert len({k.label for k in kernels}) == len({k.colour for k in kernels}) == len(kernels)
  assert favor.DETERMINISTIC_ONLY == ("taylor",)


def test_an_unknown_kernel_is_named_with_the_known_ones():
  with pytest.raises(ValueError, match="unknown kernel 'cosine'; choose from positive"):
    favor.kernel("cosine")
