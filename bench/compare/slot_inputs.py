"""Inputs of the side-by-side benchmark (bench/compare/side_by_side.py), in torch.

The configs are the C++ benchmarks' (bench/bench_config.cpp) and the slot patterns mirror
bench/slot_patterns.hpp's (not bit for bit: torch's generator, not the C++ one):

  product_key  a layer's addressing: product-key top-W (n = isqrt(sps) keys per factor, factor
               top-k1 with k1 = min(W, n), top-W of the k1 x k1 candidate sums, slots ascending) of
               scores z_t . proj over an AR(1) latent (z_t = 0.9 z_{t-1} + sqrt(0.19) noise, 64
               dims; proj ~ N(0, 1/64), so scores ~ N(0, 1)): consecutive tokens share slots.
  heavy_reuse  the same with a fixed per-key score bias of standard deviation 1.45, so that a few
               keys win for most tokens, as in trained layers.

k_val / q_val are the softmax of the selected sums (temperature 4), the other tensors Gaussian
(beta a sigmoid, g in [-0.51, -0.01]). One generator per call (`seed`): both systems get the
same tensors.
"""

from __future__ import annotations

import math

import torch

# name: head dim, slots per stream, writes and reads per token, streams, tokens per stream
CONFIGS = {
    "small": dict(hd=128, sps=16384, W=16, R=16, P=4, T=2048),
    "readme": dict(hd=768, sps=36864, W=64, R=64, P=2, T=8192),
    "big": dict(hd=2048, sps=262144, W=64, R=64, P=2, T=8192),
    "flagship": dict(hd=1024, sps=65536, W=128, R=128, P=8, T=4096),
}
PATTERNS = ("product_key", "heavy_reuse")
LATENT_DIMS = 64
LATENT_RHO = 0.9
HEAVY_BIAS = 1.45


def ar1_latent(P: int, T: int, gen: torch.Generator, device: str) -> torch.Tensor:
    noise = torch.randn(P, T, LATENT_DIMS, generator=gen, device=device)
    z = torch.empty_like(noise)
    z[:, 0] = noise[:, 0]
    innovation = math.sqrt(1.0 - LATENT_RHO * LATENT_RHO)
    for t in range(1, T):
        z[:, t] = LATENT_RHO * z[:, t - 1] + innovation * noise[:, t]
    return z


def product_key_slots(z: torch.Tensor, proj: torch.Tensor, key_bias: torch.Tensor, n: int, K: int,
                      temp: float = 4.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Product-key top-K slots (ascending, [P, T, K] int64) and their softmax weights."""
    P, T, _ = z.shape
    slots = torch.empty(P, T, K, dtype=torch.int64, device=z.device)
    weights = torch.empty(P, T, K, dtype=torch.float32, device=z.device)
    k1 = min(K, n)
    step = max(1, (1 << 27) // (k1 * k1 * P))  # tokens per block: bounds the candidate grid's memory
    for t0 in range(0, T, step):
        scores = z[:, t0:t0 + step] @ proj + key_bias
        v1, i1 = scores[..., :n].topk(k1, dim=-1)
        v2, i2 = scores[..., n:].topk(k1, dim=-1)
        grid = (v1.unsqueeze(-1) + v2.unsqueeze(-2)).flatten(-2)
        best, at = grid.topk(K, dim=-1)
        chosen = i1.gather(-1, at // k1) * n + i2.gather(-1, at % k1)
        chosen, order = chosen.sort(dim=-1)
        slots[:, t0:t0 + step] = chosen
        weights[:, t0:t0 + step] = torch.softmax(best.gather(-1, order) * temp, -1)
    return slots, weights


def make_inputs(config: dict, pattern: str, bank_dtype: torch.dtype = torch.bfloat16, seed: int = 0,
                device: str = "cuda") -> dict:
    if pattern not in PATTERNS:
        raise ValueError(f"slot pattern: expected one of {', '.join(PATTERNS)}, got {pattern!r}")
    gen = torch.Generator(device=device).manual_seed(seed)
    P, T, hd, sps, W, R = (config[k] for k in ("P", "T", "hd", "sps", "W", "R"))
    n = math.isqrt(sps)
    if n * n != sps:
        raise ValueError(f"slots per stream must be a square for product keys, got {sps}")
    z = ar1_latent(P, T, gen, device)
    bias_std = HEAVY_BIAS if pattern == "heavy_reuse" else 0.0
    key_bias = torch.randn(2 * n, generator=gen, device=device) * bias_std
    offset = (torch.arange(P, device=device) * sps).view(P, 1, 1)
    k_slots, k_val = product_key_slots(z, torch.randn(LATENT_DIMS, 2 * n, generator=gen, device=device) / 8, key_bias, n, W)
    q_slots, q_val = product_key_slots(z, torch.randn(LATENT_DIMS, 2 * n, generator=gen, device=device) / 8, key_bias, n, R)
    return dict(
        memory=(torch.randn(P * sps, hd, generator=gen, device=device) * 0.02).to(bank_dtype),
        k_idx=(k_slots + offset).int(), k_val=k_val.to(bank_dtype),
        v=torch.randn(P, T, hd, generator=gen, device=device).to(bank_dtype),
        beta=torch.sigmoid(torch.randn(P, T, 1, generator=gen, device=device)),
        g=-(torch.rand(P, T, 1, generator=gen, device=device) * 0.5 + 0.01),
        q_idx=(q_slots + offset).int(), q_val=q_val.to(bank_dtype))


def distinct_fraction(k_idx: torch.Tensor, C: int) -> float:
    """Mean over the chunks of C tokens (a last partial one included) of distinct rows / entries."""
    P, T, _ = k_idx.shape
    fractions = []
    for p in range(P):
        for t0 in range(0, T, C):
            chunk = k_idx[p, t0:t0 + C].reshape(-1)
            fractions.append(torch.unique(chunk).numel() / chunk.numel())
    return sum(fractions) / len(fractions)
