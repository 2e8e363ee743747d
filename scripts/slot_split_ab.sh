#!/usr/bin/env bash
# slot_split_ab.sh - run on the GPU machine from the S1 tree (issue 24, the backward slot kernel's
# row split): builds this tree and a baseline source tree (--base DIR, e.g. an unpacked
# `git archive` of main) with CUDA, runs the split's GPU tests and the backward suites on this
# tree, compute-sanitizer (memcheck, racecheck) on the split's small test, and, first, while the
# GPU is quiet, the C++ GPU benchmark's training step (saving forward + backward, --training-only
# --digest) of both builds, alternated base / tree per config; it prints per config and slot
# pattern: ms of each, the ratio, and which tensors' digests (readings, saved, memory, k_val, v,
# beta, g, q_val) differ.
# The baseline is built with this tree's bench/cuda/bench_cuda.cu (public API only) so that both
# print per-tensor digests. --mutant also rebuilds this tree's split test twice with a planted
# bug (the entry kernel's dk_eff step sum skips its last step; the write split skips column steps
# when two or more warps share a group), runs its heavy-reuse test on each and reports whether
# it failed, as it must (the tree's sources and build stay untouched).
#
#   scripts/slot_split_ab.sh --base DIR [--configs small,readme,big] [--slots product_key,heavy_reuse]
#                            [--reps N] [--runs N] [--no-tests] [--no-sanitizer] [--mutant]
#
# Logs go to $OUT (default out/slot_split_ab); builds to $SDM_AB_BUILD (default /tmp/slot_split_ab).
# Exit status 0 when every test that ran passed and every mutant was caught.
set -uo pipefail
cd "$(dirname "$0")/.."
tree=$(pwd)

base=""
configs="small,readme,big"
slots="product_key,heavy_reuse"
reps=5
runs=1
tests=1
sanitizer=1
mutant=0
while [ $# -gt 0 ]; do
  case "$1" in
    --base) base="$2"; shift 2 ;;
    --configs) configs="$2"; shift 2 ;;
    --slots) slots="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --no-tests) tests=0; shift ;;
    --no-sanitizer) sanitizer=0; shift ;;
    --mutant) mutant=1; shift ;;
    *) echo "slot_split_ab: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$base" ] || { echo "slot_split_ab: --base DIR is required" >&2; exit 2; }
base=$(cd "$base" && pwd)
out="${OUT:-out/slot_split_ab}"
mkdir -p "$out"
build="${SDM_AB_BUILD:-/tmp/slot_split_ab}"
jobs=$(nproc)
status=0
phase() { echo "== $(date -u +%H:%M:%S) $*"; }

configure() {  # configure SRC BUILD
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSDM_ENABLE_CUDA=ON -DSDM_CUDA_ARCHS=90 \
    -DSDM_BUILD_TESTS=OFF -DSDM_BUILD_BENCH=OFF -DSDM_BUILD_EXAMPLES=OFF > "$2.configure.log" 2>&1
}

phase "build (tree and base, in parallel)"
cp "$tree/bench/cuda/bench_cuda.cu" "$base/bench/cuda/bench_cuda.cu"
mkdir -p "$build"
tree_targets="sdm_gpu_bench"
[ "$tests" = 1 ] && tree_targets="$tree_targets sdm_gpu_slot_split_tests sdm_gpu_backward_tests sdm_gpu_repeated_writes_tests"
( configure "$tree" "$build/tree" && ninja -C "$build/tree" -j "$jobs" $tree_targets ) > "$out/build_tree.log" 2>&1 &
tree_pid=$!
( configure "$base" "$build/base" && ninja -C "$build/base" -j "$jobs" sdm_gpu_bench ) > "$out/build_base.log" 2>&1 &
base_pid=$!
wait "$tree_pid"; tree_rc=$?
wait "$base_pid"; base_rc=$?
echo "build rc: tree $tree_rc, base $base_rc"
if [ "$tree_rc" != 0 ] || [ "$base_rc" != 0 ]; then
  tail -30 "$out/build_tree.log" "$out/build_base.log" "$build/tree.configure.log" "$build/base.configure.log"
  exit 1
fi
grep -i "warning" "$out/build_tree.log" | head -5

phase "bench A/B: $configs, $slots, reps $reps, runs $runs"
for r in $(seq 1 "$runs"); do
  for c in ${configs//,/ }; do
    for side in base tree; do
      "$build/$side/bench/cuda/sdm_gpu_bench" --configs "$c" --slots "$slots" --reps "$reps" --training-only \
        --digest >> "$out/bench_$side.log" 2>&1
    done
  done
done
python3 - "$out/bench_base.log" "$out/bench_tree.log" <<'EOF'
import re, sys, collections
def read(path):
    ms, dig = collections.defaultdict(list), {}
    for line in open(path):
        m = re.match(r"(\S+), (\S+), C (\d+) training step, snapshot (\S+): ([\d.]+) ms", line)
        if m: ms[(m.group(1), m.group(2))].append(float(m.group(5)))
        m = re.match(r"digests (\S+), (\S+), C (\d+), snapshot (\S+): (.*)", line)
        if m:
            f = m.group(5).split()
            dig[(m.group(1), m.group(2))] = dict(zip(f[0::2], f[1::2]))
    return ms, dig
(bm, bd), (tm, td) = read(sys.argv[1]), read(sys.argv[2])
print("| config | slots | base ms | S1 ms | S1 / base | digests equal | digests differ |")
print("|---|---|---|---|---|---|---|")
for key in bm:
    b, t = min(bm[key]), min(tm.get(key, [float("nan")]))
    eq = [n for n in bd.get(key, {}) if bd[key][n] == td.get(key, {}).get(n)]
    ne = [n for n in bd.get(key, {}) if n not in eq]
    print(f"| {key[0]} | {key[1]} | {b:.3f} | {t:.3f} | {t / b:.3f} | {' '.join(eq)} | {' '.join(ne) or '-'} |")
EOF


# The checks run side by side (they share the GPU; none of them is timed): the three test programs,
# compute-sanitizer memcheck and racecheck on the split's small test, and the mutants.
run_test() {  # run_test NAME
  timeout 300 "$build/tree/tests/gpu/$1" > "$out/$1.log" 2>&1
  echo "$?" > "$out/$1.rc"
}
run_sanitizer() {  # run_sanitizer TOOL
  timeout 200 compute-sanitizer --tool "$1" --error-exitcode 9 "$build/tree/tests/gpu/sdm_gpu_slot_split_tests" \
    "slot split small" > "$out/sanitizer_$1.log" 2>&1
  echo "$?" > "$out/sanitizer_$1.rc"
}
# A mutant: a copy of src/ with one planted bug, the one object compiled from it by the tree
# build's own nvcc command, swapped into a copy of libsdm_cuda.a, and the split test linked on it
# (the tree's build stays untouched).
mutant() {  # mutant NAME FILE(under src/) OBJECT(.cu under src/) SED_EXPR
  local m="$build/mutant_$1" obj="CMakeFiles/sdm_cuda.dir/src/$3.o"
  rm -rf "$m"; mkdir -p "$m"; cp -r "$tree/src" "$m/src"
  sed -i "$4" "$m/src/$2"
  if cmp -s "$m/src/$2" "$tree/src/$2"; then echo "mutant $1: the pattern did not match"; return 1; fi
  local cc link
  cc=$(ninja -C "$build/tree" -t commands "$obj" | tail -1)
  cc=${cc//"$tree/src"/"$m/src"}
  cc="${cc% -o *} -o $m/$(basename "$3").o"
  link=$(ninja -C "$build/tree" -t commands tests/gpu/sdm_gpu_slot_split_tests | tail -1)
  link=${link//" libsdm_cuda.a "/" $m/libsdm_cuda.a "}
  link=${link//"-o tests/gpu/sdm_gpu_slot_split_tests"/"-o $m/sdm_gpu_slot_split_tests"}
  ( cd "$build/tree" && eval "${cc/-MD -MT*-MF * -x cu/-x cu}" && cp libsdm_cuda.a "$m/" &&
    ar r "$m/libsdm_cuda.a" "$m/$(basename "$3").o" && eval "$link" ) > "$m/build.log" 2>&1 ||
    { echo "mutant $1: build failed"; tail -20 "$m/build.log"; return 1; }
}
run_mutant() {  # run_mutant NAME
  local m="$build/mutant_$1"
  timeout 200 "$m/sdm_gpu_slot_split_tests" "heavy reuse" > "$out/mutant_$1.log" 2>&1
  local rc=$?
  echo "mutant $1: rc $rc ($( [ "$rc" = 1 ] && echo caught || echo NOT caught)): $(tail -1 "$out/mutant_$1.log")"
  grep FAIL "$out/mutant_$1.log" | sed 's/ (differ.*//' | sort | uniq -c | sort -rn | head -6
  [ "$rc" = 1 ] || status=1
}

test_names="sdm_gpu_slot_split_tests sdm_gpu_backward_tests sdm_gpu_repeated_writes_tests"
if [ "$tests" = 1 ]; then
  phase "checks: tests$( [ "$sanitizer" = 1 ] && echo ", sanitizers")$( [ "$mutant" = 1 ] && echo ", mutants") side by side"
  pids=""
  for t in $test_names; do run_test "$t" & pids="$pids $!"; done
  if [ "$sanitizer" = 1 ]; then
    for tool in memcheck racecheck; do run_sanitizer "$tool" & pids="$pids $!"; done
  fi
  if [ "$mutant" = 1 ]; then
    ( mutant skip_step cuda/backward/entries.cu cuda/backward/entries.cu \
        's/sum_steps(bb.dk_eff, bb.dot_steps, e)/sum_steps(bb.dk_eff, bb.dot_steps > 1 ? bb.dot_steps - 1 : 1, e)/' &&
        run_mutant skip_step ) > "$out/mutant_skip_step.summary" 2>&1 & pids="$pids $!"
    ( mutant split_stride cuda/backward/slot_split.cuh cuda/backward/slots.cu \
        '0,/s += members) {/s//s += members + (members > 1 ? 1 : 0)) {/' &&
        run_mutant split_stride ) > "$out/mutant_split_stride.summary" 2>&1 & pids="$pids $!"
  fi
  for pid in $pids; do wait "$pid"; done
  phase "checks done"
  for t in $test_names; do
    rc=$(cat "$out/$t.rc")
    grep FAIL "$out/$t.log" | head -10
    echo "$t rc $rc: $(tail -1 "$out/$t.log")"
    [ "$rc" = 0 ] || status=1
  done
  if [ "$sanitizer" = 1 ]; then
    for tool in memcheck racecheck; do
      rc=$(cat "$out/sanitizer_$tool.rc")
      echo "compute-sanitizer $tool rc $rc: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer_$tool.log" | tail -1)" \
        "| $(grep 'checks,' "$out/sanitizer_$tool.log" | tail -1)"
      [ "$rc" = 0 ] || status=1
    done
  fi
  if [ "$mutant" = 1 ]; then
    for m in skip_step split_stride; do
      cat "$out/mutant_$m.summary"
      grep -q "(caught)" "$out/mutant_$m.summary" || status=1
    done
  fi
fi

phase "done, status $status"
exit "$status"
