#!/usr/bin/env bash
# gpu_check.sh - run on the GPU machine from a clean checkout: builds the library with CUDA
# (SDM_CUDA_ARCHS, default 90), runs the GPU tests, compute-sanitizer (memcheck, racecheck,
# initcheck) on the small tests, and the GPU benchmark; prints a summary table last. Logs and
# JSON go to $OUT (default out/gpu_check).
#
#   scripts/gpu_check.sh [--configs small,readme,...] [--reps N] [--no-tests] [--no-sanitizer] [--no-bench]
#                        [--profile CONFIG]
#
# --profile CONFIG: Nsight Compute (ncu, clocks left alone) times every kernel of one forward
# (or 400 decode steps) of that benchmark config and prints the per-kernel summary, then the
# speed-of-light, occupancy and warp-state numbers of the first launch of each engine kernel.
#
# The C++ GoogleTest suite and the torch extension are not built here (the GPU image has no
# GoogleTest; the extension has its own check).
set -uo pipefail
cd "$(dirname "$0")/.."

configs="small,readme,big,flagship,decode8,decode64"
reps=5
tests=1
sanitizer=1
bench=1
profile=""
while [ $# -gt 0 ]; do
  case "$1" in
    --configs) configs="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --no-tests) tests=0; sanitizer=0; shift ;;
    --no-sanitizer) sanitizer=0; shift ;;
    --profile) profile="$2"; shift 2 ;;
    --no-bench) bench=0; shift ;;
    *) echo "gpu_check: unknown argument $1" >&2; exit 2 ;;
  esac
done

out="${OUT:-$PWD/out/gpu_check}"
build="${SDM_GPU_BUILD_DIR:-/tmp/sdm-gpu-build}"
mkdir -p "$out"
rm -rf "$build"

{
  echo "commit: ${SDM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1
  nvcc --version | tail -1
  cmake --version | head -1
} | tee "$out/device.txt"

echo "== build"
start=$(date +%s)
if ! { cmake -S . -B "$build" -G Ninja -DSDM_ENABLE_CUDA=ON -DSDM_CUDA_ARCHS="${SDM_CUDA_ARCHS:-90}" \
         -DSDM_BUILD_TESTS=OFF -DSDM_BUILD_BENCH=OFF &&
       cmake --build "$build" -j"$(nproc)" --target sdm_gpu_tests sdm_gpu_bench; } >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  echo "gpu_check: BUILD FAILED"
  exit 1
fi
echo "built in $(( $(date +%s) - start )) s"
cuobjdump --dump-resource-usage "$build/libsdm_cuda.a" >"$out/resources.txt" 2>&1 || true

tests_rc=0
if [ "$tests" = 1 ]; then
  echo "== tests"
  "$build/tests/gpu/sdm_gpu_tests" 2>&1 | tee "$out/tests.log"
  tests_rc=${PIPESTATUS[0]}
fi

if [ -n "$profile" ]; then
  echo "== ncu kernel times, config $profile"
  timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum --launch-count 420 --print-summary per-kernel \
    "$build/tests/gpu/sdm_gpu_bench" --configs "$profile" --reps 1 >"$out/profile.log" 2>&1
  grep -v "^==PROF==" "$out/profile.log" | grep -E "^  [a-zA-Z_]|gpu__time_duration" | cut -c1-140 | tail -60
  echo "== ncu details: the first pair_products, solve, gather, dual and group writer of config $profile"
  timeout 300 ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats -k 'regex:pair_products|solve|gather_rows|dual_product|write_groups' --launch-count 5 \
    "$build/tests/gpu/sdm_gpu_bench" --configs "$profile" --reps 1 >>"$out/profile.log" 2>&1
  grep -E "^  [a-zA-Z_].*\(|^    (Duration|Achieved Occupancy|Theoretical Occupancy|Memory Throughput|DRAM Throughput|Registers Per Thread|Waves Per SM|Warp Cycles Per Issued|Block Limit Registers|Compute \(SM\) Throughput)" \
    "$out/profile.log" | tail -60 | cut -c1-130
fi

sanitizer_summary=""
if [ "$sanitizer" = 1 ]; then
  echo "== compute-sanitizer (small tests)"
  : >"$out/sanitizer.log"
  for tool in memcheck racecheck initcheck; do
    echo "---- $tool" >>"$out/sanitizer.log"
    timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 9 "$build/tests/gpu/sdm_gpu_tests" masking index unimplemented \
      >>"$out/sanitizer.log" 2>&1
    rc=$?
    sanitizer_summary+="| compute-sanitizer $tool | rc $rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer.log" | tail -1) |"$'\n'
  done
fi

bench_rc=0
if [ "$bench" = 1 ]; then
  echo "== benchmark"
  "$build/tests/gpu/sdm_gpu_bench" --json "$out/bench.json" --configs "$configs" --reps "$reps" 2>&1 | tee "$out/bench.log"
  bench_rc=${PIPESTATUS[0]}
fi

echo
echo "== summary"
echo "| step | result |"
echo "|---|---|"
[ "$tests" = 1 ] && echo "| tests | rc $tests_rc: $(tail -1 "$out/tests.log") |"
printf "%s" "$sanitizer_summary"
echo "| benchmark | rc $bench_rc |"
[ "$bench" = 1 ] && grep '^| ' "$out/bench.log"
[ "$tests_rc" = 0 ] && [ "$bench_rc" = 0 ]
