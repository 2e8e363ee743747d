"""CUDA graphs of the layer's inference calls (``SparseDeltaMemoryArgs.cuda_graph``), with
sparse-delta-memory 2.0.0's controls ``reset_cuda_graphs()`` and ``suspend_cuda_graphs()``.

A layer built with ``cuda_graph=True`` replays every call that autograd does not record (prefill
and decode with a cache, and inference without one) from a CUDA graph of its whole forward:
projections, product-key top-k, gates, the op (``sdm.write_read_`` / ``sdm.decode_step``, capture-safe:
the layer passes validate=False) and the output projection. Contract:

  * Graphs are keyed by the call's shape (x's shape, dtype and device; the cache bank's shape,
    dtype and strides, or none), the train / eval and inference modes, the settings that change
    the computation (``num_writes``, ``num_reads``, ``chunk_size``, ``key_weighted_decay``) and the
    matmul precision flags. The first call of a key runs eager (it warms up) and captures its
    graph; the next calls of that key replay it: the same kernels on the same inputs, so the
    output and the bank are bitwise equal to eager (SPEC Z.4).
  * The graph reads the cache's bank and the layer's parameters where they were at capture: a
    call with another bank tensor (a new cache, e.g. per prompt) or after a parameter moved
    (``.to()``, ``load_state_dict(assign=True)``) captures that key again. In-place updates of
    the parameters (an optimizer step, ``load_state_dict``) are seen by the replays.
  * With a cache, the replay updates the cache's bank in place, as eager does. The output, and
    without a cache the final bank, are copied out of the graph's memory: nothing returned is
    overwritten by a later replay.
  * At most ``MAX_GRAPHS_PER_LAYER`` keys per layer; a call of a further key runs eager (one
    warning per layer). ``reset_cuda_graphs()`` drops every layer's graphs (the next call of each
    key captures again); inside ``suspend_cuda_graphs()`` every call runs eager.
  * Eager, always: calls that autograd records (training: sparse-delta-memory 2.0.0 graphs
    those, sdm does not; docs/layer.md), calls inside a CUDA-graph capture of the caller's own
    (e.g. a whole-step capture), under ``torch.compile`` tracing, under autocast, with the
    statistics options on, in train mode with a random activation (Dropout, RReLU), and calls
    on CPU tensors.
  * The graphs of a layer share one memory pool; a layer's calls must not run concurrently
    from several threads (as for any cache, docs/layer.md "Threads").
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections import Counter
from typing import Callable, Iterator

import torch
from torch import Tensor

logger = logging.getLogger(__name__)

MAX_GRAPHS_PER_LAYER = 16
_suspended = 0
_all_graphs: weakref.WeakSet[LayerGraphs] = weakref.WeakSet()


def reset_cuda_graphs() -> None:
    """Drops every captured graph of every layer: the next call of each key captures again
    (e.g. between steps after a permanent change of shapes)."""
    for graphs in list(_all_graphs):
        graphs.clear()


@contextlib.contextmanager
def suspend_cuda_graphs() -> Iterator[None]:
    """Every layer call inside the block runs eager (no capture, no replay), e.g. a probe at
    another shape. Nestable."""
    global _suspended
    _suspended += 1
    try:
        yield
    finally:
        _suspended -= 1


def cuda_graphs_suspended() -> bool:
    return _suspended > 0


class _Entry:
    """One captured key: the graph, its static input and outputs, and the addresses it reads."""

    def __init__(self, graph: torch.cuda.CUDAGraph, static_x: Tensor, outputs: tuple[Tensor, Tensor],
                 pointers: tuple) -> None:
        self.graph, self.static_x, self.outputs, self.pointers = graph, static_x, outputs, pointers


class LayerGraphs:
    """The CUDA graphs of one layer, by key. ``stats`` counts captures, replays and eager calls
    (``eager_full``: the key limit was reached)."""

    def __init__(self) -> None:
        self.entries: dict[tuple, _Entry] = {}
        self.failed: set[tuple] = set()
        self.pool = None
        self.stats: Counter[str] = Counter()
        self._warned = False
        _all_graphs.add(self)

    def __deepcopy__(self, memo: dict) -> LayerGraphs:  # graphs are not copied: the copy captures its own
        return LayerGraphs()

    def __reduce__(self):  # nor pickled (torch.save of a whole layer)
        return LayerGraphs, ()

    def clear(self) -> None:
        self.entries.clear()
        self.failed.clear()
        self.pool = None

    def run(self, key: tuple, pointers: tuple, x: Tensor, bank: Tensor | None,
            body: Callable[[Tensor, Tensor | None], tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
        """``body(x, bank)`` -> (output, final bank): replayed from the key's graph, or run eager
        and then captured (a new key, or a key whose bank / parameters moved). With a ``bank``
        (a cache's), body updates it in place and returns it as the final bank."""
        entry = self.entries.get(key)
        if entry is not None and entry.pointers != pointers:
            del self.entries[key]
            entry = None
            self.stats["recapture"] += 1
        if entry is None:
            result = body(x, bank)   # eager: the call's result, and the warm-up of its kernels
            if len(self.entries) >= MAX_GRAPHS_PER_LAYER:
                self.stats["eager_full"] += 1
                if not self._warned:
                    self._warned = True
                    logger.warning("SparseDeltaMemory(cuda_graph=True): %d call shapes are captured; calls of further "
                                   "shapes run eager (sdm.reset_cuda_graphs() drops the graphs)", MAX_GRAPHS_PER_LAYER)
                return result
            if key in self.failed:
                self.stats["eager_capture_failed"] += 1
                return result
            try:
                self.entries[key] = self._capture(x, bank, body, pointers)
            except Exception as exc:  # noqa: BLE001 - a capture that fails leaves this key eager
                self.failed.add(key)
                self.stats["eager_capture_failed"] += 1
                logger.warning("SparseDeltaMemory(cuda_graph=True): capturing a call failed (%s: %s); calls of "
                               "this shape run eager until sdm.reset_cuda_graphs()", type(exc).__name__,
                               str(exc).splitlines()[0][:300] if str(exc) else "")
            else:
                self.stats["capture"] += 1
            return result
        entry.static_x.copy_(x)
        entry.graph.replay()
        self.stats["replay"] += 1
        out, final = entry.outputs
        return out.clone(), (bank if bank is not None else final.clone())

    def _capture(self, x: Tensor, bank: Tensor | None, body: Callable, pointers: tuple) -> _Entry:
        # Capture records the kernels without running them: the bank is not touched here.
        static_x = x.detach().clone()
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.current_stream()
        try:
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                outputs = body(static_x, bank)
        finally:
            torch.cuda.set_stream(stream)  # a failed capture_end skips torch.cuda.graph's stream restore
        return _Entry(graph, static_x, outputs, pointers)
