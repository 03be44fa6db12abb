"""Lowers the fused FAVOR kernels (performer/favor/fused.py) for an NVIDIA GPU from any machine,
without one: jax.export traces them as a GPU would, down to Triton's IR, and compiles nothing
(Triton's own compile to PTX happens on the GPU). Prints one line per direction and kernel
(positive, relu) and exits 1 if any fails to lower.

  .venv/bin/python scripts/fused_lowering.py [L]     # default L = 4096, bfloat16, m = 256
"""

import sys

import jax
import jax.numpy as jnp
from jax import export

from performer import favor


def main():
  length = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
  q = jax.ShapeDtypeStruct((1, length, 2, 64), jnp.bfloat16)
  W = jax.ShapeDtypeStruct((256, 64), jnp.float32)
  jax.default_backend = lambda: "gpu"  # trace as on a GPU: no interpret mode, the GPU's form
  failed = False
  for kernel in ("positive", "relu"):  # FAVOR+ and the generalized kernels' representative
    for causal in (False, True):
      attend = jax.jit(lambda q, k, v, W, causal=causal, kernel=kernel: favor.favor_attention(
          q, k, v, W, kernel=kernel, causal=causal, fused=True))
      name = f"{'causal' if causal else 'bidirectional'} {kernel}"
      try:
        # Triton calls carry no serialization guarantee; lowering them is all this checks.
        export.export(attend, platforms=["cuda"], disabled_checks=[
            export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")])(q, q, q, W)
        print(f"{name}: lowers for cuda")
      except Exception as e:  # pylint: disable=broad-except
        failed = True
        print(f"{name}: does not lower for cuda: {type(e).__name__}: "
              f"{(str(e).splitlines() or [''])[0][:200]}")
  sys.exit(1 if failed else 0)


if __name__ == "__main__":
  main()
