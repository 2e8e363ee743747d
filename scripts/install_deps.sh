#!/usr/bin/env bash
# Installs what the build and the tests need on a fresh Debian machine, only what is missing.
#   scripts/install_deps.sh          C++ toolchain, CMake, Ninja, GoogleTest, python3 + venv
set -euo pipefail

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
# Python tests (make test-python): python3 with venv/ensurepip (Debian splits it out).
command -v python3 >/dev/null || need+=(python3)
python3 -c "import ensurepip, venv" 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "install_deps: apt-get install ${need[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
