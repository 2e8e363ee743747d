#!/usr/bin/env bash
# peer_decode.sh - on the GPU machine: the layer's decode step side by side with
# sparse-delta-memory 2.0.0 (bench/cuda/layer_decode.py: sdm eager / cuda_graph, 2.0.0 eager /
# cuda_graph / hand-captured, batch 8), then tests/python/test_requirements.py on that machine's
# Python and torch (the declared floors, issue 26 item 8).
#
#   scripts/peer_decode.sh [layer_decode.py flags, e.g. --configs readme --rounds 9]
#
# Needs .peer beside the sources (not in git: .git/info/exclude / .gitignore; the device run
# must carry it) as shared/peer_bench/README.md sets it up: .peer/sdm2 the unpacked 2.0.0 wheel,
# .peer/bench a copy of shared/peer_bench (jit-cache/ and warm2.py). PEER names another folder.
# Without .peer/sdm2 it runs sdm's two variants only.
#
# sdm: the package that scripts/gpu_check.sh installed in $SDM_GPU_BUILD_DIR/site (default
# /tmp/sdm-gpu-build, gpu_check's default), used as it is when gpu_check ran earlier in the same
# call; otherwise this script installs it there the same way (pip --target, CUDA on,
# SDM_CUDA_ARCHS default 90, GPU tests off), in the background while 2.0.0 warms up.
# 2.0.0's JIT extensions: .peer/bench/jit-cache/ext2.tgz.part-* unpacked at /tmp/ext2, the path
# they were built in (as .peer/bench/run.sh does; torch rebuilds any that do not match), then
# warm2.py builds what is missing and runs one call of each path (about 55 s from the cache).
# Logs and JSON go to $OUT (default out/peer_decode). Exit status: non-zero when the build, the
# benchmark or the test failed.
set -uo pipefail
cd "$(dirname "$0")/.."

out="${OUT:-$PWD/out/peer_decode}"
build="${SDM_GPU_BUILD_DIR:-/tmp/sdm-gpu-build}"
site="$build/site"
python="${PYTHON:-python3}"
archs="${SDM_CUDA_ARCHS:-90}"
peer="${PEER:-$PWD/.peer}"
sdm2="$peer/sdm2"
mkdir -p "$out"
t0=$(date +%s)
phase() { echo "== $1 (t = $(( $(date +%s) - t0 )) s)"; }
export PYTHONUNBUFFERED=1

build_rc=0
build_pid=""
if [ -d "$site/sdm" ]; then
  echo "sdm: the package in $site (scripts/gpu_check.sh's)"
else
  phase "sdm build into $site (in the background; build.log)"
  rm -rf "$build"
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-8}" timeout 540 "$python" -m pip install \
    --no-build-isolation --no-deps --target "$site" -C build-dir="$build" -C cmake.define.SDM_ENABLE_CUDA=ON \
    -C cmake.define.SDM_CUDA_ARCHS="$archs" -C cmake.define.SDM_BUILD_GPU_TESTS=OFF . >"$out/build.log" 2>&1 &
  build_pid=$!
fi

if [ -d "$sdm2/sparse_delta_memory" ]; then
  export TORCH_EXTENSIONS_DIR=/tmp/ext2 TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" MAX_JOBS="${MAX_JOBS:-3}"
  export WARM_PAR="${WARM_PAR:-5}"
  if ls "$peer"/bench/jit-cache/ext2.tgz.part-* >/dev/null 2>&1 && [ ! -d /tmp/ext2 ]; then
    cat "$peer"/bench/jit-cache/ext2.tgz.part-* | tar xzf - -C /tmp && echo "2.0.0 JIT cache unpacked at /tmp/ext2"
  fi
  if [ -f "$peer/bench/warm2.py" ]; then
    phase "2.0.0 warm-up (warm2.py; warm2.log)"
    PYTHONPATH="$sdm2" timeout 420 "$python" "$peer/bench/warm2.py" >"$out/warm2.log" 2>&1
    echo "warm2 rc=$?"
    grep -v "^ " "$out/warm2.log" | tail -8
  fi
  pythonpath="$site:$sdm2"
else
  echo "peer_decode: no 2.0.0 at $sdm2 (shared/peer_bench/README.md): sdm's variants only"
  pythonpath="$site"
fi

if [ -n "$build_pid" ]; then
  wait "$build_pid"
  build_rc=$?
  phase "sdm build done, rc $build_rc"
  if [ "$build_rc" != 0 ]; then
    tail -30 "$out/build.log"
    echo "peer_decode: FAILED: the sdm build"
    exit 1
  fi
fi

phase "layer decode, side by side (layer_decode.log)"
PYTHONPATH="$pythonpath" timeout "${SDM_DECODE_TIMEOUT:-300}" "$python" bench/cuda/layer_decode.py \
  --json "$out/layer_decode.json" "$@" 2>&1 | tee "$out/layer_decode.log"
bench_rc=${PIPESTATUS[0]}

phase "tests/python/test_requirements.py (test_requirements.log)"
"$python" -c "import sys, torch; print('Python', sys.version.split()[0], 'torch', torch.__version__, 'cuda',
torch.version.cuda)" 2>&1 | tee "$out/test_requirements.log"
PYTHONPATH="$site" timeout 120 "$python" -m pytest tests/python/test_requirements.py -q -rs -p no:cacheprovider \
  2>&1 | tee -a "$out/test_requirements.log"
test_rc=${PIPESTATUS[0]}

phase "summary"
echo "| step | result |"
echo "|---|---|"
echo "| layer_decode.py | rc $bench_rc |"
echo "| test_requirements.py | rc $test_rc: $(tail -1 "$out/test_requirements.log") |"
if [ "$bench_rc" != 0 ] || [ "$test_rc" != 0 ]; then
  echo "peer_decode: FAILED"
  exit 1
fi
echo "peer_decode: passed"
