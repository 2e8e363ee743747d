#!/usr/bin/env bash
# test_install.sh BUILD_DIR - installs the C++ library built in BUILD_DIR into a fresh prefix,
# builds tests/install (a separate project: find_package(sdm), sdm::sdm, #include <sdm/sdm.hpp>)
# against that prefix alone, and runs it (the C++ example). Fails if any step fails, if the
# prefix lacks the headers, libraries or package files, or if the consumer saw the source tree.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:?usage: scripts/test_install.sh BUILD_DIR}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
for f in include/sdm/sdm.hpp include/sdm/ops.hpp lib/cmake/sdm/sdmConfig.cmake lib/cmake/sdm/sdmConfigVersion.cmake \
         lib/cmake/sdm/sdmTargets.cmake lib/libsdm_core.a lib/libsdm_ops.a; do
  [ -f "$prefix/$f" ] || { echo "test_install: $f missing from the installed tree" >&2; exit 1; }
done
# The consumer's build reads only the prefix (no path into this checkout's include/ or src/).
cmake -S tests/install -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  >"$work/configure.log"
cmake --build "$work/consumer" >"$work/build.log"
if grep -q -- "-I$PWD/\(include\|src\)" "$work/consumer/build.ninja"; then
  echo "test_install: the consumer was compiled against the source tree" >&2
  exit 1
fi
"$work/consumer/sdm_consumer_example"
echo "test_install: a find_package(sdm) project built against $prefix and ran the example"
