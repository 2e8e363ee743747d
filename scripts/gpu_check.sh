#!/usr/bin/env bash
# gpu_check.sh - run on the GPU machine from a clean checkout: builds the library with CUDA
# (SDM_CUDA_ARCHS, default 90) together with the PyTorch extension against the torch found there,
# installs the `sdm` package with CUDA on, runs the C++ GPU tests (forward, backward, the per-chunk
# key sort, the product-key top-k; forward and backward once more with SDM_CUDA_PDL=0 SDM_CUDA_STEP_STREAMS=1, the
# forward once more with the write walk forced, SDM_CUDA_WRITER=walk), the Python
# GPU tests (`pytest tests/python -m gpu`: the tests on CUDA tensors, the fuzz test's CUDA case
# included), compute-sanitizer (memcheck, racecheck, initcheck, the three side by side, each into
# $OUT/sanitizer_TOOL.log) on the small C++ tests (summary rc: forward tests / backward tests /
# medium chunk products / repeated-write tests / slot-split tests / group-writer split tests /
# quantised group-writer split / write walk / exact-snapshot tests / saved-buffer tests / five
# product-key top-k shapes; SDM_SANITIZER_TOOLS picks the tools;
# then synccheck of the write walk's small case), the C++ GPU benchmark (bench/cuda; its default
# slot patterns: product-key top-k over a correlated latent and the heavy-reuse variant) and the
# Python decode-latency benchmark; prints a summary table last. SDM_COMMIT names the commit in
# device.txt (default: git rev-parse of the checkout).
# Logs and JSON go to $OUT (default out/gpu_check); each phase prints its start time. Exit status:
# 0 only when every phase that ran passed (a pip install that had to fall back counts as failed).
# The fuzz test's CUDA case runs on its own with SDM_FUZZ_EXAMPLES (default 2000) examples.
#
#   scripts/gpu_check.sh [--configs small,readme,...] [--reps N] [--snapshot none,fp8,int4] [--no-tests]
#                        [--no-sanitizer] [--sanitizer-only] [--no-bench] [--no-torch] [--profile CONFIG]
#
# --sanitizer-only: the compute-sanitizer phase alone, on the build a previous run left in
# SDM_GPU_BUILD_DIR (nothing rebuilt; refused when that build is missing). With a run of
# --no-bench --no-sanitizer before it on the same machine, the two make a whole --no-bench check
# in two calls of under 10 minutes each (the sanitizer phase alone takes about 5 on an H100).
# --snapshot: the snapshot modes of the benchmark's training-step rows (default none,fp8,int4).
# --no-torch: C++ only (no extension, no Python tests or Python benchmark).
# The benchmark also runs small and readme with SDM_CUDA_PDL=0 (no programmatic dependent launch)
# for an A/B of the launch gaps, and records one training step per config kernel by kernel
# (sdm_gpu_bench --timeline, CUPTI) into $OUT/timeline.log.
# --profile CONFIG: Nsight Compute (ncu, clocks left alone) times every kernel of one forward
# (or 400 decode steps) of that benchmark config and prints the per-kernel summary, then the
# speed-of-light, occupancy and warp-state numbers of the first launch of each engine kernel.
#
# The package is built and installed with pip into a private target folder ($build/site, on
# PYTHONPATH for the Python steps); the same CMake run builds the GPU tests, so the kernels
# compile once:
#   pip install --no-build-isolation --no-deps --target $build/site -C build-dir=$build \
#       -C cmake.define.SDM_ENABLE_CUDA=ON -C cmake.define.SDM_CUDA_ARCHS=90 .
# If pip fails, CMake builds the extension and it is staged next to python/sdm instead (logged).
# The C++ GoogleTest suite is not built here (the GPU image has no GoogleTest).
set -uo pipefail
cd "$(dirname "$0")/.."

configs="small,readme,big,flagship,decode8,decode64"
reps=5
snapshots="none,fp8,int4"
tests=1
sanitizer=1
bench=1
torch=1
profile=""
reuse_build=0
while [ $# -gt 0 ]; do
  case "$1" in
    --configs) configs="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --snapshot) snapshots="$2"; shift 2 ;;
    --no-tests) tests=0; sanitizer=0; shift ;;
    --no-sanitizer) sanitizer=0; shift ;;
    --sanitizer-only) tests=0; bench=0; sanitizer=1; reuse_build=1; shift ;;
    --profile) profile="$2"; shift 2 ;;
    --no-bench) bench=0; shift ;;
    --no-torch) torch=0; shift ;;
    *) echo "gpu_check: unknown argument $1" >&2; exit 2 ;;
  esac
done

out="${OUT:-$PWD/out/gpu_check}"
build="${SDM_GPU_BUILD_DIR:-/tmp/sdm-gpu-build}"
site="$build/site"
python="${PYTHON:-python3}"
archs="${SDM_CUDA_ARCHS:-90}"
mkdir -p "$out"
if [ "$reuse_build" = 1 ]; then
  for bin in gpu/sdm_gpu_tests gpu/sdm_gpu_backward_tests gpu/sdm_gpu_repeated_writes_tests gpu/sdm_gpu_slot_split_tests \
             gpu/sdm_gpu_writer_split_tests gpu/sdm_gpu_exact_snapshot_tests gpu_topk/sdm_gpu_topk_tests; do
    [ -x "$build/tests/$bin" ] || {
      echo "gpu_check: --sanitizer-only needs the build of an earlier run in $build ($bin missing)" >&2; exit 2; }
  done
else
  rm -rf "$build"
fi
t0=$(date +%s)
phase() { echo "== $1 (t = $(( $(date +%s) - t0 )) s)"; }

{
  echo "commit: ${SDM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1
  nvcc --version | tail -1
  cmake --version | head -1
  [ "$torch" = 1 ] && "$python" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1
} | tee "$out/device.txt"

package="reused build (--sanitizer-only)"
if [ "$reuse_build" = 0 ]; then
  phase "build"
  # With the extension: pip builds everything (its CMake run also builds the GPU tests and benchmark,
  # SDM_BUILD_GPU_TESTS is on by default) into $build and installs the package into $site; the
  # cmake --build below then has nothing left to do. Without it, or if pip fails: plain CMake.
  package="not built"
  targets="sdm_gpu_tests sdm_gpu_backward_tests sdm_gpu_sort_tests sdm_gpu_repeated_writes_tests sdm_gpu_slot_split_tests
    sdm_gpu_writer_split_tests sdm_gpu_exact_snapshot_tests sdm_gpu_topk_tests sdm_gpu_bench"
  if [ "$torch" = 1 ]; then
    if "$python" -m pip install --no-build-isolation --no-deps --target "$site" -C build-dir="$build" \
         -C cmake.define.SDM_ENABLE_CUDA=ON -C cmake.define.SDM_CUDA_ARCHS="$archs" . >"$out/build.log" 2>&1; then
      package="pip install (SDM_ENABLE_CUDA=ON)"
    else
      tail -20 "$out/build.log"
      echo "gpu_check: pip install failed (build.log); building with CMake and staging the extension"
      rm -rf "$build"
      if cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSDM_ENABLE_CUDA=ON -DSDM_CUDA_ARCHS="$archs" \
           -DSDM_ENABLE_TORCH=ON -DPython_EXECUTABLE="$(command -v "$python")" -DSDM_BUILD_TESTS=OFF \
           -DSDM_BUILD_BENCH=OFF >>"$out/build.log" 2>&1; then
        targets="$targets sdm_torch"
        package="staged CMake build (pip failed)"
      else
        echo "gpu_check: configuring with the torch extension failed too; C++ only"
        package="none (pip and CMake failed)"
        torch=0
        rm -rf "$build"
      fi
    fi
  fi
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSDM_ENABLE_CUDA=ON -DSDM_CUDA_ARCHS="$archs" \
      -DSDM_BUILD_TESTS=OFF -DSDM_BUILD_BENCH=OFF >>"$out/build.log" 2>&1
  fi
  if ! cmake --build "$build" -j"$(nproc)" --target $targets >>"$out/build.log" 2>&1; then
    tail -40 "$out/build.log"
    echo "gpu_check: BUILD FAILED"
    exit 1
  fi
  if [ "$package" = "staged CMake build (pip failed)" ]; then
    rm -rf "$site" && mkdir -p "$site" && cp -r python/sdm "$site/" && cp "$build"/bindings/torch/_C*.so "$site/sdm/"
  fi
  echo "package: $package"
  cuobjdump --dump-resource-usage "$build/libsdm_cuda.a" >"$out/resources.txt" 2>&1 || true
fi

tests_rc=0
backward_rc=0
sort_rc=0
topk_rc=0
topk_walk_rc=0
topk_sums_rc=0
repeated_rc=0
slot_split_rc=0
writer_split_rc=0
exact_rc=0
fuzz_rc=0
tests_no_pdl_rc=0
backward_no_pdl_rc=0
backward_staged_rc=0
backward_du_only_rc=0
write_walk_rc=0
py_tests_rc=0
if [ "$tests" = 1 ]; then
  phase "C++ GPU tests"
  "$build/tests/gpu/sdm_gpu_tests" 2>&1 | tee "$out/tests.log"
  tests_rc=${PIPESTATUS[0]}
  phase "C++ GPU backward tests"
  "$build/tests/gpu/sdm_gpu_backward_tests" 2>&1 | tee "$out/backward_tests.log"
  backward_rc=${PIPESTATUS[0]}
  phase "C++ GPU sort tests"
  "$build/tests/gpu/sdm_gpu_sort_tests" 2>&1 | tee "$out/sort_tests.log"
  sort_rc=${PIPESTATUS[0]}
  phase "C++ GPU repeated-write and large-group tests"
  "$build/tests/gpu/sdm_gpu_repeated_writes_tests" 2>&1 | tee "$out/repeated_writes_tests.log" | tail -3
  repeated_rc=${PIPESTATUS[0]}
  phase "C++ GPU slot-split tests (the backward slot kernel's row split)"
  "$build/tests/gpu/sdm_gpu_slot_split_tests" 2>&1 | tee "$out/slot_split_tests.log" | tail -3
  slot_split_rc=${PIPESTATUS[0]}
  phase "C++ GPU group-writer split tests"
  "$build/tests/gpu/sdm_gpu_writer_split_tests" 2>&1 | tee "$out/writer_split_tests.log" | tail -3
  writer_split_rc=${PIPESTATUS[0]}
  phase "C++ GPU exact-snapshot tests (rows packed by write group)"
  "$build/tests/gpu/sdm_gpu_exact_snapshot_tests" 2>&1 | tee "$out/exact_snapshot_tests.log" | tail -3
  exact_rc=${PIPESTATUS[0]}
  phase "C++ GPU top-k tests"
  "$build/tests/gpu_topk/sdm_gpu_topk_tests" 2>&1 | tee "$out/topk_tests.log" | tail -3
  topk_rc=${PIPESTATUS[0]}
  # The backward's two shared-memory paths forced wherever the width allows them (the rule picks
  # by the row's bytes, src/cuda/topk/register_backward.cu): the same suite, the same bits.
  phase "C++ GPU top-k tests, backward paths forced (SDM_TOPK_BWD=walk, then sums)"
  SDM_TOPK_BWD=walk "$build/tests/gpu_topk/sdm_gpu_topk_tests" >"$out/topk_tests_walk.log" 2>&1
  topk_walk_rc=$?
  SDM_TOPK_BWD=sums "$build/tests/gpu_topk/sdm_gpu_topk_tests" >"$out/topk_tests_sums.log" 2>&1
  topk_sums_rc=$?
  echo "top-k backward forced: walk rc $topk_walk_rc, sums rc $topk_sums_rc"
  # PDL and the split of the steps over two CUDA streams only change when and where a kernel
  # runs; both suites must pass (and stay bitwise deterministic: eager == graph replay, which
  # runs on one stream) without PDL and with every call of two or more streams split (the test
  # shapes are below the size at which calls split by default, src/cuda/step_streams.hpp).
  phase "C++ GPU tests without PDL, steps split over two streams (SDM_CUDA_PDL=0 SDM_CUDA_STEP_STREAMS=1)"
  SDM_CUDA_PDL=0 SDM_CUDA_STEP_STREAMS=1 "$build/tests/gpu/sdm_gpu_tests" >"$out/tests_no_pdl.log" 2>&1
  tests_no_pdl_rc=$?
  SDM_CUDA_PDL=0 SDM_CUDA_STEP_STREAMS=1 "$build/tests/gpu/sdm_gpu_backward_tests" >"$out/backward_tests_no_pdl.log" 2>&1
  backward_no_pdl_rc=$?
  # The backward with the staged slot walk wherever it fits (the automatic choice takes it only
  # at large shapes, src/cuda/backward/slots_staged.cu): the same suite, the same bits.
  phase "C++ GPU backward tests with the staged slot walk (SDM_CUDA_SLOT_WALK=staged)"
  SDM_CUDA_SLOT_WALK=staged "$build/tests/gpu/sdm_gpu_backward_tests" >"$out/backward_tests_staged.log" 2>&1
  backward_staged_rc=$?
  echo "staged slot walk: backward rc $backward_staged_rc ($(tail -1 "$out/backward_tests_staged.log"))"
  # The same with dU alone on chip (dy from global memory), as the walk runs at C = 128.
  phase "C++ GPU backward tests, staged walk with dU alone on chip (SDM_CUDA_SLOT_WALK=staged_du_only)"
  SDM_CUDA_SLOT_WALK=staged_du_only "$build/tests/gpu/sdm_gpu_backward_tests" >"$out/backward_tests_du_only.log" 2>&1
  backward_du_only_rc=$?
  echo "staged walk, dU alone on chip: backward rc $backward_du_only_rc ($(tail -1 "$out/backward_tests_du_only.log"))"
  # The forward suite with the write walk wherever it fits (the automatic choice takes it only on
  # flagship-like steps, src/cuda/forward/write_walk.hpp): the same suite, the same bits.
  phase "C++ GPU tests with the write walk (SDM_CUDA_WRITER=walk)"
  SDM_CUDA_WRITER=walk "$build/tests/gpu/sdm_gpu_tests" >"$out/tests_write_walk.log" 2>&1
  write_walk_rc=$?
  echo "write walk: forward rc $write_walk_rc ($(tail -1 "$out/tests_write_walk.log"))"
  echo "without PDL, split steps: forward rc $tests_no_pdl_rc ($(tail -1 "$out/tests_no_pdl.log")), backward rc" \
    "$backward_no_pdl_rc ($(tail -1 "$out/backward_tests_no_pdl.log"))"
  if [ "$torch" = 1 ]; then
    phase "Python GPU tests"
    PYTHONPATH="$site" PYTHONUNBUFFERED=1 timeout 360 "$python" -m pytest tests/python -m gpu -q -rs -p no:cacheprovider \
      --deselect "tests/python/test_fuzz.py::test_every_entry_point_is_safe_on_any_input[cuda]" \
      2>&1 | tee "$out/python_tests.log"
    py_tests_rc=${PIPESTATUS[0]}
    # The fuzz test's CUDA case on its own, with SDM_FUZZ_EXAMPLES (default 2000) fresh examples.
    phase "Python fuzz test, CUDA case (SDM_FUZZ_EXAMPLES=${SDM_FUZZ_EXAMPLES:-2000})"
    PYTHONPATH="$site" PYTHONUNBUFFERED=1 SDM_FUZZ_EXAMPLES="${SDM_FUZZ_EXAMPLES:-2000}" timeout 300 "$python" -m pytest \
      "tests/python/test_fuzz.py::test_every_entry_point_is_safe_on_any_input[cuda]" -q -p no:cacheprovider \
      --hypothesis-show-statistics 2>&1 | tee "$out/fuzz_cuda.log" | tail -25
    fuzz_rc=${PIPESTATUS[0]}
  fi
fi

bench_rc=0
py_bench_rc=0
if [ "$bench" = 1 ]; then
  phase "benchmark"
  "$build/bench/cuda/sdm_gpu_bench" --json "$out/bench.json" --configs "$configs" --reps "$reps" \
    --snapshot "$snapshots" 2>&1 | tee "$out/bench.log"
  bench_rc=${PIPESTATUS[0]}
  echo "-- the same, without programmatic dependent launch (SDM_CUDA_PDL=0): small, readme"
  SDM_CUDA_PDL=0 "$build/bench/cuda/sdm_gpu_bench" --json "$out/bench_no_pdl.json" --configs small,readme --reps "$reps" \
    2>&1 | sed 's/^| \([a-z0-9]*\) | /| \1 | no PDL: /' | tee "$out/bench_no_pdl.log"
  echo "-- one training step per config, kernel by kernel (CUPTI): $out/timeline.log"
  "$build/bench/cuda/sdm_gpu_bench" --configs "$configs" --reps 1 --training-only --timeline >"$out/timeline.log" 2>&1
  if [ "$torch" = 1 ]; then
    phase "Python decode latency"
    PYTHONPATH="$site" PYTHONUNBUFFERED=1 timeout 120 "$python" bench/cuda/bench_torch_decode.py \
      --json "$out/bench_torch_decode.json" 2>&1 | tee "$out/bench_torch_decode.log"
    py_bench_rc=${PIPESTATUS[0]}
  fi
fi

sanitizer_summary=""
sanitizer_rc=0
if [ "$sanitizer" = 1 ]; then
  phase "compute-sanitizer (small tests; the three tools side by side)"
  # One tool's ten commands, in order, into sanitizer_$tool.log; "rc a/b/..." last.
  # Test filters are substrings of test names (tests/gpu/gpu_test_harness.cpp): each names its
  # tests exactly ("backward snapshot modes", not "snapshot modes", which also picks the extreme
  # log-decay test, minutes under a sanitizer).
  sanitize_with() {
    local tool=$1 log="$out/sanitizer_$1.log" rcs=""
    : >"$log"
    san() { timeout "$1" compute-sanitizer --tool "$tool" --error-exitcode 9 "${@:2}" >>"$log" 2>&1; rcs+="${rcs:+/}$?"; }
    san 75 "$build/tests/gpu/sdm_gpu_tests" masking index "snapshot modes" "decode step vs"
    san 150 "$build/tests/gpu/sdm_gpu_backward_tests" "backward small" "backward snapshot modes"
    # The medium chunk products (64 < C <= 128) beside the blockwise ones.
    san 150 "$build/tests/gpu/sdm_gpu_backward_tests" "medium chunks small"
    san 150 "$build/tests/gpu/sdm_gpu_repeated_writes_tests"
    san 150 "$build/tests/gpu/sdm_gpu_slot_split_tests" "slot split small"
    san 150 "$build/tests/gpu/sdm_gpu_writer_split_tests" "C 256"
    # fp8 / int4 rows split across warps, their scales from the gather's tile amaxes (initcheck: no
    # amax read that the gather did not store).
    san 150 "$build/tests/gpu/sdm_gpu_writer_split_tests" "small quantised"
    # The write walk: delta rows staged per CTA, groups past a batch of 32 (racecheck: the staging
    # barrier; memcheck: no row or snapshot access outside its buffer).
    san 150 "$build/tests/gpu/sdm_gpu_writer_split_tests" "write walk: small"
    # The exact snapshot's count, refusals (the validated forward's and the validated backward's)
    # and too-small buffer under validate=False, hd 256 int4 on the staged walk included (memcheck:
    # no access past `saved`).
    san 150 "$build/tests/gpu/sdm_gpu_exact_snapshot_tests" "device count" refusal guard
    # initcheck here: the backward reads no byte of `saved` that the saving forward left unwritten.
    san 150 "$build/tests/gpu/sdm_gpu_tests" "saved small"
    # The product-key top-k, forward and backward (racecheck: the backward's rows rely on
    # __syncwarp between lanes' shared-memory writes and reads): each backward path and KMAX.
    # (f32 at width 1024 takes the column sums, bf16 the walk; k 7 over three factors one batch.)
    for match in "dims [256,256] k 128" "dims [16,16] k 64" "dims [3,5,2] k 7" "dims [512,512] k 128 rows 67 bfloat16 ties" \
                 "dims [512,512] k 64 rows 67 float32 randn"; do
      SDM_TOPK_TEST_MATCH="$match" san 150 "$build/tests/gpu_topk/sdm_gpu_topk_tests"
    done
    echo "rc $rcs" >>"$log"
  }
  tools="${SDM_SANITIZER_TOOLS:-memcheck racecheck initcheck}"
  for tool in $tools; do sanitize_with "$tool" & done
  wait
  for tool in $tools; do
    log="$out/sanitizer_$tool.log"
    rc=$(tail -1 "$log" | sed 's/^rc //')
    [[ "$rc" =~ ^0(/0)*$ ]] || sanitizer_rc=1
    sanitizer_summary+="| compute-sanitizer $tool | rc $rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1) |"$'\n'
  done
  # synccheck of the write walk's small case: every shuffle and ballot reached by the whole warp.
  log="$out/sanitizer_synccheck.log"
  timeout 150 compute-sanitizer --tool synccheck --error-exitcode 9 "$build/tests/gpu/sdm_gpu_writer_split_tests" \
    "write walk: small" >"$log" 2>&1
  rc=$?
  [ "$rc" = 0 ] || sanitizer_rc=1
  sanitizer_summary+="| compute-sanitizer synccheck (write walk) | rc $rc $(grep -E 'ERROR SUMMARY' "$log" | tail -1) |"$'\n'
fi

if [ -n "$profile" ]; then
  phase "ncu kernel times, config $profile"
  timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --launch-count 420 --print-summary per-kernel \
    "$build/bench/cuda/sdm_gpu_bench" --configs "$profile" --reps 1 >"$out/profile.log" 2>&1
  grep -v "^==PROF==" "$out/profile.log" | grep -E "^  [a-zA-Z_]|gpu__time_duration" | cut -c1-140 | tail -60
  echo "== ncu details: the first pair_products, solve, gather, dual and group writer of config $profile"
  timeout 90 ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats -k 'regex:pair_products|solve|gather_rows|dual_product|write_groups|decode_token' \
    --launch-count 6 "$build/bench/cuda/sdm_gpu_bench" --configs "$profile" --reps 1 >>"$out/profile.log" 2>&1
  grep -E "^  [a-zA-Z_].*\(|^    (Duration|Achieved Occupancy|Theoretical Occupancy|Memory Throughput|DRAM Throughput|Registers Per Thread|Waves Per SM|Warp Cycles Per Issued|Block Limit Registers|Compute \(SM\) Throughput)" \
    "$out/profile.log" | tail -60 | cut -c1-130
fi

echo
phase "summary"
echo "| step | result |"
echo "|---|---|"
echo "| python package | $package |"
[ "$tests" = 1 ] && echo "| C++ GPU tests | rc $tests_rc: $(tail -1 "$out/tests.log") |"
[ "$tests" = 1 ] && echo "| C++ GPU backward tests | rc $backward_rc: $(tail -1 "$out/backward_tests.log") |"
[ "$tests" = 1 ] && echo "| C++ GPU sort tests | rc $sort_rc: $(tail -1 "$out/sort_tests.log") |"
[ "$tests" = 1 ] && echo "| C++ GPU repeated-write tests | rc $repeated_rc: $(tail -1 "$out/repeated_writes_tests.log") |"
[ "$tests" = 1 ] && echo "| C++ GPU slot-split tests | rc $slot_split_rc: $(tail -1 "$out/slot_split_tests.log") |"
[ "$tests" = 1 ] && echo "| C++ GPU group-writer split tests | rc $writer_split_rc: $(tail -1 "$out/writer_split_tests.log") |"
[ "$tests" = 1 ] && echo "| C++ GPU exact-snapshot tests | rc $exact_rc: $(tail -1 "$out/exact_snapshot_tests.log") |"
[ "$tests" = 1 ] && echo "| C++ GPU top-k tests | rc $topk_rc: $(tail -1 "$out/topk_tests.log") |"
[ "$tests" = 1 ] && echo "| C++ GPU top-k tests, SDM_TOPK_BWD=walk / sums | rc $topk_walk_rc / $topk_sums_rc: $(tail -1 "$out/topk_tests_walk.log"); $(tail -1 "$out/topk_tests_sums.log") |"
[ "$tests" = 1 ] && echo "| C++ GPU tests, SDM_CUDA_PDL=0 SDM_CUDA_STEP_STREAMS=1 | rc $tests_no_pdl_rc / $backward_no_pdl_rc: $(tail -1 "$out/tests_no_pdl.log"); $(tail -1 "$out/backward_tests_no_pdl.log") |"
[ "$tests" = 1 ] && echo "| C++ GPU backward tests, SDM_CUDA_SLOT_WALK=staged | rc $backward_staged_rc: $(tail -1 "$out/backward_tests_staged.log") |"
[ "$tests" = 1 ] && echo "| C++ GPU backward tests, SDM_CUDA_SLOT_WALK=staged_du_only | rc $backward_du_only_rc: $(tail -1 "$out/backward_tests_du_only.log") |"
[ "$tests" = 1 ] && echo "| C++ GPU tests, SDM_CUDA_WRITER=walk | rc $write_walk_rc: $(tail -1 "$out/tests_write_walk.log") |"
[ "$tests" = 1 ] && [ "$torch" = 1 ] && echo "| Python GPU tests | rc $py_tests_rc: $(tail -1 "$out/python_tests.log") |"
[ "$tests" = 1 ] && [ "$torch" = 1 ] && echo "| Python fuzz, CUDA case | rc $fuzz_rc: $(grep -E 'passed|failed' "$out/fuzz_cuda.log" | tail -1) |"
printf "%s" "$sanitizer_summary"
echo "| benchmark | rc $bench_rc, Python decode rc $py_bench_rc |"
if [ "$bench" = 1 ]; then
  grep '^| ' "$out/bench.log"
  grep '^| [a-z0-9]* | no PDL' "$out/bench_no_pdl.log"
  [ "$torch" = 1 ] && grep '^| ' "$out/bench_torch_decode.log"
fi
# The exit status: non-zero when any phase that ran failed (the package's build falling back
# to the staged CMake build counts as a failure too: the pip install is what users run).
failed=""
for name in tests_rc backward_rc sort_rc repeated_rc slot_split_rc writer_split_rc exact_rc topk_rc topk_walk_rc topk_sums_rc tests_no_pdl_rc backward_no_pdl_rc backward_staged_rc backward_du_only_rc write_walk_rc py_tests_rc fuzz_rc sanitizer_rc \
            bench_rc py_bench_rc; do
  [ "${!name}" = 0 ] || failed+=" ${name%_rc}"
done
case "$package" in "staged CMake build (pip failed)" | none*) failed+=" python_package" ;; esac
if [ -n "$failed" ]; then
  echo "gpu_check: FAILED:$failed"
  exit 1
fi
echo "gpu_check: every phase that ran passed"
