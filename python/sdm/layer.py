"""SparseDeltaMemory: the SDM sequence-mixing layer, a drop-in for sparse-delta-memory 2.0.0's.

Forward, for x [B, T, D] (or [B*T, D] with freqs_cis of T rows):
  gates             g = -exp(A_log) * softplus(a_proj(x) + dt_bias),  beta = sigmoid(b_proj(x))   [B, T, H]
  values            v = Wv_write(x), split into heads                                          [B*H, T, hd]
  addressing        Wk_write(x), Wq_read(x) (optional BatchNorm1d), split into heads, then
                    torch.ops.sdm.product_key_topk over the factors of product_key_factor_dims
                    -> (k_idx, k_val = write_act(scores)) [B*H, T, W'], (q_idx, q_val) [B*H, T, R']
  decay             g per token (G = 1), or g * k_val per write with key_weighted_decay (G = W')
  bank              the cache's memory, or the learned memory replicated over the batch, or zeros;
                    stream p = b*H + h owns rows [p*sph, (p+1)*sph) and indices get p*sph added
  core op           sdm.write_read (differentiable; functional) when autograd records, else
                    sdm.write_read_ in place, or sdm.decode_step for T == 1; a float64 layer runs the
                    float64 reference op (CPU)
  output            optional per-head LayerNorm, merge heads, optional sigmoid(Wog(x)) gate, Wo
Returns (output, state): the state holds the bank after the call (docs/layer.md); neither is a view.
The layer composes torch ops and torch.ops.sdm; it holds no SDM math of its own.
"""

from __future__ import annotations

import copy
import logging
import math
import operator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import functional, reference
from .activations import make_activation
from .args import MAX_BANK_ROWS, SparseDeltaMemoryArgs
from .cache import SDMLayerState
from .cuda_graph import LayerGraphs, cuda_graphs_suspended
from .errors import UnsupportedConfigurationError, warn_if_untested
from .memory_stats import MemoryStatsMixin
from .product_keys import product_key_topk

try:
    from torch.distributed.tensor import DTensor  # FSDP2's sharded parameters
except ImportError:  # torch built without distributed support
    DTensor = ()

logger = logging.getLogger(__name__)

_ENGINE_DTYPES = (torch.float32, torch.bfloat16)  # the engine's banks; float64 runs the CPU reference

# The args fields a layer reads at every forward (a change is honoured by the next call), and those
# fixed at construction (parameter shapes, submodules, buffers): a change of one of these is refused
# by name at the next forward. A_init_range is read by init_weights; dt_bias_init is unused.
_LIVE_FIELDS = ("num_writes", "num_reads", "chunk_size", "snapshot_quant", "grad_bank_fp32", "key_weighted_decay",
                "cuda_graph", "log_memory_norms", "A_init_range", "dt_bias_init")
_FIXED_FIELDS = ("dim", "num_heads", "slots_per_head", "product_key_factor_dims", "backprop_on_memory", "output_gate",
                 "query_batchnorm", "normalize_readings", "norm_eps", "read_act", "write_act", "read_act_scale",
                 "write_act_scale", "log_memory_access_stats", "memory_block_size")
_RANDOM_ACTIVATIONS = (nn.Dropout, nn.AlphaDropout, nn.FeatureAlphaDropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d,
                       nn.RReLU)


def _frozen(value):
    return tuple(value) if isinstance(value, list) else value


def _args_snapshot(args: SparseDeltaMemoryArgs, fields: tuple[str, ...]) -> tuple:
    return tuple(_frozen(getattr(args, field, None)) for field in fields)


def _count(where: str, name: str, value, low: int, meaning: str) -> int:
    """`value` as an int >= low; TypeError (not an int) or ValueError (below low) naming it."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise TypeError(f"{where}: {name} ({meaning}) must be an int >= {low}, got {type(value).__name__} {value!r}")
    value = operator.index(value)
    if value < low:
        raise ValueError(f"{where}: {name} ({meaning}) must be an int >= {low}, got {value}")
    return value


def _check_args(args: SparseDeltaMemoryArgs) -> tuple[int, tuple[int, ...]]:
    """Re-validates the configuration (it may have changed since construction); returns
    (head_dim, product-key factor widths)."""
    if not isinstance(args, SparseDeltaMemoryArgs):
        raise TypeError(f"SparseDeltaMemory: args must be a SparseDeltaMemoryArgs, got {type(args).__name__}")
    args.validate()
    if args.dim == -1:
        raise ValueError("SparseDeltaMemoryArgs.dim must be set to the model width, got -1")
    return args.dim // args.num_heads, args.factor_dims()


class SparseDeltaMemory(MemoryStatsMixin, nn.Module):
    """Sparse Delta Memory layer. Parameter names and shapes are those of sparse-delta-memory
    2.0.0, so its state dicts load with ``strict=True`` for any factor list. The constructor
    calls :meth:`init_weights`, so the same seed gives the same parameters.

    ``layer.args`` may be changed between calls in the fields the forward reads (num_writes,
    num_reads, chunk_size, snapshot_quant, grad_bank_fp32, key_weighted_decay, cuda_graph,
    log_memory_norms): the next call uses them. A change of a field fixed at construction (dim,
    num_heads, slots_per_head, the factors, the activations, the optional submodules) raises
    UnsupportedConfigurationError naming it at the next call. Statistics: sdm.memory_stats."""

    def __init__(self, args: SparseDeltaMemoryArgs, layer_id: int = 0) -> None:
        super().__init__()
        self.head_dim, self.product_key_factors = _check_args(args)
        self.args = args
        self.layer_id = layer_id
        self.dim, self.num_heads, self.slots_per_head = args.dim, args.num_heads, args.slots_per_head
        self._fixed_args = _args_snapshot(args, _FIXED_FIELDS)
        self._built_product_key_factor_dims = copy.copy(args.product_key_factor_dims)
        self._args_seen = None
        self._args_id = None
        self.key_size_per_head = sum(self.product_key_factors)
        self.key_size = key_size = self.num_heads * self.key_size_per_head
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
            self.memory._sdm_memory_bank = True
        else:
            self.memory = None
        self.readings_norm = nn.LayerNorm(self.head_dim, eps=args.norm_eps) if args.normalize_readings else None
        self.read_act = make_activation(args.read_act, args.read_act_scale, "read_act")
        self.write_act = make_activation(args.write_act, args.write_act_scale, "write_act")
        self.memory_stats: dict[str, Tensor] = {}
        self._init_stats()
        self._stats_skip_warned = False
        self.graph_runner = LayerGraphs()
        self.init_weights()

    # ---- the args: effective values, changes after construction ----------------------------

    @property
    def num_writes(self) -> int:
        """Slots written per token and head: ``args.num_writes``, at most ``slots_per_head``."""
        return min(self.args.num_writes, self.slots_per_head)

    @property
    def num_reads(self) -> int:
        """Slots read per token and head: ``args.num_reads``, at most ``slots_per_head``."""
        return min(self.args.num_reads, self.slots_per_head)

    @property
    def chunk_size(self) -> int:
        """The op's chunk size: ``args.chunk_size``, or the op's default when it is None."""
        return self.args.effective_chunk_size

    @chunk_size.setter
    def chunk_size(self, value: int | None) -> None:
        self.args.chunk_size = value

    def _sync_args(self) -> None:
        """Checks ``self.args`` when it changed since the last call (a cheap comparison otherwise):
        UnsupportedConfigurationError naming a field fixed at construction that changed, then the
        args' own ValueError for a bad value of a field the forward reads."""
        args = self.args
        seen = _args_snapshot(args, _LIVE_FIELDS + _FIXED_FIELDS) if isinstance(args, SparseDeltaMemoryArgs) else None
        if seen is not None and seen == self._args_seen and id(args) == self._args_id:
            return
        if not isinstance(args, SparseDeltaMemoryArgs):
            raise TypeError(f"SparseDeltaMemory: args must be a SparseDeltaMemoryArgs, got {type(args).__name__}")
        for field, built, now in zip(_FIXED_FIELDS, self._fixed_args, seen[len(_LIVE_FIELDS):]):
            if now != built:
                raise UnsupportedConfigurationError(
                    f"SparseDeltaMemory: args.{field} was changed from {getattr(self, '_built_' + field, built)!r} to "
                    f"{getattr(args, field, None)!r} after the layer was built; "
                    f"the layer fixes {field} at construction (parameter shapes, submodules), so it cannot honour the "
                    f"change: build a new layer with the new args (fields a call honours: {', '.join(_LIVE_FIELDS[:8])})")
        args.validate()
        self._args_seen, self._args_id = seen, id(args)

    @torch.no_grad()
    def init_weights(self, init_std: float | None = None, factor: float = 1.0,
                     width_scaling: float | None = None) -> None:
        """Projections trunc-normal(0, sigma, +-3 sigma) with zero bias, sigma =
        (init_std or dim^-1/2) / factor; A ~ U(A_init_range) clamped >= 1e-4, stored as log;
        dt_bias = inv_softplus(dt), dt = exp(U(ln 1e-3, ln 1e-1)) clamped >= 1e-4; memory
        trunc-normal(0, sigma, +-3 sigma); BatchNorm and LayerNorm reset to (1, 0).
        ``width_scaling`` is accepted and unused, as in sparse-delta-memory 2.0.0 (its signature);
        an ``init_std`` of 0 or None means the default, as there."""
        sigma = (init_std or self.dim ** -0.5) / factor
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
                        device: torch.device | str | None = None,
                        initial_memory: Tensor | None = None) -> SDMLayerState:
        """The state of ``bsz`` sequences that have consumed ``seq_len`` tokens: a bank
        ``[bsz * H * slots_per_head, hd]`` in ``dtype`` (bfloat16 or float32; float64 on the CPU)
        holding a copy of ``initial_memory`` (e.g. the state's memory after a previous segment),
        else the learned memory replicated per sequence, else zeros."""
        bsz = _count("create_kv_cache", "bsz", bsz, 1, "sequences")
        seq_len = _count("create_kv_cache", "seq_len", seq_len, 0, "tokens already consumed")
        if dtype not in (*_ENGINE_DTYPES, torch.float64):
            raise TypeError(f"create_kv_cache: dtype must be torch.bfloat16 or torch.float32 (torch.float64 on the "
                            f"CPU), got {dtype}")
        if initial_memory is not None and not isinstance(initial_memory, Tensor):
            raise TypeError(f"create_kv_cache: initial_memory must be a tensor or None, got "
                            f"{type(initial_memory).__name__}")
        rows = bsz * self.num_heads * self.slots_per_head
        with torch.no_grad():
            if initial_memory is not None:
                if tuple(initial_memory.shape) != (rows, self.head_dim):
                    raise ValueError(f"create_kv_cache: initial_memory must be [{rows}, {self.head_dim}] "
                                     f"(bsz * num_heads * slots_per_head, head_dim), got {tuple(initial_memory.shape)}")
                bank = initial_memory.detach().to(device=device, dtype=dtype).clone()
            elif self.memory is not None:
                bank = self._local_memory("create_kv_cache").detach().to(device=device, dtype=dtype).repeat(bsz, 1)
            else:
                bank = torch.zeros(rows, self.head_dim, dtype=dtype, device=device)
        return SDMLayerState(bank, seq_len)

    def compute_gates(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The log-decay g and the write strength beta of x [B, T, D], each [B, T, H], in
        float32 (float64 for a float64 layer): the op uses them in float32."""
        gate_dtype = torch.promote_types(x.dtype, torch.float32)
        g = -torch.exp(self.A_log.to(gate_dtype)) * F.softplus(self.a_proj(x).to(gate_dtype)
                                                               + self.dt_bias.to(gate_dtype))
        return g, torch.sigmoid(self.b_proj(x).to(gate_dtype))

    def forward(self, x: Tensor, freqs_cis: Tensor | None = None, mask: Tensor | None = None,
                cache: SDMLayerState | None = None) -> tuple[Tensor, SDMLayerState]:
        """x [B, T, D], or [B*T, D] with ``freqs_cis`` whose rows give T; ``mask`` is accepted
        and unused (the layer is causal by construction). Returns ``(output, state)``: the
        output shaped like x and the state after the call (its ``memory`` is the final bank).
        With a ``cache`` the call starts from ``cache.memory`` and updates the cache, which is
        returned as the state; under autograd (training from a cache) the gradients reach the
        inputs, and the cache then holds the final bank, detached."""
        if cache is not None and not isinstance(cache, SDMLayerState):
            raise TypeError(f"SparseDeltaMemory: cache must be an sdm.SDMLayerState (from create_kv_cache or a previous "
                            f"call's state) or None, got {type(cache).__name__}")
        self._sync_args()
        x3 = self._as_batch_time(x, freqs_cis)
        B, T, _ = x3.shape
        rows = B * self.num_heads * self.slots_per_head
        if rows > MAX_BANK_ROWS:
            raise UnsupportedConfigurationError(
                f"SparseDeltaMemory: batch {B} needs a bank of {rows} rows (batch x num_heads x slots_per_head = "
                f"{B} x {self.num_heads} x {self.slots_per_head}); the op addresses at most {MAX_BANK_ROWS} rows "
                "(int32 row indices): split the batch")
        if cache is not None:
            self._check_cache(cache, x3, B)
        warn_if_untested(x3.device)
        record = self._stats_on(x3)
        keep = record or self.args.log_memory_norms or self.args.log_memory_access_stats
        bank = None if cache is None else cache.memory
        if not keep and self._graphed(x3):
            out, final = self.graph_runner.run(self._graph_key(x, x3, bank), self._graph_pointers(bank), x3, bank,
                                               lambda xs, b: self._compute(xs, b, tuple(x.shape))[:2])
            kept = None
        else:
            out, final, kept = self._compute(x3, bank, tuple(x.shape), keep=keep, record_initial=record)
        if cache is not None:
            state = cache.update_(final, T)
        else:
            state = SDMLayerState(final, T)
        if kept is not None:
            if cache is None:
                self._log_stats(final, kept["k_idx_abs"])
            if record:
                self._record_forward_stats(kept["g"], kept["beta"], kept["k_idx"], kept["k_val"], kept["q_idx"],
                                           kept["q_val"], None, final, out.view(B, T, -1))
        return out, state

    def _compute(self, x3: Tensor, bank: Tensor | None, out_shape: tuple[int, ...], keep: bool = False,
                 record_initial: bool = False) -> tuple[Tensor, Tensor, dict | None]:
        """The layer's computation on x3 [B, T, D] from ``bank`` (a cache's, updated in place
        without autograd), or from the initial bank when None: (output shaped ``out_shape``, final
        bank, the intermediates the statistics read when ``keep``). No host synchronisation
        (capturable), unless ``record_initial`` records the initial bank's norms."""
        B, T, _ = x3.shape
        H, hd, sph = self.num_heads, self.head_dim, self.slots_per_head
        g_tokens, beta_tokens = self.compute_gates(x3)
        v = self._split_heads(self.Wv_write(x3), hd)
        if bank is None:
            bank = self._initial_bank(B, self._bank_dtype(v, None), v.device)
            owned = True
        else:
            self._bank_dtype(v, SDMLayerState(bank))
            owned = False
        k_val, k_idx = product_key_topk(self._addressing(self.Wk_write(x3), self.key_bn), self.product_key_factors,
                                        self.num_writes)
        q_val, q_idx = product_key_topk(self._addressing(self.Wq_read(x3), self.query_bn), self.product_key_factors,
                                        self.num_reads)
        k_val = self.write_act(k_val)
        q_val = self.read_act(q_val)
        g = self._split_heads(g_tokens, 1)
        beta = self._split_heads(beta_tokens, 1)
        if self.args.key_weighted_decay:
            g = g * k_val
        offsets = (torch.arange(B * H, device=x3.device, dtype=torch.int32) * sph).view(-1, 1, 1)
        inputs = (k_idx.to(torch.int32) + offsets, k_val, v, beta, g, q_idx.to(torch.int32) + offsets, q_val)
        if record_initial and self.args.log_memory_norms and self._activation_stats is not None:
            self._record_bank_norms(bank, "")

        recording = functional.records_grad(*inputs[1:5], inputs[6])
        if not owned and T == 1 and not recording and bank.dtype != torch.float64:
            readings = functional.decode_step(bank, *inputs, slots_per_stream=sph, validate=False)
            final = bank
        else:
            readings, final = self._write_read(bank, T, inputs)

        readings = readings.to(v.dtype)
        if self.readings_norm is not None:
            readings = self.readings_norm(readings)
        readings = readings.view(B, H, T, hd).transpose(1, 2).reshape(B, T, H * hd)
        if self.Wog is not None:
            readings = torch.sigmoid(self.Wog(x3)) * readings
        out = self.Wo(readings.view(out_shape))
        # The outputs are never views: FSDP2 hooks the output of a module it wraps, and an
        # in-place op on a view of it (`out += x`) drops that hook and gives wrong gradients.
        # nn.Linear returns a 3-D input's product as a view of a 2-D one: copy it (B*T*D).
        if out._base is not None:
            out = out.clone()
        kept = None
        if keep:
            kept = dict(g=g_tokens, beta=beta_tokens, k_idx=k_idx, k_val=k_val, q_idx=q_idx, q_val=q_val,
                        k_idx_abs=inputs[0])
        return out, final, kept

    # ---- CUDA graphs (sdm.cuda_graph) and statistics ------------------------------------

    def _graphed(self, x3: Tensor) -> bool:
        """Whether this call replays (or captures) a CUDA graph: cuda_graph on, a CUDA input, no
        autograd recording, not suspended, not inside a capture, torch.compile or autocast, and no
        random activation in train mode (sdm.cuda_graph)."""
        if not (self.args.cuda_graph and x3.is_cuda) or cuda_graphs_suspended():
            return False
        if torch.is_grad_enabled() and (x3.requires_grad or any(p.requires_grad for p in self.parameters())):
            return False
        if torch.compiler.is_compiling() or torch.cuda.is_current_stream_capturing():
            return False
        if torch.is_autocast_enabled(x3.device.type):
            return False
        return not (self.training and isinstance(self.read_act, _RANDOM_ACTIVATIONS) or
                    self.training and isinstance(self.write_act, _RANDOM_ACTIVATIONS))

    def _graph_key(self, x: Tensor, x3: Tensor, bank: Tensor | None) -> tuple:
        bank_key = None if bank is None else (tuple(bank.shape), tuple(bank.stride()), bank.dtype)
        return (tuple(x.shape), tuple(x3.shape), x.dtype, x.device, bank_key, self.training,
                torch.is_inference_mode_enabled(), self.num_writes, self.num_reads, self.chunk_size,
                self.args.key_weighted_decay, torch.backends.cuda.matmul.allow_tf32,
                torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
                torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction, torch.get_float32_matmul_precision())

    def _graph_pointers(self, bank: Tensor | None) -> tuple:
        """The addresses a graph reads: the cache's bank, the parameters and buffers."""
        return (None if bank is None else bank.data_ptr(), tuple(p.data_ptr() for p in self.parameters()),
                tuple(b.data_ptr() for b in self.buffers()))

    def _stats_on(self, x3: Tensor) -> bool:
        """log_memory_access_stats records in eval mode only, outside a CUDA-graph capture (as
        2.0.0); one log line the first time it is skipped in train mode."""
        if not self.args.log_memory_access_stats or self._activation_stats is None:
            return False
        if self.training:
            if not self._stats_skip_warned:
                self._stats_skip_warned = True
                logger.warning("SparseDeltaMemory(layer_id=%s): log_memory_access_stats is collected in eval mode "
                               "only; nothing is recorded while training", self.layer_id)
            return False
        return not (x3.is_cuda and torch.cuda.is_current_stream_capturing())

    # ---- pieces of the forward ---------------------------------------------------------

    def _as_batch_time(self, x: Tensor, freqs_cis: Tensor | None) -> Tensor:
        if not isinstance(x, Tensor) or not x.is_floating_point():
            raise TypeError(f"SparseDeltaMemory: x must be a floating-point tensor, got "
                            f"{x.dtype if isinstance(x, Tensor) else type(x).__name__}")
        if x.dim() == 2:
            if freqs_cis is None:
                raise ValueError(f"SparseDeltaMemory: 2-D input x {tuple(x.shape)} ([B*T, D]) needs freqs_cis "
                                 "(its rows give T)")
            T = freqs_cis.shape[0]
            if T == 0 or x.shape[0] % T != 0:
                raise ValueError(f"SparseDeltaMemory: 2-D input x has {x.shape[0]} rows, not a multiple of "
                                 f"freqs_cis rows T = {T}")
            x = x.view(-1, T, x.shape[-1])
        elif x.dim() != 3:
            raise ValueError(f"SparseDeltaMemory: x must be [B, T, D] or [B*T, D], got shape {tuple(x.shape)}")
        weight = self.Wv_write.weight
        if x.dtype != weight.dtype and not torch.is_autocast_enabled(x.device.type):
            raise TypeError(f"SparseDeltaMemory: x is {x.dtype} but the layer's parameters are {weight.dtype}; pass x "
                            f"in {weight.dtype} or convert the layer (layer.to({x.dtype})), or run under torch.autocast")
        B, T, D = x.shape
        if D != self.dim:
            raise ValueError(f"SparseDeltaMemory: x's last dimension must be dim = {self.dim}, got x of shape "
                             f"{tuple(x.shape)}")
        if B == 0 or T == 0:
            raise ValueError(f"SparseDeltaMemory: x of shape {tuple(x.shape)} has no {'tokens' if T == 0 else 'sequences'}; "
                             "the layer needs B >= 1 sequences of T >= 1 tokens")
        return x

    def _bank_dtype(self, v: Tensor, cache: SDMLayerState | None) -> torch.dtype:
        """The bank's dtype: the cache's, the learned memory's, or the compute dtype (v's)."""
        dtype = cache.memory.dtype if cache is not None else self.memory.dtype if self.memory is not None else v.dtype
        where = "the cache's memory" if cache is not None else "the layer's memory" if self.memory is not None \
            else "the layer's projections"
        if dtype == torch.float64:
            if v.device.type != "cpu":
                raise TypeError(f"SparseDeltaMemory: a float64 layer runs on the CPU only (the float64 reference op); "
                                f"on {v.device} use float32 or bfloat16 (layer.float(), layer.bfloat16())")
        elif dtype not in _ENGINE_DTYPES:
            raise TypeError(f"SparseDeltaMemory: the bank would be {dtype} (the dtype of {where}); the layer supports "
                            "float32 and bfloat16 (and float64 on the CPU): use layer.float(), layer.bfloat16() or "
                            "layer.double()")
        return dtype

    def _split_heads(self, t: Tensor, width: int) -> Tensor:
        """[B, T, H * width] -> [B * H, T, width] (channel h * width + c)."""
        B, T, _ = t.shape
        return t.view(B, T, self.num_heads, width).transpose(1, 2).reshape(B * self.num_heads, T, width)

    def _addressing(self, raw: Tensor, norm: nn.BatchNorm1d | None) -> Tensor:
        if norm is not None:
            B, T, K = raw.shape
            raw = norm(raw.reshape(B * T, K)).view(B, T, K)
        return self._split_heads(raw, self.key_size_per_head)

    def _local_memory(self, where: str) -> Tensor:
        """The learned memory as a plain tensor; a bank still sharded by FSDP2 (a DTensor, as
        outside the forward of the module that fully_shard wraps) is refused by name."""
        if isinstance(self.memory, DTensor):
            raise RuntimeError(f"SparseDeltaMemory.{where}: the memory bank is sharded (an FSDP2 DTensor); call the "
                               "module fully_shard wrapped (its forward unshards the bank) or unshard it first "
                               "(module.unshard()); see docs/distributed.md")
        return self.memory

    def _initial_bank(self, B: int, dtype: torch.dtype, device: torch.device) -> Tensor:
        """The learned memory replicated over the batch, or zeros: [B * H * sph, hd]."""
        if self.memory is not None:
            return self._local_memory("forward").repeat(B, 1)
        return torch.zeros(B * self.num_heads * self.slots_per_head, self.head_dim, dtype=dtype, device=device)

    def _write_read(self, bank: Tensor, T: int, inputs: tuple[Tensor, ...]) -> tuple[Tensor, Tensor]:
        """(readings, final bank) of the call from ``bank``, which it may overwrite (a bank owned
        by the caller). Product keys give distinct in-range slots by construction, so the op's
        index check (a host sync on CUDA) is skipped: validate=False."""
        options = dict(slots_per_stream=self.slots_per_head, chunk_size=min(self.chunk_size, T), validate=False)
        if bank.dtype == torch.float64:
            return reference.write_read(bank, *inputs, **options)
        if functional.records_grad(bank, *inputs[1:5], inputs[6]):
            return functional.write_read(bank, *inputs, snapshot_quant=self.args.snapshot_quant,
                                         grad_bank_fp32=self.args.grad_bank_fp32, **options)
        return functional.write_read_(bank, *inputs, **options), bank

    def _check_cache(self, cache: SDMLayerState, x3: Tensor, B: int) -> None:
        rows = B * self.num_heads * self.slots_per_head
        if cache.memory.device != x3.device:
            raise ValueError(f"SparseDeltaMemory: the cache's memory is on {cache.memory.device}, but the layer computes "
                             f"on {x3.device} (x and the layer's parameters); build the cache there "
                             f"(create_kv_cache(..., device={str(x3.device)!r})) or move it "
                             f"(cache.memory = cache.memory.to({str(x3.device)!r}))")
        if tuple(cache.memory.shape) != (rows, self.head_dim):
            raise ValueError(f"SparseDeltaMemory: the cache's memory is {tuple(cache.memory.shape)}, expected "
                             f"({rows}, {self.head_dim}) for batch {B}; build it with create_kv_cache({B}, ...)")

    def _log_stats(self, final_bank: Tensor, k_idx: Tensor) -> None:
        if self.args.log_memory_norms:
            self.memory_stats["memory_norm"] = final_bank.detach().float().norm(dim=-1).mean()
        if self.args.log_memory_access_stats:
            rows = final_bank.shape[0]
            written = torch.zeros(rows, dtype=torch.bool, device=k_idx.device)
            written[k_idx.reshape(-1).long()] = True
            self.memory_stats["written_fraction"] = written.float().mean()
