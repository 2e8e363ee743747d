"""Shared helpers of the GPU tests of the torch ops: random op problems drawn on the CPU (so the
CPU engine sees the same inputs), moved to the GPU, and the project's error metric. Every test
here is skipped when torch sees no CUDA device."""

from __future__ import annotations

from dataclasses import dataclass, fields

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device: the GPU tests of the torch ops are skipped")
    for item in items:
        item.add_marker(skip)


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

    def inputs(self) -> tuple[torch.Tensor, ...]:
        """The op's arguments after the bank."""
        return (self.k_idx, self.k_val, self.v, self.beta, self.g, self.q_idx, self.q_val)

    def to(self, device: str) -> "Problem":
        return Problem(*(getattr(self, f.name).to(device) if f.name != "slots_per_stream" else self.slots_per_stream
                         for f in fields(self)))


def make_problem(P: int = 2, T: int = 13, W: int = 3, R: int = 2, hd: int = 6, slots_per_stream: int = 16,
                 G: int = 1, bank: torch.dtype = torch.float32, inputs: torch.dtype | None = None,
                 index: torch.dtype = torch.int64, seed: int = 0, decode_lead: tuple[int, ...] | None = None) -> Problem:
    """Inputs as in SPEC I.1 on the CPU: bank randn*0.1; per token W (R) distinct slots of the stream
    in random order plus the stream offset; k_val, q_val randn*0.3; v randn*0.1; beta U(0, 0.3);
    g U(-0.5, -0.01). ``decode_lead``: one token per stream, leading dims ``decode_lead`` (their
    product is P) instead of [P, T]."""
    gen = torch.Generator().manual_seed(seed)
    inputs = inputs or bank
    lead = (P, T) if decode_lead is None else decode_lead
    tokens = P * T if decode_lead is None else P

    def slots(K: int) -> torch.Tensor:
        rows = torch.stack([torch.randperm(slots_per_stream, generator=gen)[:K] for _ in range(tokens)])
        stream = torch.arange(tokens) // (tokens // P)
        return (rows + stream.view(-1, 1) * slots_per_stream).view(*lead, K).to(index)

    def randn(*shape: int, scale: float) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * scale).to(inputs)

    memory = (torch.randn(P * slots_per_stream, hd, generator=gen) * 0.1).to(bank)
    k_idx, q_idx = slots(W), slots(R)
    beta = (torch.rand(*lead, 1, generator=gen) * 0.3).to(inputs)
    g = (-(torch.rand(*lead, G, generator=gen) * 0.49 + 0.01)).to(inputs)
    return Problem(memory, k_idx, randn(*lead, W, scale=0.3), randn(*lead, hd, scale=0.1), beta, g, q_idx,
                   randn(*lead, R, scale=0.3), slots_per_stream)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max|a - b| / max|b| in float64 on the CPU (the project's error metric)."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    scale = b.abs().max().item()
    assert scale > 0, "reference tensor is all zeros: the comparison would prove nothing"
    return (a - b).abs().max().item() / scale


def tolerance(bank: torch.dtype) -> float:
    return 2e-2 if bank == torch.bfloat16 else 1e-4


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bytes (NaN payloads and signed zeros included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@pytest.fixture(autouse=True)
def _deterministic_seed():
    torch.manual_seed(1234)
