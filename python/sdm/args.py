"""SparseDeltaMemoryArgs: the layer's configuration, with the fields and defaults of
sparse-delta-memory 2.0.0 (docs/layer.md lists them) plus ``grad_bank_fp32``.

Every field is checked when the args are built (and again by the layer, for args changed
after construction); a bad value raises ValueError naming the field."""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass

from ._ops import LIMITS
from .activations import check_activation
from .product_keys import check_factor_dims

SNAPSHOT_MODES = ("none", "bf16", "fp8", "int4")
# The op's default and limits (C++ sdm/options.hpp, through torch.ops.sdm.limits()): the chunk size
# C and the bank rows (one layer's bank per sequence: num_heads * slots_per_head). num_writes /
# num_reads are both the top-k's k and the op's W / R, so both limits bound them.
DEFAULT_CHUNK_SIZE = LIMITS["default_chunk"]
MAX_CHUNK_SIZE = LIMITS["max_chunk"]
MAX_BANK_ROWS = LIMITS["max_bank_rows"]
MAX_READS_WRITES = min(LIMITS["max_product_key_k"], LIMITS["max_width"])

_FLAGS = ("normalize_readings", "backprop_on_memory", "output_gate", "query_batchnorm", "log_memory_access_stats",
          "log_memory_norms", "key_weighted_decay", "grad_bank_fp32", "cuda_graph")


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _fail(field: str, expected: str, value: object) -> None:
    raise ValueError(f"SparseDeltaMemoryArgs.{field} must be {expected}, got {value!r}")


@dataclass
class SparseDeltaMemoryArgs:
    """Configuration of :class:`sdm.SparseDeltaMemory` (docs/layer.md has the table).

    ``slots_per_head`` bank rows per head: ``side ** 2`` for the default two product-key
    factors of ``side`` columns, or ``prod(product_key_factor_dims)``. ``chunk_size`` is C of the
    chunked op (a speed knob: results change only through rounding; None, kept as None: the op's
    default ``DEFAULT_CHUNK_SIZE``; ``SparseDeltaMemory.chunk_size`` is the effective value);
    ``memory_block_size`` is its former name (DeprecationWarning; moved to chunk_size and cleared,
    as in 2.0.0; both set and different: ValueError). ``read_act`` / ``write_act``: "Softmax" (softmax of scale * scores over the
    selected slots), "l2_normalize", or the name of a torch.nn module built without arguments
    ("ReLU", "Identity", "Dropout", "PReLU": its parameters are the layer's).
    ``dt_bias_init`` is accepted and unused (as in 2.0.0). ``cuda_graph``: a CUDA layer replays its
    inference calls (prefill and decode) from CUDA graphs (docs/layer.md). ``log_memory_access_stats`` /
    ``log_memory_norms`` record diagnostics in ``SparseDeltaMemory.memory_stats``.
    """

    dim: int = -1
    num_writes: int = 64
    num_reads: int = 64
    slots_per_head: int = 10000
    chunk_size: int | None = None
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
    num_heads: int = 1
    key_weighted_decay: bool = False
    snapshot_quant: str = "none"
    cuda_graph: bool = False
    grad_bank_fp32: bool = False
    product_key_factor_dims: list[int] | None = None
    memory_block_size: int | None = None

    def __post_init__(self) -> None:
        if self.memory_block_size is not None:
            if not _is_int(self.memory_block_size):
                _fail("memory_block_size", "None or an int (the former name of chunk_size)", self.memory_block_size)
            warnings.warn("SparseDeltaMemoryArgs.memory_block_size is deprecated; use chunk_size",
                          DeprecationWarning, stacklevel=3)
            if self.chunk_size is not None and self.chunk_size != self.memory_block_size:
                raise ValueError(
                    f"SparseDeltaMemoryArgs: chunk_size ({self.chunk_size}) and its deprecated alias "
                    f"memory_block_size ({self.memory_block_size}) are both set and differ; set only chunk_size")
            # As 2.0.0: the alias moves to chunk_size and is cleared, so asdict / config round-trips
            # rebuild the same args without a second warning.
            self.chunk_size, self.memory_block_size = self.memory_block_size, None
        self.validate()

    def __setstate__(self, state: dict) -> None:
        # Unpickling skips __post_init__: args pickled with memory_block_size map as construction does.
        self.__dict__.update(state)
        self.__post_init__()

    @property
    def effective_chunk_size(self) -> int:
        """``chunk_size``, or the op's default (``DEFAULT_CHUNK_SIZE``, from C++) when it is None."""
        return DEFAULT_CHUNK_SIZE if self.chunk_size is None else self.chunk_size

    def validate(self) -> None:
        """Checks every field; ValueError naming the first bad one."""
        if not _is_int(self.dim) or not (self.dim == -1 or self.dim >= 1):
            _fail("dim", "a positive int (the model width; -1 until set)", self.dim)
        if not _is_int(self.num_heads) or self.num_heads < 1:
            _fail("num_heads", "a positive int", self.num_heads)
        if self.dim != -1 and self.dim % self.num_heads != 0:
            raise ValueError(f"SparseDeltaMemoryArgs: dim ({self.dim}) must be divisible by num_heads "
                             f"({self.num_heads})")
        self.factor_dims()
        if self.num_heads * self.slots_per_head > MAX_BANK_ROWS:
            raise ValueError(f"SparseDeltaMemoryArgs: num_heads * slots_per_head = {self.num_heads * self.slots_per_head} "
                             f"bank rows per sequence; at most {MAX_BANK_ROWS}")
        for field in ("num_writes", "num_reads"):
            value = getattr(self, field)
            if not _is_int(value) or not 1 <= value <= MAX_READS_WRITES:
                _fail(field, f"an int in 1..{MAX_READS_WRITES}", value)
        if self.chunk_size is not None and (not _is_int(self.chunk_size)
                                            or not 1 <= self.chunk_size <= MAX_CHUNK_SIZE):
            _fail("chunk_size", f"None or an int in 1..{MAX_CHUNK_SIZE}", self.chunk_size)
        check_activation(self.read_act, "read_act")
        check_activation(self.write_act, "write_act")
        for field in ("read_act_scale", "write_act_scale", "dt_bias_init"):
            value = getattr(self, field)
            if not _is_real(value) or not math.isfinite(value):
                _fail(field, "a finite number", value)
        if not _is_real(self.norm_eps) or not self.norm_eps > 0:
            _fail("norm_eps", "a positive number", self.norm_eps)
        low_high = self.A_init_range
        if (not isinstance(low_high, (tuple, list)) or len(low_high) != 2 or not all(_is_real(a) for a in low_high)
                or not 0 <= low_high[0] <= low_high[1] or not math.isfinite(low_high[1])):
            _fail("A_init_range", "(min, max) with 0 <= min <= max < inf", low_high)
        for field in _FLAGS:
            if not isinstance(getattr(self, field), bool):
                _fail(field, "a bool", getattr(self, field))
        if self.snapshot_quant not in SNAPSHOT_MODES:
            raise ValueError(f"SparseDeltaMemoryArgs.snapshot_quant must be one of {', '.join(SNAPSHOT_MODES)}; "
                             f"got {self.snapshot_quant!r}")

    def factor_dims(self) -> tuple[int, ...]:
        """The per-head product-key factor widths: ``product_key_factor_dims``, or two factors of
        ``sqrt(slots_per_head)``. ValueError naming the field when they do not fit."""
        sph = self.slots_per_head
        if not _is_int(sph) or sph < 1:
            _fail("slots_per_head", "a positive int", sph)
        if self.product_key_factor_dims is None:
            side = math.isqrt(sph)
            if side * side != sph:
                raise ValueError(f"SparseDeltaMemoryArgs: slots_per_head ({sph}) must be a perfect square n*n "
                                 f"(two product-key factors of n keys; {side * side} or {(side + 1) ** 2} would do), "
                                 "or set product_key_factor_dims")
            return (side, side)
        dims = check_factor_dims(self.product_key_factor_dims, "SparseDeltaMemoryArgs.product_key_factor_dims")
        if math.prod(dims) != sph:
            raise ValueError(f"SparseDeltaMemoryArgs.product_key_factor_dims = {list(dims)} address {math.prod(dims)} "
                             f"slots per head, but slots_per_head = {sph}; set slots_per_head to their product")
        return dims
