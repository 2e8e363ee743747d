"""Product-key top-k, sdm's CUDA kernels side by side with sparse-delta-memory 2.0.0's.

sdm's kernels come through the C entry point of bench/topk/topk_capi.cpp (the shared library
`libsdm_topk_capi.so` that the CUDA build makes next to sdm_gpu_topk_bench), so no torch
extension is needed. 2.0.0 runs when `sparse_delta_memory` is importable (it is not a dependency
of sdm); without it only sdm is timed. Both get the SAME input tensors in ONE process; rounds
interleave the systems, CUDA events around --batch calls, median of --reps; the backward of each system gets the same
random gradient of the values and its own forward's slots. Selections are compared per row.

A call from Python costs each system some microseconds of host work (sdm's ctypes entry point and
its host-side plan, 2.0.0's extension call); where a kernel is shorter than that (the backward:
about 16 us at 2x256 k 64 on an H100), back-to-back calls time the host, not the kernel. --graphs
captures each system's --batch calls once into a CUDA graph and times its replays instead, so a
sample is the kernels' time alone (with graph launch gaps, the same for both systems).

    python bench/topk/compare_2_0_0.py --lib build-cuda/bench/topk/libsdm_topk_capi.so [--reps 30] [--batch 10] [--graphs] [--json out.jsonl]

Prints a markdown table (ms; speedup = 2.0.0 / sdm) and, with --json, one JSON row per shape.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics

import torch

SHAPES = [  # (factor widths, k, rows): the layer's shapes (docs/performance.md, "Product-key top-k")
    ((256, 256), 64, 16384),
    ((256, 256), 128, 32768),
    ((512, 512), 64, 16384),
    ((64, 64, 64), 64, 16384),
]
DTYPE_CODE = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}


class SdmTopk:
    """sdm's forward / backward launchers through libsdm_topk_capi.so, on torch's current stream."""

    def __init__(self, path: str):
        self.lib = ctypes.CDLL(path)
        i64, vp, i32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
        self.lib.sdm_topk_forward.argtypes = [vp, i32, i64, i64, vp, i32, i64, vp, vp, vp, ctypes.c_char_p, i32]
        self.lib.sdm_topk_backward.argtypes = [vp, vp, i32, i64, i64, vp, i32, vp, vp, ctypes.c_char_p, i32]
        self.error = ctypes.create_string_buffer(512)

    def _check(self, rc: int) -> None:
        if rc != 0:
            raise RuntimeError(self.error.value.decode())

    def forward(self, raw: torch.Tensor, dims: tuple[int, ...], k: int):
        kk = min(k, _prod(dims))
        values = torch.empty(raw.shape[0], kk, device=raw.device, dtype=raw.dtype)
        slots = torch.empty(raw.shape[0], kk, device=raw.device, dtype=torch.int64)
        d = (ctypes.c_int64 * len(dims))(*dims)
        self._check(self.lib.sdm_topk_forward(raw.data_ptr(), DTYPE_CODE[raw.dtype], raw.shape[0], raw.stride(0), d,
                                              len(dims), k, values.data_ptr(), slots.data_ptr(),
                                              torch.cuda.current_stream().cuda_stream, self.error, 512))
        return values, slots

    def backward(self, slots: torch.Tensor, grad: torch.Tensor, dims: tuple[int, ...]):
        out = torch.empty(slots.shape[0], sum(dims), device=slots.device, dtype=grad.dtype)
        d = (ctypes.c_int64 * len(dims))(*dims)
        self._check(self.lib.sdm_topk_backward(slots.data_ptr(), grad.data_ptr(), DTYPE_CODE[grad.dtype], slots.shape[0],
                                               slots.shape[1], d, len(dims), out.data_ptr(),
                                               torch.cuda.current_stream().cuda_stream, self.error, 512))
        return out


def _prod(dims) -> int:
    p = 1
    for d in dims:
        p *= d
    return p


def load_sdm2():
    """2.0.0's extension module of its two- to four-factor kernels (topk_fwd / topk_bwd), or None."""
    try:
        from sparse_delta_memory.cuda.product_key_topk_cuda import _module
    except ImportError:
        return None
    return _module()


def captured(call, batch: int):
    """`batch` calls of `call` captured into one CUDA graph (after a warm-up call on the capturing
    side stream, as torch asks); returns the graph's replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(batch):
            call()
    return graph.replay


def back_to_back(call, batch: int):
    """`batch` calls of `call`, one after the other."""
    def run():
        for _ in range(batch):
            call()
    return run


def interleaved(calls: dict, reps: int, batch: int, graphs: bool = False) -> dict:
    """Median ms of each call, the calls taking turns round by round (2 warm-up rounds); each timed
    sample is `batch` calls back to back, so that host launch overhead overlaps the kernels (with
    `graphs`, one replay of the batch captured in a CUDA graph: no host work between kernels)."""
    times = {name: [] for name in calls}
    runs = {name: (captured if graphs else back_to_back)(call, batch) for name, call in calls.items()}
    for rep in range(reps + 2):
        for name in calls:
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            runs[name]()
            stop.record()
            stop.synchronize()
            if rep >= 2:
                times[name].append(start.elapsed_time(stop) / batch)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lib", required=True, help="path of libsdm_topk_capi.so")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=10, help="calls per timed sample")
    parser.add_argument("--graphs", action="store_true", help="time replays of CUDA graphs of --batch calls")
    parser.add_argument("--json", help="append one JSON row per shape to this file")
    args = parser.parse_args()
    sdm = SdmTopk(args.lib)
    sdm2 = load_sdm2()
    torch.manual_seed(0)
    head = "| factors | k | rows | dtype | sdm fwd ms | sdm bwd ms |"
    if sdm2 is not None:
        head += " 2.0.0 fwd ms | 2.0.0 bwd ms | fwd speedup | bwd speedup | rows same |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for dims, k, rows in SHAPES:
        for dtype in (torch.bfloat16, torch.float32):
            raw = torch.randn(rows, sum(dims), device="cuda").to(dtype)
            values, slots = sdm.forward(raw, dims, k)
            grad = torch.randn(values.shape, device="cuda").to(dtype)
            forward = {"sdm": lambda: sdm.forward(raw, dims, k)}
            backward = {"sdm": lambda: sdm.backward(slots, grad, dims)}
            row = {"factors": list(dims), "k": k, "rows": rows, "dtype": str(dtype).removeprefix("torch.")}
            if sdm2 is not None:
                val2, lin2 = sdm2.topk_fwd(raw, dims, k)
                row["rows_same"] = (slots == lin2.long()).all(-1).float().mean().item()
                bits = torch.int32 if dtype == torch.float32 else torch.int16
                row["values_same"] = (values.view(bits) == val2.view(bits)).all(-1).float().mean().item()
                forward["sdm2"] = lambda: sdm2.topk_fwd(raw, dims, k)
                backward["sdm2"] = lambda: sdm2.topk_bwd(lin2, grad, dims)
            fwd = interleaved(forward, args.reps, args.batch, args.graphs)
            bwd = interleaved(backward, args.reps, args.batch, args.graphs)
            row.update(timing="graphs" if args.graphs else "calls", sdm_fwd_ms=fwd["sdm"], sdm_bwd_ms=bwd["sdm"])
            line = f"| {'x'.join(map(str, dims))} | {k} | {rows} | {row['dtype']} | {fwd['sdm']:.4f} | {bwd['sdm']:.4f} |"
            if sdm2 is not None:
                row.update(sdm2_fwd_ms=fwd["sdm2"], sdm2_bwd_ms=bwd["sdm2"])
                line += (f" {fwd['sdm2']:.4f} | {bwd['sdm2']:.4f} | {fwd['sdm2'] / fwd['sdm']:.2f}x |"
                         f" {bwd['sdm2'] / bwd['sdm']:.2f}x | {row['rows_same']:.4f} (values {row['values_same']:.4f}) |")
            print(line, flush=True)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
