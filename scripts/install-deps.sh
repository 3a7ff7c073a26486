#!/usr/bin/env bash
# Installs what specdec needs to build, test and run its demo on Debian/Ubuntu.
# Idempotent: packages already present are skipped, so it is cheap to run every time.
set -euo pipefail
# clang: scripts/consumer-test.sh also compiles a user program with Clang; libclang-rt-dev holds
# Clang's libFuzzer and sanitizer runtimes for scripts/fuzz.sh.
packages=(cmake g++ clang libclang-rt-dev make libeigen3-dev libgtest-dev libgmock-dev
          libbenchmark-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
