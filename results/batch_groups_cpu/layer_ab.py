# Layer A/B of the CPU batch groups (results/README.md, "The CPU's batch groups"): JAX_PLATFORMS=cpu python layer_ab.py
import time, sys, jax, jax.numpy as jnp, numpy as np
from performer import favor
B, L, H, d, dv = 128, 64, 1, 16, 64
res = {}
for m in (64, 256):
  for causal in (True, False):
    ks = jax.random.split(jax.random.key(0), 4)
    q = jax.random.normal(ks[0], (B, L, H, d)) * 0.5; k = jax.random.normal(ks[1], (B, L, H, d)) * 0.5
    v = jax.random.normal(ks[2], (B, L, H, dv)); W = favor.projection(ks[3], m, d, "orthogonal", "chi")
    fns = {}
    for bt in (0, 256):
      f = lambda q, k, v, bt=bt: jnp.sum(favor.favor_attention(q, k, v, W, causal=causal, batch_tokens=bt) ** 2)
      fns[bt] = jax.jit(jax.grad(f, argnums=(0, 1, 2)))
      jax.block_until_ready(fns[bt](q, k, v))
    t = {0: [], 256: []}
    for r in range(30):
      for bt in ((0, 256) if r % 2 else (256, 0)):
        s = time.perf_counter(); jax.block_until_ready(fns[bt](q, k, v)); t[bt].append(time.perf_counter() - s)
    a, b = np.median(t[256]) * 1e3, np.median(t[0]) * 1e3
    print(f"m={m} {'U' if causal else 'B'}: grouped {a:.2f} ms, whole {b:.2f} ms, ratio {a/b:.2f}", flush=True)
