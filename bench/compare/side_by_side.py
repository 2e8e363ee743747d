"""sdm side by side with sparse-delta-memory 2.0.0 (when it is importable) on one GPU, one process.

    python bench/compare/side_by_side.py --configs readme,big --slots product_key,heavy_reuse \
        --chunks 64,128 --parts core,f32,decode,layer --out results.jsonl

Both systems get the SAME tensors (bench/compare/slot_inputs.py: the C++ benchmarks' configs and
slot patterns), bf16 bank unless said otherwise; CUDA events; the systems interleaved round by
round (3 rounds of --iters calls each, after 2 warm-ups); rows print as JSON, `[median, min, max]`
ms, `speedup` = 2.0.0's time / sdm's (above 1: sdm faster). Without 2.0.0 only sdm is timed.

Parts:
  core    per config, slot pattern and chunk: the no-grad forward (sdm with validate off and on),
          the training step (saving forward + backward, gradients to bank, k_val, v, beta, g,
          q_val), its peak extra memory, and (C = 64) agreement of readings, final bank and every
          gradient between the two systems.
  f32     agreement with an f32 bank (both exact to f32 rounding).
  decode  8 streams of readme, eager and CUDA-graph replay.
  layer   2.0.0's README layer (dim 2048, 2 heads, 65536 slots, W = R = C = 64; B 2 x T 4096): its
          state dict loaded strict into sdm's layer, outputs compared, prefill and training step.
The product-key top-k alone: bench/topk.
bench/compare/run_gpu.sh runs this on a GPU machine with both systems built.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import traceback

import torch

from slot_inputs import CONFIGS, PATTERNS, distinct_fraction, make_inputs

OUT = None
OP_ARGS = ("k_idx", "k_val", "v", "beta", "g", "q_idx", "q_val")
LEAVES = ("memory", "k_val", "v", "beta", "g", "q_val")


def emit(**row):
    print(json.dumps(row), flush=True)
    if OUT:
        with open(OUT, "a") as f:
            f.write(json.dumps(row) + "\n")


def cuda_times(fn, iters):
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(); fn(); end.record(); torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return times


def interleaved(fns, iters, rounds=3, warmup=2):
    """{name: callable} -> {name: (median, min, max)} ms over rounds x iters, systems alternating."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    acc = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            acc[k] += cuda_times(fn, iters)
    return {k: (statistics.median(v), min(v), max(v)) for k, v in acc.items()}


def rel(a, b):
    """(relative Frobenius error, max abs error / max abs) of a against b."""
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item(), ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def speedup(r):
    return r["sdm2"][0] / r["sdm"][0] if "sdm2" in r else None


class Peer:
    """sparse-delta-memory 2.0.0's entry points, or None where it is not installed."""

    def __init__(self):
        try:
            import sparse_delta_memory.decode as decode
            import sparse_delta_memory.memory_ops as ops
        except ImportError:
            self.available = False
            return
        self.available = True
        self.write_read = ops.sdm_write_read
        self.decode_step = decode.sdm_decode_step


def core(name, pattern, C, iters, check, sdm, peer):
    c = CONFIGS[name]
    x = make_inputs(c, pattern)
    P, T, hd, sps = c["P"], c["T"], c["hd"], c["sps"]
    emit(kind="inputs", config=name, slots=pattern, chunk=C, distinct_write_fraction=round(distinct_fraction(x["k_idx"], C), 4))
    args = [x[k] for k in OP_ARGS]
    bank_sdm, bank_2 = x["memory"].clone(), x["memory"].clone()

    def fwd(validate):
        def run():
            with torch.no_grad():
                sdm.write_read_(bank_sdm, *args, slots_per_stream=sps, chunk_size=C, validate=validate)
        return run

    def fwd_2():
        with torch.no_grad():
            peer.write_read(bank_2, *args, chunk_size=C, num_memory_slots=sps, num_parallel=P)

    fns = {"sdm": fwd(False), "sdm_validate": fwd(True)}
    if peer.available:
        fns["sdm2"] = fwd_2
    r = interleaved(fns, iters)
    emit(kind="fwd_nograd", config=name, slots=pattern, chunk=C, sdm_ms=r["sdm"], sdm_validate_ms=r["sdm_validate"],
         sdm2_ms=r.get("sdm2"), speedup=speedup(r))

    leaves = {k: x[k].clone().requires_grad_() for k in LEAVES}
    dy = torch.randn(P, T, hd, device="cuda").to(x["memory"].dtype)

    def step_sdm():
        L = leaves
        readings, _ = sdm.write_read(L["memory"], x["k_idx"], L["k_val"], L["v"], L["beta"], L["g"], x["q_idx"],
                                     L["q_val"], slots_per_stream=sps, chunk_size=C, validate=False)
        readings.backward(dy)

    def step_2():
        L = leaves
        readings = peer.write_read(L["memory"].clone(), x["k_idx"], L["k_val"], L["v"], L["beta"], L["g"], x["q_idx"],
                                   L["q_val"], chunk_size=C, num_memory_slots=sps, num_parallel=P)
        readings.backward(dy.view(P * T, hd))

    def zero():
        for t in leaves.values():
            t.grad = None

    fns = {"sdm": lambda: (zero(), step_sdm())}
    if peer.available:
        fns["sdm2"] = lambda: (zero(), step_2())
    r = interleaved(fns, max(3, iters // 2))
    extra = {}
    for k, fn in fns.items():
        zero(); torch.cuda.synchronize()
        base = torch.cuda.memory_allocated(); torch.cuda.reset_peak_memory_stats()
        fn(); torch.cuda.synchronize()
        extra[k] = round((torch.cuda.max_memory_allocated() - base) / 1e9, 3)
    emit(kind="train_step", config=name, slots=pattern, chunk=C, sdm_ms=r["sdm"], sdm2_ms=r.get("sdm2"),
         speedup=speedup(r), extra_gb_sdm=extra["sdm"], extra_gb_sdm2=extra.get("sdm2"))

    if check and peer.available:
        m1, m2 = x["memory"].clone(), x["memory"].clone()
        with torch.no_grad():
            y1 = sdm.write_read_(m1, *args, slots_per_stream=sps, chunk_size=C, validate=True)
            y2 = peer.write_read(m2, *args, chunk_size=C, num_memory_slots=sps, num_parallel=P)
        zero(); step_sdm(); g1 = {k: t.grad.clone() for k, t in leaves.items()}
        zero(); step_2(); g2 = {k: t.grad.clone() for k, t in leaves.items()}
        emit(kind="agreement", config=name, slots=pattern, chunk=C, bank="bf16", readings=rel(y1.view(-1, hd), y2.view(-1, hd)),
             final_bank=rel(m1, m2), grads={k: rel(g1[k], g2[k]) for k in g1})


def f32_agreement(sdm, peer):
    """An f32 bank: both systems agree to f32 rounding."""
    if not peer.available:
        return
    c = dict(CONFIGS["readme"], T=2048)
    x = make_inputs(c, "product_key", bank_dtype=torch.float32, seed=5)
    sps, P, hd = c["sps"], c["P"], c["hd"]
    args = [x[k] for k in OP_ARGS]
    m1, m2 = x["memory"].clone(), x["memory"].clone()
    with torch.no_grad():
        y1 = sdm.write_read_(m1, *args, slots_per_stream=sps, chunk_size=64)
        y2 = peer.write_read(m2, *args, chunk_size=64, num_memory_slots=sps, num_parallel=P)
    L = {k: x[k].clone().requires_grad_() for k in LEAVES}
    dy = torch.randn(P, c["T"], hd, device="cuda")
    r1, _ = sdm.write_read(L["memory"], x["k_idx"], L["k_val"], L["v"], L["beta"], L["g"], x["q_idx"], L["q_val"],
                           slots_per_stream=sps, chunk_size=64)
    r1.backward(dy)
    g1 = {k: t.grad.clone() for k, t in L.items()}
    for t in L.values():
        t.grad = None
    r2 = peer.write_read(L["memory"].clone(), x["k_idx"], L["k_val"], L["v"], L["beta"], L["g"], x["q_idx"], L["q_val"],
                         chunk_size=64, num_memory_slots=sps, num_parallel=P)
    r2.backward(dy.view(-1, hd))
    g2 = {k: t.grad.clone() for k, t in L.items()}
    emit(kind="agreement", config="readme_T2048", chunk=64, bank="f32", readings=rel(y1.view(-1, hd), y2),
         final_bank=rel(m1, m2), grads={k: rel(g1[k], g2[k]) for k in g1})


def graph_of(fn):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def decode(sdm, peer, P=8):
    c = CONFIGS["readme"]
    sps = c["sps"]
    x = make_inputs(dict(c, P=P, T=1), "product_key")
    one = {k: (t[:, 0] if t.dim() == 3 else t) for k, t in x.items() if k != "memory"}
    a = [one[k] for k in OP_ARGS]
    m1, m2 = x["memory"].clone(), x["memory"].clone()
    fns = {"sdm": lambda: sdm.decode_step(m1, *a, slots_per_stream=sps, validate=False)}
    if peer.available:
        fns["sdm2"] = lambda: peer.decode_step(m2, *a)
    with torch.no_grad():
        if peer.available:
            emit(kind="agreement", config=f"decode{P}", bank="bf16", readings=rel(fns["sdm"]().float(), fns["sdm2"]().float()))
        r = interleaved(fns, 100, warmup=5)
        emit(kind="decode_eager", config=f"decode{P}", sdm_us=[t * 1e3 for t in r["sdm"]],
             sdm2_us=[t * 1e3 for t in r["sdm2"]] if "sdm2" in r else None)
        graphs = {}
        for k, fn in fns.items():
            try:
                graphs[k] = graph_of(fn)
            except Exception as ex:  # a system that cannot be captured is reported, not fatal
                emit(kind="decode_graph_error", system=k, error=repr(ex)[:300])
        r = interleaved({k: g.replay for k, g in graphs.items()}, 200, warmup=10)
        emit(kind="decode_graph", config=f"decode{P}", **{f"{k}_us": [t * 1e3 for t in v] for k, v in r.items()})


def layer(sdm, peer, B=2, T=4096):
    """2.0.0's README layer: dim 2048, 2 heads, 65536 slots, W = R = C = 64."""
    kw = dict(dim=2048, num_heads=2, slots_per_head=65536, num_writes=64, num_reads=64, chunk_size=64)
    torch.manual_seed(0)
    mine = sdm.SparseDeltaMemory(sdm.SparseDeltaMemoryArgs(**kw)).cuda()
    layers = {"sdm": mine}
    if peer.available:
        from sparse_delta_memory import SparseDeltaMemory, SparseDeltaMemoryArgs
        theirs = SparseDeltaMemory(SparseDeltaMemoryArgs(**kw), layer_id=0).cuda()
        theirs.init_weights()
        mine.load_state_dict(theirs.state_dict(), strict=True)
        layers["sdm2"] = theirs
        x = torch.randn(B, 512, 2048, device="cuda")
        with torch.no_grad():
            emit(kind="agreement", config="layer_f32_T512", readings=rel(mine(x)[0], theirs(x)[0]))
    layers = {k: m.to(torch.bfloat16) for k, m in layers.items()}
    xb = torch.randn(B, T, 2048, device="cuda", dtype=torch.bfloat16)
    xg = xb.clone().requires_grad_()

    def prefill(m):
        def run():
            with torch.no_grad():
                m(xb)
        return run

    def train(m):
        def run():
            m.zero_grad(set_to_none=True); xg.grad = None
            m(xg)[0].float().square().mean().backward()
        return run

    r = interleaved({k: prefill(m) for k, m in layers.items()}, 5)
    emit(kind="layer_prefill", B=B, T=T, sdm_ms=r["sdm"], sdm2_ms=r.get("sdm2"), speedup=speedup(r))
    r = interleaved({k: train(m) for k, m in layers.items()}, 4)
    emit(kind="layer_train", B=B, T=T, sdm_ms=r["sdm"], sdm2_ms=r.get("sdm2"), speedup=speedup(r))


def main():
    global OUT
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--out", help="append the JSON rows to this file")
    ap.add_argument("--configs", default="small,readme,big,flagship", help=f"of {', '.join(CONFIGS)}")
    ap.add_argument("--slots", default="product_key,heavy_reuse", help=f"of {', '.join(PATTERNS)}")
    ap.add_argument("--chunks", default="64")
    ap.add_argument("--iters", type=int, default=6, help="timed calls per round (3 rounds)")
    ap.add_argument("--parts", default="core,f32,decode,layer")
    a = ap.parse_args()
    configs, patterns = a.configs.split(","), a.slots.split(",")
    for v, known, what in ((configs, CONFIGS, "--configs"), (patterns, PATTERNS, "--slots")):
        bad = [s for s in v if s not in known]
        if bad:
            ap.error(f"{what}: unknown {', '.join(bad)}; known: {', '.join(known)}")
    if not torch.cuda.is_available():
        ap.error("needs a CUDA device")
    OUT = a.out
    import sdm
    peer = Peer()
    emit(kind="env", gpu=torch.cuda.get_device_name(), torch=torch.__version__, sdm_file=sdm.__file__,
         sdm2=peer.available)
    parts = a.parts.split(",")
    t0 = time.time()
    if "core" in parts:
        for name in configs:
            for pattern in patterns:
                for C in (int(c) for c in a.chunks.split(",")):
                    try:
                        core(name, pattern, C, a.iters, C == 64, sdm, peer)
                    except Exception:
                        emit(kind="error", part="core", config=name, slots=pattern, chunk=C, tb=traceback.format_exc()[-1500:])
                    torch.cuda.empty_cache()
                    print(f"-- {name} {pattern} C={C} done at {time.time() - t0:.0f}s", flush=True)
    for part, fn in (("f32", f32_agreement), ("decode", decode), ("layer", layer)):
        if part in parts:
            try:
                fn(sdm, peer)
            except Exception:
                emit(kind="error", part=part, tb=traceback.format_exc()[-1500:])
            torch.cuda.empty_cache()
            print(f"-- {part} done at {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
