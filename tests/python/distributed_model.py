"""The small model the distributed tests train, its data, and one training step.

    tokens -> Embedding -> Block x 2 -> RMSNorm -> Linear head -> next-token cross entropy
    Block: h = x + SDM(RMSNorm(x)); out = h + MLP(RMSNorm(h))

The SDM layer is sized so that each piece of the distributed machinery has something to do:
two heads, a learned memory bank (the `memory` parameter) whose 128 rows shard over the ranks,
a chunk size below T (the bank gradient crosses chunks, so `grad_bank_fp32` matters), and a
vocabulary of 37 (odd: FSDP2 pads the embedding's uneven shards). Every run, single-process or
one rank of many, builds the same initial parameters from the same seed and draws the same
global batches; rank r trains on rows [r * B / world, (r + 1) * B / world) of each batch.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributed.tensor import DTensor
from torch.utils.checkpoint import checkpoint

import sdm

VOCAB = 37
DIM = 16
SEQ_LEN = 12
GLOBAL_BATCH = 6  # divisible by every world size the tests use (2 and 3)
STEPS = 3
LEARNING_RATE = 0.05


@dataclass(frozen=True)
class ModelConfig:
    grad_bank_fp32: bool = False
    checkpoint_blocks: bool = False
    # The mixer's residual as an in-place add on the layer's output (`mixed += x`): same math,
    # but an in-place op on an FSDP2-wrapped module's output drops FSDP2's pre-backward hook
    # when that output is a view (issue 22): the layer's outputs must not be views.
    inplace_residual: bool = False


def layer_args(config: ModelConfig) -> sdm.SparseDeltaMemoryArgs:
    return sdm.SparseDeltaMemoryArgs(dim=DIM, num_heads=2, slots_per_head=64, num_writes=4, num_reads=5,
                                     chunk_size=4, output_gate=True, normalize_readings=True,
                                     grad_bank_fp32=config.grad_bank_fp32)


class Block(nn.Module):
    def __init__(self, config: ModelConfig, layer_id: int) -> None:
        super().__init__()
        self.mixer_norm = nn.RMSNorm(DIM)
        self.mixer = sdm.SparseDeltaMemory(layer_args(config), layer_id)
        self.mlp_norm = nn.RMSNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 2 * DIM), nn.SiLU(), nn.Linear(2 * DIM, DIM))
        self.checkpointed = config.checkpoint_blocks
        self.inplace_residual = config.inplace_residual

    def forward(self, x: Tensor) -> Tensor:
        if self.checkpointed:
            return checkpoint(self._residual_branches, x, use_reentrant=False)
        return self._residual_branches(x)

    def _residual_branches(self, x: Tensor) -> Tensor:
        mixed, _state = self.mixer(self.mixer_norm(x))
        if self.inplace_residual:
            mixed += x
            h = mixed
        else:
            h = x + mixed
        return h + self.mlp(self.mlp_norm(h))


class TinyLM(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block(config, i) for i in range(2))
        self.norm = nn.RMSNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, tokens: Tensor) -> Tensor:
        """Logits [B * T, VOCAB]: the head runs on the flattened tokens, so the (FSDP2-wrapped)
        root returns a tensor of its own, not a view (nn.Linear on a 3-D input returns one)."""
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).flatten(0, 1))


def build_model(config: ModelConfig = ModelConfig(), seed: int = 0) -> TinyLM:
    torch.manual_seed(seed)
    return TinyLM(config)


def global_batches(steps: int = STEPS, seed: int = 1) -> Tensor:
    """[steps, GLOBAL_BATCH, SEQ_LEN + 1] tokens: inputs are [..., :-1], targets [..., 1:]."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (steps, GLOBAL_BATCH, SEQ_LEN + 1), generator=generator)


def loss_fn(model: nn.Module, tokens: Tensor) -> Tensor:
    """Mean next-token cross entropy over the batch's tokens (in float32 whatever the logits)."""
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.float().reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))


def plain_name(name: str) -> str:
    """A parameter's name without the wrappers' parts (DDP's module., torch.compile's _orig_mod.)."""
    return name.removeprefix("module.").replace("._orig_mod", "")


def full_cpu(t: Tensor) -> Tensor:
    """The whole tensor on the CPU; for an FSDP2 DTensor a collective (every rank must call it)."""
    if isinstance(t, DTensor):
        t = t.full_tensor()
    return t.detach().cpu().clone()


def named_full(model: nn.Module, of_grad: bool = False) -> dict[str, Tensor]:
    return {plain_name(n): full_cpu(p.grad if of_grad else p) for n, p in model.named_parameters()}


def train(model: nn.Module, optimizer: torch.optim.Optimizer, batches: Tensor, *, rank: int = 0, world: int = 1,
          device: torch.device | str = "cpu") -> dict:
    """Trains on `batches` [steps, GLOBAL_BATCH, SEQ_LEN + 1], this rank taking its rows of each.

    Returns what the tests compare: the loss of each step over the whole global batch (the mean
    of the ranks' losses, all-reduced when world > 1), every parameter's gradient at each step
    (after the backward, before the optimiser step) and the parameters after the last step.
    """
    rows = GLOBAL_BATCH // world
    losses, grads = [], []
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model, batch[rank * rows:(rank + 1) * rows].to(device))
        loss.backward()
        grads.append(named_full(model, of_grad=True))
        optimizer.step()
        loss = loss.detach()
        if world > 1:
            dist.all_reduce(loss)
            loss = loss / world
        losses.append(loss.cpu())
    return {"losses": torch.stack(losses), "grads": grads, "params": named_full(model)}


def train_bf16_compute(model: nn.Module, optimizer: torch.optim.Optimizer, batches: Tensor) -> dict:
    """Single-process training with the arithmetic of FSDP2's MixedPrecisionPolicy(param_dtype=
    bfloat16, reduce_dtype=float32): each step runs the forward and backward on a bfloat16 copy
    of the float32 parameters and gives the optimiser of the float32 parameters the gradients
    cast to float32. Returns what `train` returns."""
    losses, grads = [], []
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        compute = copy.deepcopy(model).to(torch.bfloat16)
        loss = loss_fn(compute, batch)
        loss.backward()
        for param, low in zip(model.parameters(), compute.parameters()):
            param.grad = low.grad.float()
        grads.append(named_full(model, of_grad=True))
        optimizer.step()
        losses.append(loss.detach())
    return {"losses": torch.stack(losses), "grads": grads, "params": named_full(model)}
