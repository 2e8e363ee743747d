#!/usr/bin/env bash
# run_gpu.sh - the side-by-side benchmark on a GPU machine: builds sdm with CUDA (pip, into a private
# folder) unless SDM_SITE names one already built (e.g. gpu_check's /tmp/sdm-gpu-build/site), makes
# sparse-delta-memory 2.0.0 ready, runs bench/compare/side_by_side.py.
#
#   SDM2=<folder holding the unpacked sparse_delta_memory package> [SDM2_JIT_CACHE=<folder of
#   ext2.tgz.part-* : 2.0.0's JIT extensions prebuilt for this machine>] [SDM_SITE=...] \
#   bash bench/compare/run_gpu.sh [side_by_side.py arguments]
#
# 2.0.0 compiles its CUDA extensions on first use (~5.5 min on 16 cores); a JIT cache built on the
# same torch / CUDA / GPU, unpacked at the path it was built in (/tmp/ext2), makes it ready in ~1 min.
# Without SDM2 only sdm is timed. Logs and results.jsonl go to $OUT (default /tmp/compare).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
out="${OUT:-/tmp/compare}"; mkdir -p "$out"
t0=$(date +%s); at() { echo "$(( $(date +%s) - t0 )) s"; }
site="${SDM_SITE:-}"
if [ -z "$site" ]; then
  site=/tmp/sdm-compare-site
  CMAKE_BUILD_PARALLEL_LEVEL=8 python3 -m pip install --no-build-isolation --no-deps --target "$site" \
    -C build-dir=/tmp/sdm-compare-build -C cmake.define.SDM_ENABLE_CUDA=ON -C cmake.define.SDM_CUDA_ARCHS=90 . \
    >"$out/sdm_build.log" 2>&1 &
  build=$!
fi
peer_path=""
if [ -n "${SDM2:-}" ]; then
  peer_path="$SDM2"
  if [ -n "${SDM2_JIT_CACHE:-}" ] && [ ! -d /tmp/ext2 ]; then
    cat "$SDM2_JIT_CACHE"/ext2.tgz.part-* | tar xzf - -C /tmp && echo "2.0.0 JIT cache unpacked ($(at))"
  fi
  # 9.0, not the machine's 9.0a: the cache was built for it (torch rebuilds on any mismatch).
  export TORCH_EXTENSIONS_DIR=/tmp/ext2 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=3
  PYTHONPATH="$SDM2" python3 bench/compare/warm_sdm2.py >"$out/warm_sdm2.log" 2>&1
  echo "2.0.0 warm-up rc=$? ($(at))"
fi
if [ -n "${build:-}" ]; then
  wait "$build" || { tail -30 "$out/sdm_build.log"; echo "run_gpu: sdm build failed"; exit 1; }
  echo "sdm built ($(at))"
fi
PYTHONPATH="$site${peer_path:+:$peer_path}" python3 bench/compare/side_by_side.py --out "$out/results.jsonl" "$@" \
  >"$out/bench.log" 2>&1
rc=$?
echo "side_by_side rc=$rc ($(at))"
grep -v '^{' "$out/bench.log" | tail -20
exit $rc
