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
# 2.0.0's JIT extensions: .peer/bench/jit-cache/ext2.tgz.part-* unpacked at /tmp/ext2 (as
# .peer/bench/run.sh does), then a check (seconds; jit_check.log) prints one line per extension: its
# build dir (2.0.0 names it <base>_<sha256 of sources, flags, torch, CUDA, Python, realpath of CUDA
# home, TORCH_CUDA_ARCH_LIST, GPU capabilities, NVCC_APPEND/PREPEND_FLAGS>: a different value is
# another dir, a full build) in the cache or not, torch's build.ninja for it the same as the cache's
# or not (CC, CXX, CUDA home, torch's path are in its command lines: ninja rebuilds on a change), and
# ninja's verdict (`ninja -n -d explain`). So 2.0.0 runs under the cache's own build inputs: /tmp/ext2,
# TORCH_CUDA_ARCH_LIST=9.0, CC / CXX / CUDA_HOME as its build.ninja records them, no NVCC_*_FLAGS. An
# extension ninja would rebuild only because the machine image's files are newer than the cache
# (same build.ninja) gets its outputs and ninja logs stamped now (PEER_JIT_REFRESH=0: not).
# All current: warm2.py runs one call of each path (about 55 s; SDM_WARM2_TIMEOUT, default 150 s).
# A miss: 2.0.0 is skipped with a message (a full build takes about 6 min, more than a 600 s call leaves
# the benchmark), unless SDM_PEER_BUILD=1 (then warm2 builds them, up to 420 s).
# SDM_PEER_BUDGET (default 580 s): the whole script's time; warm2 and the benchmark get what is left
# (set it lower when scripts/gpu_check.sh ran earlier in the same call).
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
budget="${SDM_PEER_BUDGET:-580}"

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

left() { echo $(( budget - ($(date +%s) - t0) )); }
min() { [ "$1" -lt "$2" ] && echo "$1" || echo "$2"; }
use_sdm2=0
if [ -d "$sdm2/sparse_delta_memory" ]; then
  ext=/tmp/ext2   # fixed: the cache's build.ninja files name /tmp/ext2/<name>/main.cpp, unit0.cu
  parts=("$peer"/bench/jit-cache/ext2.tgz.part-*)
  ref=""          # one of the cache's build.ninja files, as archived
  if [ -f "${parts[0]}" ]; then
    if [ ! -d "$ext" ]; then
      cat "${parts[@]}" | tar xzf - -C /tmp && echo "2.0.0 JIT cache unpacked at $ext"
    else
      cat "${parts[@]}" | tar xzf - -C /tmp --skip-old-files && echo "2.0.0 JIT cache: $ext was there; files it lacked added"
    fi
    ref=$(cat "${parts[@]}" | tar xzf - -O --wildcards 'ext2/sdm_image_probe_*/build.ninja' 2>/dev/null)
  fi
  # The environment the cache was built under, for every 2.0.0 process (check, warm2, benchmark).
  pin=(TORCH_EXTENSIONS_DIR="$ext" TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS="${MAX_JOBS:-3}" WARM_PAR="${WARM_PAR:-5}")
  drop=(-u NVCC_APPEND_FLAGS -u NVCC_PREPEND_FLAGS -u PYTORCH_NVCC)
  if [ "${TORCH_CUDA_ARCH_LIST:-9.0}" != 9.0 ]; then
    echo "2.0.0: TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST here; 9.0 (the cache's) for 2.0.0"
  fi
  pin_var() {  # name, the cache's value (empty: unset when built), what it must be (-x file, -d dir)
    local now="${!1-}"
    if [ -z "$2" ]; then
      [ -n "$now" ] && { echo "2.0.0: $1=$now here, unset when the cache was built: unset for 2.0.0"; drop+=(-u "$1"); }
    elif [ "$now" != "$2" ]; then
      if [ "$3" "$2" ]; then
        echo "2.0.0: $1=${now:-(unset)} here; $2 for 2.0.0 (the cache's build.ninja)"
        pin+=("$1=$2")
      else
        echo "2.0.0: the cache was built with $1=$2, which this machine lacks (the check shows what rebuilds)"
      fi
    fi
  }
  if [ -n "$ref" ]; then
    pin_var CXX "$(printf '%s\n' "$ref" | sed -n 's/^cxx = //p')" -x
    pin_var CC "$(printf '%s\n' "$ref" | sed -n 's/^cuda_cflags = -ccbin \([^ ]*\) .*/\1/p')" -x
    cuda_home=$(printf '%s\n' "$ref" | sed -n 's/^nvcc = //p')
    pin_var CUDA_HOME "${cuda_home%/bin/nvcc}" -d
  fi
  p2env() { env "${drop[@]}" "${pin[@]}" "$@"; }
  unlock() {  # a build killed mid-way leaves build_dir/lock, and torch then waits on it forever
    local l
    for l in "$ext"/*/lock; do [ -e "$l" ] && rm -f "$l" && echo "2.0.0: removed a stale lock $l"; done
  }
  unlock

  phase "2.0.0 JIT cache check (jit_check.log)"
  PYTHONPATH="$sdm2" p2env timeout 90 "$python" - >"$out/jit_check.log" 2>&1 <<'PY'
import os, re, struct, subprocess, sys, time

ROOT = os.environ["TORCH_EXTENSIONS_DIR"]
REFRESH = os.environ.get("PEER_JIT_REFRESH", "1") == "1"
JOBS = [(m, "_module", ()) for m in (
    "phase1_cuda", "mover_fx_cuda", "mover_da2_cuda", "pa_dc_cuda", "gx_pa2_cuda", "gx_gds_cuda", "phase1_bwd_cuda",
    "gather_cuda", "gx_gemm_cuda", "bwd_steps_cuda", "px_qrec_cuda", "product_key_topk_cuda",
    "product_key_topk_anyf_cuda")] + [("gx_gds_cuda", "_tail_module", ()), ("gx_pa2_cuda", "_tail_module", ()),
    ("gather_ns_cuda", "_build", (False,)), ("gather_ns_cuda", "_build", (True,)), ("_image", "probe", ())]
TIME_ONLY = re.compile(r"older than most recent input|stored deps info out of date|recorded mtime of")


def ninja_explain(d):
    """(current, first reason) of `ninja -n -d explain` in build dir d (a dry run: it writes nothing)."""
    p = subprocess.run(["ninja", "-C", d, "-n", "-d", "explain"], capture_output=True, text=True)
    text = p.stdout + p.stderr
    if p.returncode == 0 and "no work to do" in text:
        return True, ""
    reasons = [ln[len("ninja explain: "):] for ln in text.splitlines() if ln.startswith("ninja explain: ")]
    for r in reasons:   # "<input> is dirty" for an input that does not exist: a missing dependency
        m = re.match(r"(/\S+) is dirty$", r)
        if m and not os.path.exists(m.group(1)):
            return False, f"dependency {m.group(1)} is missing"
    real = [r for r in reasons if not r.endswith(" is dirty")] or reasons or (text.strip().splitlines() or ["?"])[-1:]
    return False, str(real[0])


def refresh_times(d):
    """Stamp the outputs, the build log and the deps log with one time, now: ninja then judges the cache by its
    command lines and dependencies alone, not by the machine image's file times (ninja: an output older than a
    header, or a deps log older than its output, is rebuilt). Only called when build.ninja is the cache's own."""
    t = time.time_ns()
    log, deps = os.path.join(d, ".ninja_log"), os.path.join(d, ".ninja_deps")
    lines = open(log).read().splitlines(keepends=True)
    out = [lines[0]]
    for ln in lines[1:]:
        f = ln.rstrip("\n").split("\t")
        if len(f) == 5:
            if os.path.exists(os.path.join(d, f[3])):
                os.utime(os.path.join(d, f[3]), ns=(t, t))
            f[2] = str(t)
            ln = "\t".join(f) + "\n"
        out.append(ln)
    b = bytearray(open(deps, "rb").read())
    head = b"# ninjadeps\n"
    if not b.startswith(head) or struct.unpack_from("<i", b, len(head))[0] != 4:
        return "deps log not version 4: left alone"
    off = len(head) + 4
    while off + 4 <= len(b):
        word = struct.unpack_from("<I", b, off)[0]
        if word & 0x80000000:   # a deps record: output id, mtime (uint64, low word first), dependency ids
            struct.pack_into("<Q", b, off + 8, t)
        off += 4 + (word & 0x7FFFFFFF)
    for path, data, mode in ((log, "".join(out), "w"), (deps, bytes(b), "wb")):
        with open(path + ".tmp", mode) as f:
            f.write(data)
        os.replace(path + ".tmp", path)
    return ""


def main():
    import torch
    from torch.utils import cpp_extension as ce
    import importlib
    from sparse_delta_memory.cuda import _build as B, _image as I
    for attr in ("_run_ninja_build", "_write_ninja_file_and_build_library", "_jit_compile"):
        if not hasattr(ce, attr):   # the hook below would not stop the build: no verdict rather than a build
            print(f"2.0.0 JIT check: torch.utils.cpp_extension.{attr} missing in torch {torch.__version__}", flush=True)
            sys.exit(2)
    for attr in ("_extension_name", "load_cuda_extension"):
        if not hasattr(B, attr):
            print(f"2.0.0 JIT check: sparse_delta_memory.cuda._build.{attr} missing", flush=True)
            sys.exit(2)

    print(f"2.0.0 JIT check: torch {torch.__version__} cuda {torch.version.cuda} {sys.implementation.cache_tag}, "
          f"CUDA_HOME {ce.CUDA_HOME} -> {ce.CUDA_HOME and os.path.realpath(ce.CUDA_HOME)}, TORCH_CUDA_ARCH_LIST "
          f"{os.environ.get('TORCH_CUDA_ARCH_LIST')!r}, capabilities "
          f"{sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})}, CC "
          f"{os.environ.get('CC')!r} CXX {os.environ.get('CXX')!r} (the cache: 2.11.0+cu130 13.0 cpython-312, "
          f"/usr/local/cuda -> /usr/local/cuda-13.0, '9.0', [(9, 0)], /opt/gcc/bin/gcc, /opt/gcc/bin/g++)", flush=True)

    class Stop(Exception):
        pass

    st = {}
    real_name = B._extension_name

    def name_hook(base, **kw):
        full = real_name(base, **kw)
        d = os.path.join(ROOT, full)
        st.update(name=full, dir=d, existed=os.path.isdir(d) and os.path.exists(os.path.join(d, ".ninja_log")))
        bn = os.path.join(d, "build.ninja")
        st["old"] = open(bn).read() if os.path.exists(bn) else None
        return full

    def run_ninja_hook(build_directory, *a, **k):   # torch has written build.ninja as it would to build: judge, stop
        raise Stop

    B._extension_name, ce._run_ninja_build = name_hook, run_ninja_hook
    cached = set(os.listdir(ROOT)) if os.path.isdir(ROOT) else set()
    miss = 0
    for mod, fn, args in JOBS:
        st.clear()
        label = f"{mod}.{fn}{'(l2=%s)' % args[0] if args else ''}"
        try:
            if mod == "_image":
                B.load_cuda_extension(I.PROBE_BASE, cpp_sources=I._PROBE_CPP, cuda_sources=I._PROBE_SOURCE,
                                      functions=("sdm_image_ptx",))
            else:
                getattr(importlib.import_module("sparse_delta_memory.cuda." + mod), fn)(*args)
            print(f"2.0.0 JIT {label}: loaded without a build step (?)", flush=True)
            continue
        except Stop:
            pass
        except Exception as exc:  # noqa: BLE001
            print(f"2.0.0 JIT {label}: check failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            miss += 1
            continue
        name, d = st["name"], st["dir"]
        if not st["existed"]:
            same_base = sorted(n for n in cached if n.rsplit("_", 1)[0] == name.rsplit("_", 1)[0])
            print(f"2.0.0 JIT {label}: {name} NOT in the cache (cache has {same_base or 'none'}: "
                  f"built under other hash inputs) -> full build", flush=True)
            miss += 1
            continue
        new = open(os.path.join(d, "build.ninja")).read()
        same = new == st["old"]
        diff = ""
        if not same:
            pair = next(((o, n) for o, n in zip(st["old"].splitlines(), new.splitlines()) if o != n), ("", ""))
            diff = f" (cache: {pair[0][:150]!r} now: {pair[1][:150]!r})"
        ok, why = ninja_explain(d)
        note = ""
        if not ok and same and REFRESH and TIME_ONLY.search(why):
            note = refresh_times(d) or f"; refreshed the timestamps (was: {why})"
            ok, why = ninja_explain(d)
        verdict = "current" if ok else f"WOULD REBUILD: {why}"
        print(f"2.0.0 JIT {label}: {name} in the cache, build.ninja {'same' if same else 'CHANGED' + diff}, "
              f"ninja: {verdict}{note}", flush=True)
        miss += not ok
    print(f"2.0.0 JIT check: {len(JOBS) - miss} of {len(JOBS)} current, {miss} to build", flush=True)
    sys.exit(3 if miss else 0)


if __name__ == "__main__":
    main()
PY
  check_rc=$?
  grep "^2.0.0 JIT" "$out/jit_check.log" | cut -c1-400
  [ "$check_rc" = 0 ] || [ "$check_rc" = 3 ] || { tail -5 "$out/jit_check.log"; echo "2.0.0 JIT check failed (rc $check_rc)"; unlock; }

  warm_t=""
  room=$(( $(left) - 200 ))   # what warm2 may take: the benchmark and the test keep 200 s of the budget
  case "$check_rc" in
    3) if [ "${SDM_PEER_BUILD:-0}" = 1 ]; then
         room=$(( $(left) - 150 ))
         warm_t=$(min "${SDM_WARM2_TIMEOUT:-420}" "$room")
         echo "2.0.0: SDM_PEER_BUILD=1: warm2 builds what the check found missing (up to $warm_t s)"
       else
         echo "peer_decode: 2.0.0 SKIPPED: its JIT cache does not match this machine (the lines above say why);" \
           "a full build takes about 6 min, more than a 600 s call leaves the benchmark. SDM_PEER_BUILD=1 builds them"
       fi ;;
    *) warm_t=$(min "${SDM_WARM2_TIMEOUT:-150}" "$room") ;;   # 0: all current; else no verdict: try, within the limit
  esac
  if [ -n "$warm_t" ] && [ "$room" -lt 45 ]; then
    echo "peer_decode: 2.0.0 SKIPPED: $(left) s left of SDM_PEER_BUDGET=$budget, too little for warm2 and the benchmark"
    warm_t=""
  fi
  if [ -n "$warm_t" ] && [ -f "$peer/bench/warm2.py" ]; then
    phase "2.0.0 warm-up (warm2.py, up to $warm_t s; warm2.log)"
    PYTHONPATH="$sdm2" p2env timeout "$warm_t" "$python" "$peer/bench/warm2.py" >"$out/warm2.log" 2>&1
    warm_rc=$?
    echo "warm2 rc=$warm_rc"
    grep -v "^ " "$out/warm2.log" | tail -8
    if [ "$warm_rc" = 0 ]; then
      use_sdm2=1
    else
      unlock
      echo "peer_decode: 2.0.0 SKIPPED in the benchmark: warm2 rc $warm_rc$([ "$warm_rc" = 124 ] && echo ", timed out after $warm_t s")"
    fi
  elif [ -n "$warm_t" ]; then
    use_sdm2=1
  fi
else
  echo "peer_decode: no 2.0.0 at $sdm2 (shared/peer_bench/README.md): sdm's variants only"
fi
if [ "$use_sdm2" = 1 ]; then
  pythonpath="$site:$sdm2"
else
  pythonpath="$site"
  p2env() { "$@"; }
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

bench_t=$(min "${SDM_DECODE_TIMEOUT:-300}" $(( $(left) - 40 )))
[ "$bench_t" -ge 30 ] || bench_t=30
phase "layer decode, side by side (up to $bench_t s; layer_decode.log)"
PYTHONPATH="$pythonpath" p2env timeout "$bench_t" "$python" bench/cuda/layer_decode.py \
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
