#!/usr/bin/env bash
# Proves specdec can be consumed the two ways fmt's find-package-test/ and add-subdirectory-test/
# check: as an installed CMake package and as a vendored source tree.
#
#   scripts/consumer-test.sh <configured specdec build dir>
#
#  1. cmake --install <build dir> into a temporary prefix, then move the prefix elsewhere
#     (an installed package must be relocatable) and check no installed file names the source
#     or build tree (nor llama.cpp's prefix: the package finds llama.cpp, it does not record it);
#  2. tests/consumer/find_package: find_package(specdec CONFIG REQUIRED) with
#     CMAKE_PREFIX_PATH=<prefix> (and the user package registry off, so the build tree cannot
#     be picked up instead), build, run;
#  3. tests/consumer/add_subdirectory: add_subdirectory(<repo root>), build, run.
# Both consumers compile with -Wall -Wextra -Werror and run a greedy generation whose tokens
# they check. They use the build dir's C++ compiler. Then
#  4. tests/consumer/warnings: a user program (speculative and plain decoding, greedy and
#     sampled with top-p / top-k / min-p, every draft-length policy, both verifiers, n-gram
#     lookup) compiled with -O2 -Wall -Wextra -Wpedantic -Werror and the stricter warnings of
#     tests/consumer/strict_warnings.cmake (-Wconversion, -Wfloat-equal, ...) in four modes: GCC
#     and Clang, each portable and with -march=native; built and run in each.
#     All four run; the step fails if any of them does, naming it.
#
# When the build dir was configured with the llama.cpp adapter (SPECDEC_WITH_LLAMA_CPP not OFF
# and llama_DIR found in its cache), the steps also cover specdec::llama_cpp, with llama.cpp's
# prefix (derived from llama_DIR) in CMAKE_PREFIX_PATH next to specdec's:
#  1. the package must hold specdecLlamaCppTargets.cmake, specdec/llama_cpp.hpp and every header
#     of specdec/llama_cpp/ (and none of them without the adapter);
#  2. find_package(specdec CONFIG REQUIRED COMPONENTS llama_cpp) defines specdec::llama_cpp, and
#     tests/consumer/llama_cpp.cpp (TextDecoder::complete_prefix; with a GGUF file, a short greedy
#     speculative generation) is built against it with the strict warnings and run on the tiny
#     GGUF model of the build dir (<build>/models/tiny-target.gguf, or SPECDEC_CONSUMER_GGUF;
#     without one it runs the model-free checks only). Then, configuring only: with llama.cpp's
#     package not findable, find_package(specdec) still succeeds without specdec::llama_cpp and
#     COMPONENTS llama_cpp fails; a copy of the package without specdecLlamaCppTargets.cmake
#     behaves the same with llama.cpp findable;
#  3. the add_subdirectory consumer (SPECDEC_WITH_LLAMA_CPP=ON) builds and runs the same program;
#  4. the portable GCC and Clang modes build and run it too.
# Otherwise the llama.cpp parts are skipped, saying so.
# Exits non-zero on the first failing step.
# Environment: JOBS (default 2) parallel build jobs; KEEP_WORK=1 keeps the temporary dir;
# SPECDEC_GCC / SPECDEC_CLANG (default g++ / clang++) the compilers of step 4;
# SPECDEC_CONSUMER_GGUF the GGUF file the llama.cpp consumers load.
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
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
cxx="$(cache_value CMAKE_CXX_COMPILER)"
jobs="${JOBS:-2}"

# The llama.cpp adapter is built when SPECDEC_WITH_LLAMA_CPP is AUTO or ON and llama was found.
llama=0
llama_prefix=""
gguf_arg=()
llama_dir="$(cache_value llama_DIR)"
if [ "$(cache_value SPECDEC_WITH_LLAMA_CPP)" != OFF ] && [ -n "$llama_dir" ] &&
   [ "${llama_dir%-NOTFOUND}" = "$llama_dir" ] && [ -d "$llama_dir" ]; then
  llama=1
  # llama_DIR is <prefix>/{lib,lib64,share,lib/<multiarch>}/cmake/llama.
  libdir="${llama_dir%/cmake/*}"
  case "$(basename "$(dirname "$libdir")")" in lib | lib32 | lib64) libdir="$(dirname "$libdir")" ;; esac
  llama_prefix="$(dirname "$libdir")"
  gguf="${SPECDEC_CONSUMER_GGUF:-$build/models/tiny-target.gguf}"
  gguf_arg=()
  if [ -f "$gguf" ]; then
    gguf_arg=("$gguf")
  else
    echo "consumer-test: no GGUF model at $gguf (built by the target specdec_gguf_models):" \
         "the llama.cpp consumers run without one"
  fi
else
  echo "consumer-test: $build was configured without the llama.cpp adapter:" \
       "specdec::llama_cpp consumers skipped"
fi

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
tree_paths=(-e "$root/" -e "$build")
((llama)) && tree_paths+=(-e "$llama_prefix")
if grep -rIl "${tree_paths[@]}" "$work/prefix"; then
  fail "the installed files above refer to the source or build tree or to llama.cpp's prefix"
fi
[ -f "$work/prefix/include/specdec/specdec.hpp" ] || fail "include/specdec/specdec.hpp not installed"
llama_files=("$(cd "$work/prefix" && find . -name specdecLlamaCppTargets.cmake)"
             "$(cd "$work/prefix" && find . -name llama_cpp.hpp)")
if ((llama)); then
  for file in "${llama_files[@]}"; do
    [ -n "$file" ] || fail "specdecLlamaCppTargets.cmake or specdec/llama_cpp.hpp not installed"
  done
  # Every header of the adapter's folder (llama_cpp.hpp includes them all).
  while IFS= read -r header; do
    [ -f "$work/prefix/include/specdec/llama_cpp/$header" ] ||
      fail "include/specdec/llama_cpp/$header not installed"
  done < <(cd "$root/include/specdec/llama_cpp" && find . -name '*.hpp' | sed 's|^\./||')
else
  for file in "${llama_files[@]}"; do
    [ -z "$file" ] || fail "$file installed by a build without the llama.cpp adapter"
  done
  [ ! -e "$work/prefix/include/specdec/llama_cpp" ] ||
    fail "include/specdec/llama_cpp/ installed by a build without the llama.cpp adapter"
fi

find_package_args=("-DCMAKE_PREFIX_PATH=$work/prefix")
((llama)) && find_package_args=("-DCMAKE_PREFIX_PATH=$work/prefix;$llama_prefix"
                                -DSPECDEC_CONSUMER_LLAMA_CPP=REQUIRED)
step "find_package consumer (${find_package_args[*]})"
cmake -S "$root/tests/consumer/find_package" -B "$work/find_package" "${common[@]}" \
  "${find_package_args[@]}"
found="$(sed -n 's/^specdec_DIR:PATH=//p' "$work/find_package/CMakeCache.txt")"
case "$found" in
  "$work/prefix"/*) ;;
  *) fail "find_package(specdec) used $found, not the install prefix $work/prefix" ;;
esac
cmake --build "$work/find_package" -j "$jobs"
"$work/find_package/consumer" || fail "find_package consumer"
if ((llama)); then
  "$work/find_package/llama_consumer" "${gguf_arg[@]}" || fail "find_package llama.cpp consumer"

  # find_package(specdec) alone, no build: $1 OFF (must succeed without specdec::llama_cpp) or
  # REQUIRED (must fail, its output matching $2); the rest are cmake arguments.
  configure_only() {
    local expect="$1" pattern="$2" dir="$work/configure-only"
    shift 2
    rm -rf "$dir"
    if cmake -S "$root/tests/consumer/find_package" -B "$dir" "${common[@]}" \
         -DSPECDEC_CONSUMER_CONFIGURE_ONLY=ON "-DSPECDEC_CONSUMER_LLAMA_CPP=$expect" "$@" \
         >"$dir.log" 2>&1; then
      [ "$expect" = OFF ] && return 0
      cat "$dir.log" >&2
      fail "COMPONENTS llama_cpp was found ($*)"
    fi
    if [ "$expect" = REQUIRED ] && grep -q -- "$pattern" "$dir.log"; then return 0; fi
    cat "$dir.log" >&2
    fail "find_package(specdec) with SPECDEC_CONSUMER_LLAMA_CPP=$expect ($*)"
  }
  # llama.cpp's prefix left out of CMAKE_PREFIX_PATH (and, where that suffices, its search
  # disabled, in case a llama package is installed system-wide).
  step "find_package without llama.cpp's package: specdec::specdec alone; COMPONENTS llama_cpp fails"
  configure_only OFF "" "-DCMAKE_PREFIX_PATH=$work/prefix" -DCMAKE_DISABLE_FIND_PACKAGE_llama=ON
  configure_only REQUIRED 'provided by "llama"' "-DCMAKE_PREFIX_PATH=$work/prefix"
  step "find_package of a package without specdecLlamaCppTargets.cmake (llama.cpp findable)"
  cp -a "$work/prefix" "$work/prefix-no-llama"
  find "$work/prefix-no-llama" \( -name 'specdecLlamaCppTargets*.cmake' -o -name llama_cpp.hpp \) \
    -delete
  rm -rf "$work/prefix-no-llama/include/specdec/llama_cpp"
  configure_only OFF "" "-DCMAKE_PREFIX_PATH=$work/prefix-no-llama;$llama_prefix"
  configure_only REQUIRED "installed without the" \
    "-DCMAKE_PREFIX_PATH=$work/prefix-no-llama;$llama_prefix"
fi

# A subproject build with or without the adapter, as the build dir was.
with_llama=(-DSPECDEC_WITH_LLAMA_CPP=OFF)
((llama)) && with_llama=(-DSPECDEC_WITH_LLAMA_CPP=ON "-DCMAKE_PREFIX_PATH=$llama_prefix")
step "add_subdirectory consumer ($root, ${with_llama[*]})"
cmake -S "$root/tests/consumer/add_subdirectory" -B "$work/add_subdirectory" "${common[@]}" \
  "-DSPECDEC_SOURCE_DIR=$root" "${with_llama[@]}"
cmake --build "$work/add_subdirectory" -j "$jobs"
"$work/add_subdirectory/consumer" || fail "add_subdirectory consumer"
if ((llama)); then
  "$work/add_subdirectory/llama_consumer" "${gguf_arg[@]}" ||
    fail "add_subdirectory llama.cpp consumer"
fi

gcc="${SPECDEC_GCC:-g++}"
clang="${SPECDEC_CLANG:-clang++}"
step "warnings: user programs with -Wall -Wextra -Wpedantic -Werror and stricter warnings ($gcc, $clang)"
failed=()
for mode in "gcc portable" "gcc native" "clang portable" "clang native"; do
  read -r family arch <<<"$mode"
  compiler="$gcc"
  [ "$family" = clang ] && compiler="$clang"
  native=OFF
  [ "$arch" = native ] && native=ON
  # The llama.cpp adapter's user program in the portable modes (its header has no SIMD paths).
  mode_llama=(-DSPECDEC_WITH_LLAMA_CPP=OFF)
  label=""
  if ((llama)) && [ "$arch" = portable ]; then
    mode_llama=(-DSPECDEC_WITH_LLAMA_CPP=ON "-DCMAKE_PREFIX_PATH=$llama_prefix")
    label=", with the llama.cpp adapter"
  fi
  command -v "$compiler" >/dev/null || fail "$compiler not found (scripts/install-deps.sh installs it)"
  dir="$work/warnings-$family-$arch"
  printf -- '-- %s, %s%s\n' "$compiler" "$arch" "$label"
  if cmake -S "$root/tests/consumer/warnings" -B "$dir" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
       "-DCMAKE_CXX_COMPILER=$compiler" "-DSPECDEC_SOURCE_DIR=$root" \
       "-DSPECDEC_CONSUMER_NATIVE=$native" "${mode_llama[@]}" >/dev/null &&
     cmake --build "$dir" -j "$jobs" && "$dir/user" &&
     { [ ! -e "$dir/llama_consumer" ] || "$dir/llama_consumer" "${gguf_arg[@]}"; }; then
    :
  else
    failed+=("$family $arch")
  fi
done
((${#failed[@]} == 0)) || fail "warnings consumer: ${failed[*]}"

step "passed"
