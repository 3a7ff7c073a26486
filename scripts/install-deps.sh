#!/usr/bin/env bash
# Installs what specdec needs to build, test and run its demos on Debian/Ubuntu.
# Idempotent: packages already present are skipped, so it is cheap to run every time.
#
# Also installs the pinned llama.cpp for the llama.cpp adapter (scripts/install-llama-cpp.sh:
# built once into ~/.cache/specdec, ~10 minutes on 2 cores, skipped afterwards) unless
# SPECDEC_WITH_LLAMA_CPP=OFF, or CMake already finds a llama.cpp of the user's own
# (CMAKE_PREFIX_PATH). `scripts/install-llama-cpp.sh` prints the prefix to configure with.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# clang: scripts/consumer-test.sh also compiles a user program with Clang; libclang-rt-dev holds
# Clang's libFuzzer and sanitizer runtimes for scripts/fuzz.sh. npm and git fetch llama.cpp's
# source; python3-numpy and python3-yaml run llama.cpp's gguf-py (the GGUF export of the shipped models).
# ninja-build: scripts/test.sh builds with Ninja (its .ninja_log has each target's build time);
# clang-format: scripts/format.sh.
packages=(cmake ninja-build g++ clang libclang-rt-dev clang-format make libeigen3-dev libgtest-dev
          libgmock-dev libbenchmark-dev)
with_llama="${SPECDEC_WITH_LLAMA_CPP:-ON}"
if [ "$with_llama" != OFF ]; then
  packages+=(git python3 python3-numpy python3-yaml)
  command -v npm >/dev/null || packages+=(npm)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "$with_llama" != OFF ]; then
  # A llama.cpp the user already has (find_package(llama) through CMAKE_PREFIX_PATH) wins.
  if ! { [ -n "${CMAKE_PREFIX_PATH:-}" ] &&
         find ${CMAKE_PREFIX_PATH//:/ } -path '*/cmake/llama/llama-config.cmake' 2>/dev/null |
           grep -q .; }; then
    "$root/scripts/install-llama-cpp.sh" >/dev/null
  fi
fi
