"""The layer's decode step (batch 8, one token per sequence per step, with the cache), sdm eager vs
sdm cuda_graph=True, side by side with sparse-delta-memory 2.0.0 eager and 2.0.0 cuda_graph=True
(issue 26 item 6), in one process on one GPU with the same weights.

    python3 bench/cuda/layer_decode.py [--configs small,readme] [--steps N] [--rounds N] [--json FILE]
    python3 bench/cuda/layer_decode.py --device cpu --configs tiny    # sdm eager only, a smoke test

The layers: 2.0.0's layer built and initialised (init_weights), its state dict loaded strict into
sdm's layers (as the side-by-side bench in shared/peer_bench does), all converted to bfloat16, a
bfloat16 cache per variant from create_kv_cache. Each variant prefills the same --prefill tokens,
then decodes the same token sequence; everything runs under torch.no_grad() in eval mode.

Variants, alternated round by round (the order rotated each round), each round --steps decode
steps timed with CUDA events around the loop (so it counts the host's per-call overhead whenever
that exceeds the GPU time of a step); ms per step, median / min / max over --rounds rounds:
  sdm eager                 cuda_graph=False
  sdm cuda_graph            cuda_graph=True: the first call of a shape runs eager and captures, the
                            next replay the layer's whole forward (sdm/cuda_graph.py); the output
                            is copied out of the graph per call
  2.0.0 eager               cuda_graph=False
  2.0.0 cuda_graph          cuda_graph=True. 2.0.0 graphs only calls that may need a backward and
                            start from the layer's own bank (layer._graphed_write_read): a no-grad
                            decode with a cache runs its eager path, so expect the eager time
  2.0.0 hand capture        not a 2.0.0 mode: the benchmark captures 2.0.0's eager decode call
                            (layer(x, cache=...)) in one torch.cuda.CUDAGraph itself, after 3
                            warm-up calls on a side stream, and replays it (static input copied
                            in, no output copy): what a 2.0.0 user can get by hand
Checks first, from the same prefill and the same --check-steps tokens: sdm cuda_graph == sdm eager
bitwise (prefill output, every decode output, the final bank), 2.0.0's two graph variants == 2.0.0
eager bitwise, and sdm vs 2.0.0 (max abs difference of the outputs and of the final bank, with
the reference's max abs for scale; bf16 product-key ties may select other slots for a few tokens).
Without sparse_delta_memory importable (or on the CPU, where 2.0.0 does not run) only sdm's
variants run, and the output says so. Prints markdown tables; writes JSON to --json, else to
$OUT/layer_decode.json when OUT is set.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import traceback

import torch

import sdm

# The layer configs: readme is 2.0.0's README example (dim 2048, 2 heads, 65536 slots, W = R = C = 64);
# small is a launch-bound one; tiny is the CPU smoke test.
CONFIGS = {
    "readme": dict(dim=2048, num_heads=2, slots_per_head=65536, num_writes=64, num_reads=64, chunk_size=64),
    "small": dict(dim=512, num_heads=2, slots_per_head=16384, num_writes=32, num_reads=32, chunk_size=64),
    "tiny": dict(dim=64, num_heads=2, slots_per_head=1024, num_writes=16, num_reads=16, chunk_size=16),
}
VARIANTS = ("sdm eager", "sdm cuda_graph", "2.0.0 eager", "2.0.0 cuda_graph", "2.0.0 hand capture")


def load_sdm2():
    """sparse_delta_memory (2.0.0) or the reason it is not importable."""
    try:
        import sparse_delta_memory as sdm2
        return sdm2, f"sparse_delta_memory {getattr(sdm2, '__version__', '?')} from {os.path.dirname(sdm2.__file__)}"
    except Exception as exc:  # noqa: BLE001 - any failure: run sdm's variants only
        return None, f"not importable ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})"


def runs_on(variant: str, dev: str) -> bool:
    """Whether a variant is timed on ``dev``: all on CUDA; on the CPU sdm eager only."""
    return dev == "cuda" or variant == "sdm eager"


def sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


class Variant:
    """One system's layer and cache; ``step(x)`` decodes one token [B, 1, D] and returns the output."""

    def __init__(self, name: str, layer, batch: int, dev: str):
        self.name, self.layer, self.batch, self.dev = name, layer, batch, dev
        self.cache = None
        self.graph = None

    def prefill(self, x: torch.Tensor) -> torch.Tensor:
        self.cache = self.layer.create_kv_cache(self.batch, 0, torch.bfloat16, self.dev)
        out, _ = self.layer(x, cache=self.cache)
        return out

    def step(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.layer(x, cache=self.cache)
        return out


class HandCaptured(Variant):
    """2.0.0's eager decode call captured by the benchmark in one CUDA graph."""

    def capture(self, x: torch.Tensor) -> None:
        saved = self.cache.memory.clone()   # the warm-up advances the bank: put it back after capture
        self.static_x = x.clone()
        stream = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(stream)
        try:
            with torch.cuda.stream(side):
                for _ in range(3):
                    self.layer(self.static_x, cache=self.cache)
            stream.wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.static_out, _ = self.layer(self.static_x, cache=self.cache)
        finally:
            torch.cuda.set_stream(stream)   # a failed capture_end skips torch.cuda.graph's stream restore
            self.cache.memory.copy_(saved)
            torch.cuda.synchronize()
        self.graph = graph

    def step(self, x: torch.Tensor) -> torch.Tensor:
        self.static_x.copy_(x)
        self.graph.replay()
        return self.static_out


def build(cfg: dict, dev: str, sdm2) -> tuple[dict, str]:
    """The layers by variant name, all with the same weights, and how they were made."""
    torch.manual_seed(0)
    layers = {}
    if sdm2 is not None:
        ref = sdm2.SparseDeltaMemory(sdm2.SparseDeltaMemoryArgs(**cfg), layer_id=0)
        ref.init_weights()
        state = ref.state_dict()
        layers["2.0.0 eager"] = ref
        for name in ("2.0.0 cuda_graph", "2.0.0 hand capture"):
            other = sdm2.SparseDeltaMemory(sdm2.SparseDeltaMemoryArgs(**cfg, cuda_graph=name.endswith("cuda_graph")),
                                           layer_id=0)
            other.load_state_dict(state, strict=True)
            layers[name] = other
        made = f"2.0.0's layer (init_weights), its state dict ({len(state)} tensors) loaded strict into sdm's"
    else:
        state = sdm.SparseDeltaMemory(sdm.SparseDeltaMemoryArgs(**cfg)).state_dict()
        made = f"sdm's layer (seed 0), its state dict ({len(state)} tensors) loaded strict into the graph variant"
    for name in ("sdm eager", "sdm cuda_graph"):
        args = sdm.SparseDeltaMemoryArgs(**cfg, cuda_graph=name.endswith("cuda_graph"))
        try:   # built on the device: its init_weights takes seconds on the CPU at the readme size
            with torch.device(dev):
                layer = sdm.SparseDeltaMemory(args)
        except Exception as exc:  # noqa: BLE001 - then on the CPU, as 2.0.0's
            print(f"layer_decode: building sdm's layer under torch.device({dev!r}) failed ({type(exc).__name__}: "
                  f"{str(exc)[:200]}); built on the CPU")
            layer = sdm.SparseDeltaMemory(args)
        layer.load_state_dict(state, strict=True)
        layers[name] = layer
    for name, layer in layers.items():
        layers[name] = layer.to(device=dev, dtype=torch.bfloat16).eval()
    return layers, made


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


def check(variants: dict, x_prefill: torch.Tensor, tokens: torch.Tensor, steps: int, errors: dict) -> dict:
    """Every variant prefills and decodes ``steps`` tokens from the same start; the comparisons.
    A variant other than sdm eager that fails here (2.0.0's extensions, a hand capture that is
    not capturable) is noted in ``errors`` and dropped: the others are still checked and timed."""
    outs = {}
    for name, var in list(variants.items()):
        try:
            seq = [var.prefill(x_prefill).clone()]
            if isinstance(var, HandCaptured):
                var.capture(tokens[0])
            for s in range(steps):
                seq.append(var.step(tokens[s % len(tokens)]).clone())
            outs[name] = (seq, var.cache.memory.clone())
        except Exception:  # noqa: BLE001
            if name == "sdm eager":
                raise
            errors[name] = traceback.format_exc()[-1500:]
            print(f"layer_decode: {name} failed, dropped: {errors[name].strip().splitlines()[-1][:300]}", flush=True)
            del variants[name]
            var.cache = None
    sync(variants["sdm eager"].dev)
    res = {}

    def same(a: str, b: str) -> dict:
        (sa, ma), (sb, mb) = outs[a], outs[b]
        bad = [i for i, (u, v) in enumerate(zip(sa, sb)) if not torch.equal(u, v)]
        return dict(bitwise_equal=not bad and torch.equal(ma, mb), outputs_differing=len(bad),
                    bank_equal=torch.equal(ma, mb), max_abs_diff=max(max_abs(u, v) for u, v in zip(sa, sb)))

    if "sdm cuda_graph" in outs:
        res["sdm cuda_graph vs sdm eager"] = same("sdm cuda_graph", "sdm eager")
    for name in ("2.0.0 cuda_graph", "2.0.0 hand capture"):
        if name in outs and "2.0.0 eager" in outs:
            res[f"{name} vs 2.0.0 eager"] = same(name, "2.0.0 eager")
    if "2.0.0 eager" in outs:
        (s1, m1), (s2, m2) = outs["sdm eager"], outs["2.0.0 eager"]
        res["sdm eager vs 2.0.0 eager"] = dict(
            prefill_max_abs_diff=max_abs(s1[0], s2[0]), prefill_ref_max_abs=s2[0].float().abs().max().item(),
            decode_max_abs_diff=max(max_abs(u, v) for u, v in zip(s1[1:], s2[1:])),
            decode_ref_max_abs=max(v.float().abs().max().item() for v in s2[1:]),
            bank_max_abs_diff=max_abs(m1, m2), bank_ref_max_abs=m2.float().abs().max().item())
    return res


def timed(variants: dict, tokens: torch.Tensor, steps: int, rounds: int, warmup: int) -> dict:
    """ms per decode step of each variant: median / min / max over rounds of ``steps`` steps."""
    dev = variants["sdm eager"].dev
    n = len(tokens)
    for var in variants.values():
        for s in range(warmup):
            var.step(tokens[s % n])
    sync(dev)
    acc = {k: [] for k in variants}
    names = list(variants)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            var = variants[name]
            sync(dev)
            if dev == "cuda":
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for s in range(steps):
                    var.step(tokens[s % n])
                stop.record()
                stop.synchronize()
                ms = start.elapsed_time(stop)
            else:
                t0 = time.perf_counter()
                for s in range(steps):
                    var.step(tokens[s % n])
                ms = (time.perf_counter() - t0) * 1e3
            acc[name].append(ms / steps)
    return {k: (statistics.median(v), min(v), max(v)) for k, v in acc.items()}


def bench(name: str, cfg: dict, args, dev: str, sdm2) -> dict:
    t0 = time.time()
    layers, made = build(cfg, dev, sdm2)
    variants = {}
    for vname in VARIANTS:
        # On the CPU sdm's graph variant runs eager: it is checked, not timed.
        if vname in layers and (runs_on(vname, dev) or vname == "sdm cuda_graph"):
            cls = HandCaptured if vname == "2.0.0 hand capture" else Variant
            variants[vname] = cls(vname, layers[vname], args.batch, dev)
    gen = torch.Generator(device=dev).manual_seed(1)
    x_prefill = torch.randn(args.batch, args.prefill, cfg["dim"], generator=gen, device=dev).to(torch.bfloat16)
    tokens = torch.randn(64, args.batch, 1, cfg["dim"], generator=gen, device=dev).to(torch.bfloat16)
    row = dict(config=name, layer=cfg, batch=args.batch, prefill=args.prefill, weights=made, errors={})
    with torch.no_grad():
        row["checks"] = check(variants, x_prefill, tokens, args.check_steps, row["errors"])
        for vname in [v for v in variants if not runs_on(v, dev)]:
            del variants[vname]
        row["ms_per_step"] = timed(variants, tokens, args.steps, args.rounds, args.warmup)
    stats = layers["sdm cuda_graph"].graph_runner.stats
    row["sdm_graph_stats"] = dict(stats)
    row["seconds"] = round(time.time() - t0, 1)
    del variants, layers
    if dev == "cuda":
        torch.cuda.empty_cache()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="small,readme", help=f"from {','.join(CONFIGS)}")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prefill", type=int, default=256, help="tokens per sequence before decoding")
    parser.add_argument("--steps", type=int, default=100, help="decode steps per timed round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--check-steps", type=int, default=16)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        print("layer_decode: skipped (no CUDA device; --device cpu runs sdm eager)")
        return
    sdm2, sdm2_note = load_sdm2()
    if dev != "cuda":
        where = f"CPU ({torch.get_num_threads()} threads)"
        # 2.0.0's layers are still built there (their state dict loaded into sdm's): not run.
        print(f"layer_decode: on the CPU only sdm eager is timed (graphs and 2.0.0 need CUDA); 2.0.0: {sdm2_note}")
    else:
        where = torch.cuda.get_device_name()
        if sdm2 is None:
            print(f"layer_decode: sparse-delta-memory 2.0.0 {sdm2_note}: sdm's two variants only")
    rows = []
    for name in args.configs.split(","):
        rows.append(bench(name, CONFIGS[name], args, dev, sdm2))
        print(f"-- {name} done in {rows[-1]['seconds']} s", flush=True)
    print(f"\ndevice: {where}, torch {torch.__version__}, sdm from {os.path.dirname(sdm.__file__)}, 2.0.0: {sdm2_note}")
    print(f"batch {args.batch}, prefill {args.prefill} tokens, {args.steps} decode steps per round, "
          f"{args.rounds} rounds")
    print("\n| config | variant | ms per decode step (median) | min | max | vs sdm eager |\n|---|---|---|---|---|---|")
    for r in rows:
        base = r["ms_per_step"]["sdm eager"][0]
        for v, (med, lo, hi) in r["ms_per_step"].items():
            print(f"| {r['config']} | {v} | {med:.4f} | {lo:.4f} | {hi:.4f} | {base / med:.2f}x |")
    print("\n| config | check | result |\n|---|---|---|")
    for r in rows:
        for what, c in r["checks"].items():
            if "bitwise_equal" in c:
                text = ("bitwise equal (outputs and final bank)" if c["bitwise_equal"] else
                        f"DIFFERENT: {c['outputs_differing']} outputs, bank equal {c['bank_equal']}, "
                        f"max abs diff {c['max_abs_diff']:.3g}")
            else:
                text = (f"max abs diff: prefill {c['prefill_max_abs_diff']:.3g} (of {c['prefill_ref_max_abs']:.3g}), "
                        f"decode {c['decode_max_abs_diff']:.3g} (of {c['decode_ref_max_abs']:.3g}), "
                        f"final bank {c['bank_max_abs_diff']:.3g} (of {c['bank_ref_max_abs']:.3g})")
            print(f"| {r['config']} | {what} | {text} |")
        print(f"| {r['config']} | sdm cuda_graph runner | {r['sdm_graph_stats']} |")
        for part, tb in r["errors"].items():
            print(f"| {r['config']} | error in {part} | {tb.strip().splitlines()[-1][:300]} |")
    path = args.json or (os.path.join(os.environ["OUT"], "layer_decode.json") if os.environ.get("OUT") else "")
    if path:
        with open(path, "w") as f:
            json.dump(dict(device=where, torch=torch.__version__, sdm2=sdm2_note, rows=rows), f, indent=1)
        print(f"\nJSON: {path}")


if __name__ == "__main__":
    main()
