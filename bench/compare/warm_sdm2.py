"""Makes sparse-delta-memory 2.0.0 ready: builds its JIT CUDA extensions in parallel processes (or
finds them in TORCH_EXTENSIONS_DIR), then runs one tiny forward and backward so that nothing is
compiled inside a timed call. Used by bench/compare/run_gpu.sh."""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys
import time

import torch

# 2.0.0's extension modules (sparse_delta_memory.cuda.<name>) and the two with a second "tail" module.
MODULES = ["phase1_cuda", "mover_fx_cuda", "mover_da2_cuda", "pa_dc_cuda", "gx_pa2_cuda", "gx_gds_cuda",
           "phase1_bwd_cuda", "gather_cuda", "gx_gemm_cuda", "bwd_steps_cuda", "px_qrec_cuda",
           "product_key_topk_cuda", "product_key_topk_anyf_cuda"]
WITH_TAIL = ("gx_gds_cuda", "gx_pa2_cuda")


def build(module: str, loader: str):
    start = time.time()
    code = f"from sparse_delta_memory.cuda import {module} as m; m.{loader}()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return module, loader, done.returncode, time.time() - start, (done.stderr or "")[-1500:]


def tiny_calls():
    from sparse_delta_memory.memory_ops import sdm_write_read
    P, T, W, sps = 2, 200, 16, 4096
    for hd in (128, 768):
        bank = (torch.randn(P * sps, hd, device="cuda") * 0.02).bfloat16()
        slots = torch.rand(P, T, sps, device="cuda").argsort(-1)[..., :W].sort(-1).values.int()
        slots += (torch.arange(P, device="cuda") * sps).view(P, 1, 1).int()
        k_val = torch.softmax(torch.randn(P, T, W, device="cuda"), -1).bfloat16().requires_grad_()
        v = torch.randn(P, T, hd, device="cuda").bfloat16().requires_grad_()
        beta = torch.rand(P, T, 1, device="cuda").requires_grad_()
        g = (-torch.rand(P, T, 1, device="cuda") * 0.5).requires_grad_()
        leaf = bank.clone().requires_grad_()
        readings = sdm_write_read(leaf.clone(), slots, k_val, v, beta, g, slots, k_val, chunk_size=64,
                                  num_memory_slots=sps, num_parallel=P)
        readings.float().square().sum().backward()
    torch.cuda.synchronize()


def main():
    start = time.time()
    jobs = [(m, "_module") for m in MODULES] + [(m, "_tail_module") for m in WITH_TAIL]
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        for module, loader, rc, seconds, err in pool.map(lambda job: build(*job), jobs):
            print(f"{module}.{loader}: rc={rc} {seconds:.0f} s", flush=True)
            if rc:
                failed += 1
                print(err, flush=True)
    tiny_calls()
    print(f"ready in {time.time() - start:.0f} s, {failed} builds failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
