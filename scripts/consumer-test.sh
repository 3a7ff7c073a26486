#!/usr/bin/env bash
# Proves specdec can be consumed the two ways fmt's find-package-test/ and add-subdirectory-test/
# check: as an installed CMake package and as a vendored source tree.
#
#   scripts/consumer-test.sh <configured specdec build dir>
#
#  1. cmake --install <build dir> into a temporary prefix, then move the prefix elsewhere
#     (an installed package must be relocatable) and check no installed file names the source
#     or build tree;
#  2. tests/consumer/find_package: find_package(specdec CONFIG REQUIRED) with
#     CMAKE_PREFIX_PATH=<prefix> (and the user package registry off, so the build tree cannot
#     be picked up instead), build, run;
#  3. tests/consumer/add_subdirectory: add_subdirectory(<repo root>), build, run.
# Both consumers compile with -Wall -Wextra -Werror and run a greedy generation whose tokens
# they check. They use the build dir's C++ compiler. Then
#  4. tests/consumer/warnings: a user program (speculative and plain decoding, greedy and
#     sampled with top-p / top-k / min-p, every draft-length policy, both verifiers, n-gram
#     lookup) compiled with -O2 -Wall -Wextra -Wpedantic -Werror and the stricter warnings its
#     CMakeLists.txt lists (-Wconversion, -Wfloat-equal, ...) in four modes: GCC and Clang,
#     each portable and with -march=native; built and run in each.
#     All four run; the step fails if any of them does, naming it.
# Exits non-zero on the first failing step.
# Environment: JOBS (default 2) parallel build jobs; KEEP_WORK=1 keeps the temporary dir;
# SPECDEC_GCC / SPECDEC_CLANG (default g++ / clang++) the compilers of step 4.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 <configured specdec build dir>" >&2
  exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "$1" && pwd)"
if [ ! -f "$build/CMakeCache.txt" ]; then
  echo "consumer-test: $build is not a configured CMake build directory" >&2
  exit 2
fi
cxx="$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")"
jobs="${JOBS:-2}"

work="$(mktemp -d "${TMPDIR:-/tmp}/specdec-consumer.XXXXXX")"
if [ "${KEEP_WORK:-0}" = 1 ]; then
  echo "consumer-test: keeping $work"
else
  trap 'rm -rf "$work"' EXIT
fi
common=(-DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_COMPILER=$cxx" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)

step() { printf '\n== consumer-test: %s\n' "$*"; }
fail() {
  echo "consumer-test: FAILED: $*" >&2
  exit 1
}

step "install $build"
cmake --install "$build" --prefix "$work/staging"
mv "$work/staging" "$work/prefix"
if grep -rIl -e "$root/" -e "$build" "$work/prefix"; then
  fail "the installed files above refer to the source or build tree"
fi
[ -f "$work/prefix/include/specdec/specdec.hpp" ] || fail "include/specdec/specdec.hpp not installed"

step "find_package consumer (CMAKE_PREFIX_PATH=$work/prefix)"
cmake -S "$root/tests/consumer/find_package" -B "$work/find_package" "${common[@]}" \
  "-DCMAKE_PREFIX_PATH=$work/prefix"
found="$(sed -n 's/^specdec_DIR:PATH=//p' "$work/find_package/CMakeCache.txt")"
case "$found" in
  "$work/prefix"/*) ;;
  *) fail "find_package(specdec) used $found, not the install prefix $work/prefix" ;;
esac
cmake --build "$work/find_package" -j "$jobs"
"$work/find_package/consumer" || fail "find_package consumer"

step "add_subdirectory consumer ($root)"
cmake -S "$root/tests/consumer/add_subdirectory" -B "$work/add_subdirectory" "${common[@]}" \
  "-DSPECDEC_SOURCE_DIR=$root"
cmake --build "$work/add_subdirectory" -j "$jobs"
"$work/add_subdirectory/consumer" || fail "add_subdirectory consumer"

gcc="${SPECDEC_GCC:-g++}"
clang="${SPECDEC_CLANG:-clang++}"
step "warnings: a user program with -Wall -Wextra -Wpedantic -Werror and stricter warnings ($gcc, $clang)"
failed=()
for mode in "gcc portable" "gcc native" "clang portable" "clang native"; do
  read -r family arch <<<"$mode"
  compiler="$gcc"
  [ "$family" = clang ] && compiler="$clang"
  native=OFF
  [ "$arch" = native ] && native=ON
  command -v "$compiler" >/dev/null || fail "$compiler not found (scripts/install-deps.sh installs it)"
  dir="$work/warnings-$family-$arch"
  printf -- '-- %s, %s\n' "$compiler" "$arch"
  if cmake -S "$root/tests/consumer/warnings" -B "$dir" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
       "-DCMAKE_CXX_COMPILER=$compiler" "-DSPECDEC_SOURCE_DIR=$root" \
       "-DSPECDEC_CONSUMER_NATIVE=$native" >/dev/null &&
     cmake --build "$dir" -j "$jobs" && "$dir/user"; then
    :
  else
    failed+=("$family $arch")
  fi
done
((${#failed[@]} == 0)) || fail "warnings consumer: ${failed[*]}"

step "passed"
