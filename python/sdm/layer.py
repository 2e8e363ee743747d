"""SparseDeltaMemory: the SDM sequence-mixing layer (SPEC F, Z.8, Z.9).

Forward, for x [B, T, D] (or [B*T, D] with freqs_cis of T rows, SPEC F.3):
  gates (F.5)       g = -exp(A_log) * softplus(a_proj(x) + dt_bias),  beta = sigmoid(b_proj(x))   [B, T, H]
  values            v = Wv_write(x), split into heads                                          [B*H, T, hd]
  addressing (F.4)  Wk_write(x), Wq_read(x) (optional BatchNorm1d), product keys per head
                    -> (k_idx, k_val = write_act(scores)) [B*H, T, W'], (q_idx, q_val) [B*H, T, R']
  decay             g per token (G = 1), or g * k_val per write with key_weighted_decay (G = W')
  bank              the cache's bank, or the learned memory replicated over the batch, or zeros;
                    stream p = b*H + h owns rows [p*sph, (p+1)*sph) and indices get p*sph added
  core op           training: sdm.write_read (differentiable); with a cache: sdm.write_read_
                    in place for T > 1 and sdm.decode_step for T == 1
  output            optional per-head LayerNorm, merge heads, optional sigmoid(Wog(x)) gate, Wo
The layer composes torch ops and torch.ops.sdm; it holds no SDM math of its own.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import functional
from .activations import make_activation
from .args import SparseDeltaMemoryArgs
from .cache import SparseDeltaMemoryCache
from .product_keys import product_key_topk

_MAX_WIDTH = 256  # W, R and C limit of the op (SPEC Z.11)


def _check_args(args: SparseDeltaMemoryArgs) -> tuple[int, int]:
    """Validates the layer's configuration; returns (head_dim, keys per factor)."""
    if args.dim <= 0:
        raise ValueError(f"SparseDeltaMemoryArgs.dim must be set to the model width, got {args.dim}")
    if args.num_heads <= 0 or args.dim % args.num_heads != 0:
        raise ValueError(f"SparseDeltaMemoryArgs: dim ({args.dim}) must be divisible by num_heads ({args.num_heads})")
    n = math.isqrt(args.slots_per_head) if args.slots_per_head > 0 else 0
    if n < 1 or n * n != args.slots_per_head:
        raise ValueError(f"SparseDeltaMemoryArgs: slots_per_head ({args.slots_per_head}) must be a perfect square "
                         "n*n (product keys use two factors of n keys)")
    for name in ("num_writes", "num_reads"):
        k = getattr(args, name)
        if k < 1 or min(k, n * n) > _MAX_WIDTH:
            raise ValueError(f"SparseDeltaMemoryArgs.{name} must be in 1..{_MAX_WIDTH}, got {k}")
    if not 1 <= args.chunk_size <= _MAX_WIDTH:
        raise ValueError(f"SparseDeltaMemoryArgs.chunk_size must be in 1..{_MAX_WIDTH}, got {args.chunk_size}")
    low, high = args.A_init_range
    if not 0 <= low <= high:
        raise ValueError(f"SparseDeltaMemoryArgs.A_init_range must satisfy 0 <= min <= max, got {args.A_init_range}")
    return args.dim // args.num_heads, n


class SparseDeltaMemory(nn.Module):
    """Sparse Delta Memory layer. Parameter names and shapes follow SPEC F.2 exactly, so a
    reference state dict loads with ``strict=True``. The constructor calls
    :meth:`init_weights`, so the same seed gives the same parameters."""

    def __init__(self, args: SparseDeltaMemoryArgs, layer_id: int = 0) -> None:
        super().__init__()
        self.head_dim, self.num_keys = _check_args(args)
        self._read_act = make_activation(args.read_act, args.read_act_scale, "read_act")
        self._write_act = make_activation(args.write_act, args.write_act_scale, "write_act")
        self.args = args
        self.layer_id = layer_id
        self.dim, self.num_heads, self.slots_per_head = args.dim, args.num_heads, args.slots_per_head
        self.num_writes = min(args.num_writes, args.slots_per_head)
        self.num_reads = min(args.num_reads, args.slots_per_head)
        self.chunk_size = args.chunk_size
        key_size = self.num_heads * 2 * self.num_keys
        D, H = self.dim, self.num_heads

        self.Wq_read = nn.Linear(D, key_size)
        self.Wk_write = nn.Linear(D, key_size)
        self.Wv_write = nn.Linear(D, D)
        self.query_bn = nn.BatchNorm1d(key_size) if args.query_batchnorm else None
        self.key_bn = nn.BatchNorm1d(key_size) if args.query_batchnorm else None
        self.a_proj = nn.Linear(D, H)
        self.b_proj = nn.Linear(D, H)
        self.A_log = nn.Parameter(torch.empty(H))
        self.A_log._no_weight_decay = True
        self.dt_bias = nn.Parameter(torch.empty(H))
        self.dt_bias._no_weight_decay = True
        self.Wo = nn.Linear(D, D)
        self.Wog = nn.Linear(D, D) if args.output_gate else None
        if args.backprop_on_memory:
            self.memory = nn.Parameter(torch.zeros(H * self.slots_per_head, self.head_dim))
            self.memory._is_memory_bank = True
        else:
            self.memory = None
        self.readings_norm = nn.LayerNorm(self.head_dim, eps=args.norm_eps) if args.normalize_readings else None
        self.memory_stats: dict[str, Tensor] = {}
        self.init_weights()

    @torch.no_grad()
    def init_weights(self, init_std: float | None = None, factor: float = 1.0) -> None:
        """SPEC F.2: projections trunc-normal(0, sigma, +-3 sigma) with zero bias, sigma =
        (init_std or dim^-1/2) / factor; A ~ U(A_init_range) clamped >= 1e-4, stored as log;
        dt_bias = inv_softplus(dt), dt = exp(U(ln 1e-3, ln 1e-1)) clamped >= 1e-4; memory
        trunc-normal(0, sigma, +-3 sigma); BatchNorm and LayerNorm reset to (1, 0)."""
        sigma = (init_std if init_std is not None else self.dim ** -0.5) / factor
        for linear in (self.Wq_read, self.Wk_write, self.Wv_write, self.a_proj, self.b_proj, self.Wo, self.Wog):
            if linear is not None:
                nn.init.trunc_normal_(linear.weight, mean=0.0, std=sigma, a=-3 * sigma, b=3 * sigma)
                nn.init.zeros_(linear.bias)
        for norm in (self.query_bn, self.key_bn, self.readings_norm):
            if norm is not None:
                norm.reset_parameters()
        low, high = self.args.A_init_range
        A = torch.empty_like(self.A_log, dtype=torch.float32).uniform_(low, high).clamp_(min=1e-4)
        self.A_log.copy_(torch.log(A))
        dt = torch.exp(torch.empty_like(self.dt_bias, dtype=torch.float32)
                       .uniform_(math.log(1e-3), math.log(1e-1))).clamp_(min=1e-4)
        self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))
        if self.memory is not None:
            nn.init.trunc_normal_(self.memory, mean=0.0, std=sigma, a=-3 * sigma, b=3 * sigma)

    def create_kv_cache(self, bsz: int, seq_len: int, dtype: torch.dtype,
                        device: torch.device | str | None = None) -> SparseDeltaMemoryCache:
        """A cache for ``bsz`` sequences that have consumed ``seq_len`` tokens: the bank
        ``[bsz * H * slots_per_head, hd]`` in ``dtype`` (bfloat16 or float32) holding the learned
        memory replicated per batch element (zeros without it)."""
        if dtype not in (torch.bfloat16, torch.float32):
            raise TypeError(f"create_kv_cache: dtype must be torch.bfloat16 or torch.float32, got {dtype}")
        rows = bsz * self.num_heads * self.slots_per_head
        with torch.no_grad():
            if self.memory is not None:
                bank = self.memory.detach().to(device=device, dtype=dtype).repeat(bsz, 1)
            else:
                bank = torch.zeros(rows, self.head_dim, dtype=dtype, device=device)
        return SparseDeltaMemoryCache(bank, seq_len)

    def forward(self, x: Tensor, freqs_cis: Tensor | None = None,
                cache: SparseDeltaMemoryCache | None = None) -> Tensor:
        """x [B, T, D], or [B*T, D] with ``freqs_cis`` whose rows give T (SPEC F.3); returns the
        output shaped like x. With a cache (inference only) the cache's bank is updated in
        place and its token count advanced."""
        x3 = self._as_batch_time(x, freqs_cis)
        B, T, _ = x3.shape
        H, hd, sph = self.num_heads, self.head_dim, self.slots_per_head

        gate_dtype = torch.promote_types(x3.dtype, torch.float32)  # the op uses beta and g in f32
        g = -torch.exp(self.A_log.to(gate_dtype)) * F.softplus(self.a_proj(x3).to(gate_dtype)
                                                               + self.dt_bias.to(gate_dtype))
        beta = torch.sigmoid(self.b_proj(x3).to(gate_dtype))
        v = self._split_heads(self.Wv_write(x3), hd)
        k_scores, k_idx = product_key_topk(self._addressing(self.Wk_write(x3), self.key_bn), self.num_keys,
                                           self.num_writes)
        q_scores, q_idx = product_key_topk(self._addressing(self.Wq_read(x3), self.query_bn), self.num_keys,
                                           self.num_reads)
        k_val = self._write_act(k_scores)
        q_val = self._read_act(q_scores)
        g = self._split_heads(g, 1)
        beta = self._split_heads(beta, 1)
        if self.args.key_weighted_decay:
            g = g * k_val
        offsets = (torch.arange(B * H, device=x.device, dtype=torch.int32) * sph).view(-1, 1, 1)
        k_idx = k_idx.to(torch.int32) + offsets
        q_idx = q_idx.to(torch.int32) + offsets
        inputs = (k_idx, k_val, v, beta, g, q_idx, q_val)

        # Product keys give distinct in-range slots by construction, so the op's index check
        # (a host sync on CUDA) is skipped: validate=False.
        if cache is not None:
            readings = self._cached_step(cache, B, T, inputs)
        else:
            bank = self._initial_bank(B, v)  # a fresh tensor, owned here
            options = dict(slots_per_stream=sph, chunk_size=min(self.chunk_size, T), validate=False)
            if functional.records_grad(bank, k_val, v, beta, g, q_val):
                readings, bank = functional.write_read(bank, *inputs, snapshot_quant=self.args.snapshot_quant,
                                                       grad_bank_fp32=self.args.grad_bank_fp32, **options)
            else:
                readings = functional.write_read_(bank, *inputs, **options)
            self._log_stats(bank, k_idx)

        readings = readings.to(v.dtype)
        if self.readings_norm is not None:
            readings = self.readings_norm(readings)
        readings = readings.view(B, H, T, hd).transpose(1, 2).reshape(B, T, H * hd)
        if self.Wog is not None:
            readings = torch.sigmoid(self.Wog(x3)) * readings
        return self.Wo(readings).view(x.shape)

    # ---- pieces of the forward ---------------------------------------------------------

    def _as_batch_time(self, x: Tensor, freqs_cis: Tensor | None) -> Tensor:
        if x.dim() == 3:
            return x
        if x.dim() != 2:
            raise ValueError(f"SparseDeltaMemory: x must be [B, T, D] or [B*T, D], got shape {tuple(x.shape)}")
        if freqs_cis is None:
            raise ValueError("SparseDeltaMemory: 2-D input [B*T, D] needs freqs_cis (its rows give T)")
        T = freqs_cis.shape[0]
        if x.shape[0] % T != 0:
            raise ValueError(f"SparseDeltaMemory: 2-D input has {x.shape[0]} rows, not a multiple of "
                             f"freqs_cis rows T = {T}")
        return x.view(-1, T, x.shape[-1])

    def _split_heads(self, t: Tensor, width: int) -> Tensor:
        """[B, T, H * width] -> [B * H, T, width] (channel h * width + c)."""
        B, T, _ = t.shape
        return t.view(B, T, self.num_heads, width).transpose(1, 2).reshape(B * self.num_heads, T, width)

    def _addressing(self, raw: Tensor, norm: nn.BatchNorm1d | None) -> Tensor:
        if norm is not None:
            B, T, K = raw.shape
            raw = norm(raw.reshape(B * T, K)).view(B, T, K)
        return self._split_heads(raw, 2 * self.num_keys)

    def _initial_bank(self, B: int, v: Tensor) -> Tensor:
        """The learned memory replicated over the batch, or zeros: [B * H * sph, hd]."""
        if self.memory is not None:
            return self.memory.repeat(B, 1)
        dtype = v.dtype if v.dtype in (torch.bfloat16, torch.float32) else torch.float32
        return torch.zeros(B * self.num_heads * self.slots_per_head, self.head_dim, dtype=dtype, device=v.device)

    def _cached_step(self, cache: SparseDeltaMemoryCache, B: int, T: int, inputs: tuple[Tensor, ...]) -> Tensor:
        rows = B * self.num_heads * self.slots_per_head
        if tuple(cache.bank.shape) != (rows, self.head_dim):
            raise ValueError(f"SparseDeltaMemory: the cache's bank is {tuple(cache.bank.shape)}, expected "
                             f"({rows}, {self.head_dim}) for batch {B}; build it with create_kv_cache({B}, ...)")
        if T == 1:
            readings = functional.decode_step(cache.bank, *inputs, slots_per_stream=self.slots_per_head,
                                              validate=False)
        else:
            readings = functional.write_read_(cache.bank, *inputs, slots_per_stream=self.slots_per_head,
                                              chunk_size=min(self.chunk_size, T), validate=False)
        cache.cache_len += T
        return readings

    def _log_stats(self, final_bank: Tensor, k_idx: Tensor) -> None:
        if self.args.log_memory_norms:
            self.memory_stats["memory_norm"] = final_bank.detach().float().norm(dim=-1).mean()
        if self.args.log_memory_access_stats:
            rows = final_bank.shape[0]
            written = torch.zeros(rows, dtype=torch.bool, device=k_idx.device)
            written[k_idx.reshape(-1).long()] = True
            self.memory_stats["written_fraction"] = written.float().mean()
