"""SparseDeltaMemoryArgs: the layer's configuration (SPEC F.1 with the Z.9 defaults)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

SNAPSHOT_MODES = ("none", "bf16", "fp8", "int4")
DEFAULT_CHUNK_SIZE = 64


@dataclass
class SparseDeltaMemoryArgs:
    """Configuration of :class:`sdm.SparseDeltaMemory`.

    ``chunk_size`` is C of the chunked op (a speed knob: results change only through
    rounding); ``memory_block_size`` is its deprecated alias (DeprecationWarning; setting
    both to different values raises ValueError). ``read_act`` / ``write_act``: "Softmax"
    (softmax of scale * scores over the selected slots), "l2_normalize", or the name of a
    parameter-free torch.nn activation ("ReLU", "Sigmoid", ...). ``dt_bias_init`` is accepted
    for compatibility and unused (SPEC F.1). ``log_memory_access_stats`` /
    ``log_memory_norms`` record diagnostics in ``SparseDeltaMemory.memory_stats``.
    """

    dim: int = -1
    num_heads: int = 1
    slots_per_head: int = 10000
    num_writes: int = 64
    num_reads: int = 64
    chunk_size: int | None = None
    memory_block_size: int | None = None
    read_act: str = "Softmax"
    write_act: str = "Softmax"
    read_act_scale: float = 1.0
    write_act_scale: float = 1.0
    normalize_readings: bool = False
    norm_eps: float = 1e-6
    dt_bias_init: float = 0.0
    A_init_range: tuple[float, float] = (0.0, 16.0)
    backprop_on_memory: bool = True
    output_gate: bool = False
    query_batchnorm: bool = False
    log_memory_access_stats: bool = False
    log_memory_norms: bool = False
    key_weighted_decay: bool = False
    snapshot_quant: str = "none"
    grad_bank_fp32: bool = False

    def __post_init__(self) -> None:
        if self.memory_block_size is not None:
            warnings.warn("SparseDeltaMemoryArgs.memory_block_size is deprecated; use chunk_size",
                          DeprecationWarning, stacklevel=3)
            if self.chunk_size is not None and self.chunk_size != self.memory_block_size:
                raise ValueError(
                    f"SparseDeltaMemoryArgs: chunk_size ({self.chunk_size}) and its deprecated alias "
                    f"memory_block_size ({self.memory_block_size}) are both set and differ; set only chunk_size")
            if self.chunk_size is None:
                self.chunk_size = self.memory_block_size
        if self.chunk_size is None:
            self.chunk_size = DEFAULT_CHUNK_SIZE
        if self.snapshot_quant not in SNAPSHOT_MODES:
            raise ValueError(f"SparseDeltaMemoryArgs: snapshot_quant must be one of {', '.join(SNAPSHOT_MODES)}; "
                             f"got {self.snapshot_quant!r}")
