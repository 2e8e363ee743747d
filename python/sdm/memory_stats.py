"""Opt-in statistics of a SparseDeltaMemory layer, with sparse-delta-memory 2.0.0's names and meaning.

With ``log_memory_access_stats`` a layer records, in eval mode and outside CUDA-graph capture or
replay (they read values on the host, ``.item()``), per forward:
  * how often each bank row of a head was read / written (``H * slots_per_head`` counters, the
    batch folded onto the heads) and the summed read weights / write strengths per row;
  * read_weight_max (max of the read activation's output), write_strength_max / _mean (of the
    write activation's), output_norm (mean over tokens of ||output||_2), forget_gate_min / _mean /
    _max (of exp(g), the per-token decay), input_gate_min / _mean / _max (of beta);
  * with ``log_memory_norms`` too: memory_norm / memory_max (Frobenius norm and max |.| of the bank
    the call starts from), slot_norm_mean / _max (of its row norms), and the updated_* ones of the
    bank after the call.
``collect_grad_stats()`` (after a backward) records memory_grad_norm (of the learned memory's
gradient), qk_proj_grad_norm (mean of the Wq_read and Wk_write weight gradient norms) and
output_proj_grad_norm (of Wo's weight gradient).
``get_memory_access_stats(reset=True)`` returns read_unique_pct / write_unique_pct (percent of the
H * slots_per_head rows read / written at least once), read_slot_entropy_normalized /
write_slot_entropy_normalized (entropy of the summed weights over the rows divided by
ln(H * slots_per_head); 0 when nothing was recorded) and the mean of each statistic above since
the last reset (0.0 when none was recorded); None when ``log_memory_access_stats`` is off. With
``reset`` it then clears everything.
"""

from __future__ import annotations

import torch
from torch import Tensor

_ACTIVATION_KEYS = ("read_weight_max", "write_strength_max", "write_strength_mean", "output_norm", "forget_gate_min",
                    "forget_gate_mean", "forget_gate_max", "input_gate_min", "input_gate_mean", "input_gate_max")
_NORM_KEYS = ("memory_norm", "memory_max", "updated_memory_norm", "updated_memory_max", "slot_norm_mean",
              "slot_norm_max", "updated_slot_norm_mean", "updated_slot_norm_max")
_GRAD_KEYS = ("memory_grad_norm", "qk_proj_grad_norm", "output_proj_grad_norm")
_BUFFERS = ("_read_idx_counts", "_write_idx_counts", "_read_slot_access_weights", "_write_slot_access_weights")


class MemoryStatsMixin:
    """The statistics half of SparseDeltaMemory (see the module docstring)."""

    def _init_stats(self) -> None:
        rows = self.num_heads * self.slots_per_head
        if self.args.log_memory_access_stats:
            for name in _BUFFERS:
                dtype = torch.int64 if name.endswith("counts") else torch.float32
                self.register_buffer(name, torch.zeros(rows, dtype=dtype), persistent=False)
            keys = _ACTIVATION_KEYS + (_NORM_KEYS if self.args.log_memory_norms else ())
            self._activation_stats: dict[str, list[float]] | None = {key: [] for key in keys}
            self._grad_stats: dict[str, list[float]] | None = {key: [] for key in _GRAD_KEYS}
        else:
            for name in _BUFFERS:
                setattr(self, name, None)
            self._activation_stats = self._grad_stats = None

    def _record_access(self, idx: Tensor, weights: Tensor, kind: str) -> None:
        """idx [B*H, T, K] head-local rows, weights [B*H, T, K]: counts and summed weights per
        head row (stream p's head is p % H)."""
        BH = idx.shape[0]
        head = (torch.arange(BH, device=idx.device) % self.num_heads) * self.slots_per_head
        rows = (idx.long() + head.view(BH, 1, 1)).reshape(-1)
        counts = getattr(self, f"_{kind}_idx_counts")
        counts.index_add_(0, rows, torch.ones_like(rows))
        # index_put_ with accumulate sums repeated rows in a fixed order (deterministic on CUDA).
        access = getattr(self, f"_{kind}_slot_access_weights")
        access.index_put_((rows,), weights.detach().reshape(-1).to(access.dtype), accumulate=True)

    def _record_bank_norms(self, bank: Tensor, prefix: str) -> None:
        stats = self._activation_stats
        bank = bank.detach().float()
        rows = bank.norm(dim=-1)
        stats[f"{prefix}memory_norm"].append(bank.norm().item())
        stats[f"{prefix}memory_max"].append(bank.abs().max().item())
        stats[f"{prefix}slot_norm_mean"].append(rows.mean().item())
        stats[f"{prefix}slot_norm_max"].append(rows.max().item())

    @torch.no_grad()
    def _record_forward_stats(self, g: Tensor, beta: Tensor, k_idx: Tensor, k_val: Tensor, q_idx: Tensor,
                              q_val: Tensor, initial_bank: Tensor | None, final_bank: Tensor, output: Tensor) -> None:
        """One forward's statistics: g, beta [B, T, H] (g before key_weighted_decay), the head-local
        indices and activated weights [B*H, T, K], the banks before (None: not kept) and after the
        call, output [B, T, D]."""
        stats = self._activation_stats
        decay = torch.exp(g.float())
        for name, t in (("forget_gate", decay), ("input_gate", beta.float())):
            stats[f"{name}_min"].append(t.min().item())
            stats[f"{name}_mean"].append(t.mean().item())
            stats[f"{name}_max"].append(t.max().item())
        self._record_access(q_idx, q_val, "read")
        self._record_access(k_idx, k_val, "write")
        stats["read_weight_max"].append(q_val.max().item())
        stats["write_strength_max"].append(k_val.max().item())
        stats["write_strength_mean"].append(k_val.float().mean().item())
        stats["output_norm"].append(output.detach().float().norm(dim=-1).mean().item())
        if self.args.log_memory_norms and "memory_norm" in stats:
            if initial_bank is not None:
                self._record_bank_norms(initial_bank, "")
            self._record_bank_norms(final_bank, "updated_")

    def collect_grad_stats(self) -> None:
        """Records the gradient norms of the learned memory, of the key / query projections'
        weights (their mean) and of the output projection's weight; call it after the backward
        (nothing without ``log_memory_access_stats``)."""
        if self._grad_stats is None:
            return
        if self.memory is not None and self.memory.grad is not None:
            self._grad_stats["memory_grad_norm"].append(self.memory.grad.norm().item())
        qk = [proj.weight.grad.norm().item() for proj in (self.Wq_read, self.Wk_write) if proj.weight.grad is not None]
        if qk:
            self._grad_stats["qk_proj_grad_norm"].append(sum(qk) / len(qk))
        if self.Wo.weight.grad is not None:
            self._grad_stats["output_proj_grad_norm"].append(self.Wo.weight.grad.norm().item())

    def get_memory_access_stats(self, reset: bool = True) -> dict[str, float] | None:
        """The statistics since the last reset (module docstring of sdm.memory_stats), or None
        without ``log_memory_access_stats``; ``reset`` clears them afterwards."""
        if not self.args.log_memory_access_stats or self._read_idx_counts is None:
            return None
        rows = self._read_idx_counts.numel()
        stats = {f"{kind}_unique_pct": 100.0 * (getattr(self, f"_{kind}_idx_counts") > 0).sum().item() / rows
                 for kind in ("read", "write")}
        for kind in ("read", "write"):
            weights = getattr(self, f"_{kind}_slot_access_weights")
            total = weights.sum()
            if total.item() > 1e-10:
                p = weights / total
                entropy = -(p * p.clamp(min=1e-10).log()).sum()
                stats[f"{kind}_slot_entropy_normalized"] = (entropy / torch.log(torch.tensor(float(rows)))).item()
            else:
                stats[f"{kind}_slot_entropy_normalized"] = 0.0
        for accumulated in (self._activation_stats, self._grad_stats):
            for key, values in accumulated.items():
                stats[key] = sum(values) / len(values) if values else 0.0
        if reset:
            for name in _BUFFERS:
                getattr(self, name).zero_()
            for accumulated in (self._activation_stats, self._grad_stats):
                for key in accumulated:
                    accumulated[key] = []
        return stats
