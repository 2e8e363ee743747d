"""The saving forward called as the op, for the tests that need its `saved` buffer (the backward op,
opcheck, the stamp, the buffer's contract): torch.ops.sdm.write_read_saving into a fresh buffer
from sdm._ops.new_saved, as sdm.write_read's autograd Function allocates it."""

from __future__ import annotations

import torch

from sdm._ops import new_saved


def saving_forward(memory: torch.Tensor, *inputs: torch.Tensor, fill: int | torch.Tensor | None = None,
                   **options) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(readings, final_bank, saved) of write_read_saving on (memory, *inputs) with the op's keyword
    ``options``. ``fill``: the buffer's bytes before the call (a byte value, or a uint8 tensor of
    the buffer's size); None leaves them as new_saved allocates them (uninitialised)."""
    saved = new_saved(memory, *inputs, options)
    if isinstance(fill, torch.Tensor):
        saved.copy_(fill)
    elif fill is not None:
        saved.fill_(fill)
    readings, final_bank = torch.ops.sdm.write_read_saving(memory, *inputs, saved, **options)
    return readings, final_bank, saved
