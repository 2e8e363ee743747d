"""A small language model with SDM token mixing, for the recall demo.

    embedding -> num_layers x [x + SDM(shift(norm(x))), x + MLP(norm(x))] -> norm -> head

``shift`` is a causal depthwise convolution over two tokens (as in Gated DeltaNet's short
convolution): it lets the token after a key write under that key's address. The read and
write key projections of each SDM layer are tied (one matrix addresses both), so a key
token is read from where it was written.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..args import SparseDeltaMemoryArgs
from ..layer import SparseDeltaMemory


class CausalShift(nn.Module):
    """y[t] = a * x[t] + b * x[t-1] per channel (depthwise causal convolution, width 2)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(dim, dim, kernel_size=2, groups=dim, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x.transpose(1, 2))[..., : x.shape[1]].transpose(1, 2)


class Block(nn.Module):
    def __init__(self, args: SparseDeltaMemoryArgs, layer_id: int) -> None:
        super().__init__()
        dim = args.dim
        self.mix_norm = nn.RMSNorm(dim)
        self.shift = CausalShift(dim)
        self.sdm = SparseDeltaMemory(args, layer_id)
        self.sdm.Wq_read = self.sdm.Wk_write  # tied addressing
        self.mlp_norm = nn.RMSNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.sdm(self.shift(self.mix_norm(x)))[0]
        return x + self.mlp(self.mlp_norm(x))


class RecallModel(nn.Module):
    def __init__(self, vocab_size: int, args: SparseDeltaMemoryArgs, num_layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, args.dim)
        self.blocks = nn.ModuleList(Block(args, i) for i in range(num_layers))
        self.norm = nn.RMSNorm(args.dim)
        self.head = nn.Linear(args.dim, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def loss_and_accuracy(self, tokens: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, float]:
        logits = self(tokens)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
        asked = targets >= 0
        accuracy = (logits.argmax(-1)[asked] == targets[asked]).float().mean().item()
        return loss, accuracy
