"""Random op problems of awkward shapes and the project's error metric, shared by the CPU tests
(tests/python/conftest.py) and the GPU tests (tests/python/gpu_support.py). Problems are drawn
on the CPU in float64, so both see the same inputs for the same arguments."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Problem:
    memory: torch.Tensor
    k_idx: torch.Tensor
    k_val: torch.Tensor
    v: torch.Tensor
    beta: torch.Tensor
    g: torch.Tensor
    q_idx: torch.Tensor
    q_val: torch.Tensor
    slots_per_stream: int

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """Every tensor argument of the op, the bank first."""
        return (self.memory, self.k_idx, self.k_val, self.v, self.beta, self.g, self.q_idx, self.q_val)

    def inputs(self) -> tuple[torch.Tensor, ...]:
        """The op's arguments after the bank."""
        return self.tensors()[1:]

    def float_inputs(self) -> tuple[torch.Tensor, ...]:
        return (self.memory, self.k_val, self.v, self.beta, self.g, self.q_val)

    def cast(self, bank_dtype: torch.dtype, input_dtype: torch.dtype | None = None) -> "Problem":
        input_dtype = input_dtype or bank_dtype
        return Problem(self.memory.to(bank_dtype), self.k_idx, self.k_val.to(input_dtype), self.v.to(input_dtype),
                       self.beta.to(input_dtype), self.g.to(input_dtype), self.q_idx, self.q_val.to(input_dtype),
                       self.slots_per_stream)

    def to(self, device: str | torch.device) -> "Problem":
        return Problem(*(t.to(device) for t in self.tensors()), self.slots_per_stream)

    def requiring_grad(self) -> "Problem":
        def leaf(t):
            return t.detach().clone().requires_grad_(t.is_floating_point())
        return Problem(*(leaf(t) for t in self.tensors()), self.slots_per_stream)


def make_problem(P: int = 2, T: int = 13, W: int = 3, R: int = 2, hd: int = 6, slots_per_stream: int = 16,
                 G: int = 1, dtype: torch.dtype = torch.float64, input_dtype: torch.dtype | None = None,
                 index_dtype: torch.dtype = torch.int64, seed: int = 0, beta_2d: bool = False,
                 decode_lead: tuple[int, ...] | None = None) -> Problem:
    """Inputs as in the reference package's tests, drawn on the CPU in float64: bank randn*0.1; per token W (R) distinct
    slots of the stream (random order) plus the stream offset; k_val, q_val randn*0.3; v randn*0.1;
    beta U(0, 0.3); g U(-0.5, -0.01). The bank is cast to ``dtype``, the other float inputs to
    ``input_dtype`` (default ``dtype``), the indices to ``index_dtype``. ``beta_2d``: beta [P, T]
    instead of [P, T, 1]. ``decode_lead``: one token per stream, leading dims ``decode_lead`` (their
    product is P) instead of [P, T]."""
    gen = torch.Generator().manual_seed(seed)
    lead = (P, T) if decode_lead is None else tuple(decode_lead)
    tokens = P * T if decode_lead is None else P

    def slots(K: int) -> torch.Tensor:
        rows = torch.stack([torch.randperm(slots_per_stream, generator=gen)[:K] for _ in range(tokens)])
        stream = torch.arange(tokens) // (tokens // P)
        return (rows + stream.view(-1, 1) * slots_per_stream).view(*lead, K).to(index_dtype)

    memory = torch.randn(P * slots_per_stream, hd, generator=gen, dtype=torch.float64) * 0.1
    k_idx, q_idx = slots(W), slots(R)
    k_val = torch.randn(*lead, W, generator=gen, dtype=torch.float64) * 0.3
    q_val = torch.randn(*lead, R, generator=gen, dtype=torch.float64) * 0.3
    v = torch.randn(*lead, hd, generator=gen, dtype=torch.float64) * 0.1
    beta = torch.rand(*lead, 1, generator=gen, dtype=torch.float64) * 0.3
    if beta_2d:
        beta = beta.squeeze(-1)
    g = -(torch.rand(*lead, G, generator=gen, dtype=torch.float64) * 0.49 + 0.01)
    return Problem(memory, k_idx, k_val, v, beta, g, q_idx, q_val, slots_per_stream).cast(dtype, input_dtype)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max|a - b| / max|b| in float64 on the CPU (the project's error metric against a reference)."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    scale = b.abs().max().item()
    assert scale > 0, "reference tensor is all zeros: the comparison would prove nothing"
    return (a - b).abs().max().item() / scale
