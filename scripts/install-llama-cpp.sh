#!/usr/bin/env bash
# Installs the pinned llama.cpp that specdec's llama.cpp adapter is tested with, once, into a prefix
# outside the checkout, and prints that prefix on its last line of stdout.
#
#   scripts/install-llama-cpp.sh            the library (CMake package `llama`), ggml-rpc-server
#                                           (the RPC test starts one) and gguf-py: what
#                                           scripts/test.sh and CI use
#   scripts/install-llama-cpp.sh --tools    also llama.cpp's own programs that
#                                           bench/llama_cpp_compare.py runs side by side with
#                                           specdec (llama-completion, llama-speculative-simple,
#                                           llama-speculative, llama-bench), the batched
#                                           comparison's (llama-batched-bench, llama-parallel)
#                                           and llama-tokenize
#
# Debian has no llama.cpp package; the npm package node-llama-cpp carries llama.cpp's own source
# tree as a git bundle (llama/gitRelease.bundle). We fetch a pinned version of it from the npm
# registry, check the bundle's commit and build llama.cpp CPU-only with the RPC backend.
#
# Skipped when the prefix already holds this commit's install (a stamp file) and, with --tools,
# the tools, so a second run and CI on the same machine cost nothing. A --tools request after a
# plain install builds the tools (the source is fetched and the library's objects rebuilt again,
# ~10 minutes) and adds them without touching the installed library. Environment:
#   SPECDEC_LLAMA_PREFIX   where to install (default ~/.cache/specdec/llama.cpp-<commit>)
#   SPECDEC_LLAMA_TOOLS=1  the same as --tools
#   JOBS                   build parallelism (default: nproc)
set -euo pipefail

npm_version="3.22.1"
commit="de3ff815ea7d559ee917f063901b8986f038abc6"  # llama.cpp as of 2026-09-28
prefix="${SPECDEC_LLAMA_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/specdec/llama.cpp-${commit:0:12}}"
# The stamp names the build's flavour too: an install of another flavour is rebuilt.
flavour="noamx"
stamp="$prefix/.specdec-installed-$commit-$flavour"
jobs="${JOBS:-$(nproc)}"
want_tools="${SPECDEC_LLAMA_TOOLS:-0}"
case "${1:-}" in
  --tools) want_tools=1 ;;
  "") ;;
  *) echo "usage: $0 [--tools]" >&2; exit 2 ;;
esac
# Always ggml-rpc-server (tests/llama_cpp/llama_cpp_rpc_test); the comparison's tools on request.
programs=(ggml-rpc-server)
[ "$want_tools" = 1 ] && programs+=(llama-completion llama-speculative-simple llama-speculative
                                    llama-bench llama-batched-bench llama-parallel llama-tokenize)
have_programs() {
  local program
  for program in "${programs[@]}"; do [ -x "$prefix/bin/$program" ] || return 1; done
}

if [ -f "$stamp" ] && have_programs; then
  echo "$prefix"
  exit 0
fi

tools=(npm git cmake tar)
[ "$want_tools" = 1 ] && tools+=(python3)  # the llama-parallel patch below
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null || { echo "install-llama-cpp: '$tool' is required" >&2; exit 1; }
done

# The build tree sits next to the prefix (not in /tmp), so an interrupted build resumes.
work="$prefix.build"
mkdir -p "$work"
cd "$work"
if [ "$(git -C src rev-parse HEAD 2>/dev/null)" != "$commit" ]; then
  echo "install-llama-cpp: fetching node-llama-cpp@$npm_version (llama.cpp ${commit:0:12})" >&2
  rm -rf src package ./*.tgz
  npm pack --silent "node-llama-cpp@$npm_version" >/dev/null
  tar xzf "node-llama-cpp-$npm_version.tgz" package/llama/gitRelease.bundle
  git clone -q package/llama/gitRelease.bundle src 2>/dev/null
  head="$(git -C src rev-parse HEAD)"
  if [ "$head" != "$commit" ]; then
    echo "install-llama-cpp: node-llama-cpp@$npm_version carries llama.cpp $head, expected $commit" >&2
    exit 1
  fi
fi

echo "install-llama-cpp: building (CPU, RPC backend; ~10 minutes on 2 cores) into $prefix" >&2
common=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" -DBUILD_SHARED_LIBS=ON
        -DCMAKE_INSTALL_RPATH="$prefix/lib" -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DGGML_NATIVE=ON -DGGML_RPC=ON -DLLAMA_CURL=OFF
        -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF
        -DLLAMA_TOOLS_INSTALL=OFF)
# GGML_NATIVE builds for the build machine's CPU, AMX included where it has AMX, and this
# llama.cpp's AMX kernels die on such CPUs: SIGILL at the first tile load of a Q8_0 or Q4_0
# matrix product (ggml-cpu/amx requests the tile state for the main thread only and keeps its
# tile configuration where the compiler may drop it; seen on a Xeon with amx_tile / amx_int8 /
# amx_bf16, where f16 weights ran and Q8_0 aborted specdec-llama). So no AMX: explicit -mno-amx-*
# win over -march=native in GCC and Clang, in any order. (Flavour "noamx" above.)
if [ "$(uname -m)" = x86_64 ]; then
  no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  common+=(-DCMAKE_C_FLAGS="$no_amx" -DCMAKE_CXX_FLAGS="$no_amx")
fi
generator=()
command -v ninja >/dev/null && [ ! -f build/Makefile ] && generator=(-G Ninja)
fail() { tail -60 build.log >&2; exit 1; }
# Pass 1: the library alone, so that its install rules are all there is to install. A prefix
# that already holds this commit's library (a --tools request after a plain install) keeps it.
cmake -S src -B build "${generator[@]}" "${common[@]}" -DLLAMA_BUILD_TOOLS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF >build.log 2>&1 || fail
cmake --build build -j"$jobs" >>build.log 2>&1 || fail
if [ ! -f "$stamp" ]; then
  rm -rf "$prefix"
  cmake --install build >>build.log 2>&1 || fail
fi
# llama-parallel prefixes every request with a built-in system prompt of 1141 bytes, which the
# shipped pair (one token per byte, 384 positions) cannot hold: its first line is kept, so that
# the comparison's continuous batching runs on these models (docs/llama_cpp.md). Idempotent.
if [ "$want_tools" = 1 ]; then
  python3 - src/examples/parallel/parallel.cpp <<'PY' || fail
import re, sys
path = sys.argv[1]
source = open(path).read()
if "Recommend a nice restaurant" in source:
    patched = re.sub(r'(static std::string k_system =\s*R"\([^\n]*\n).*?(\)";)', r"\1\2", source,
                     count=1, flags=re.S)
    if patched == source:
        sys.exit("install-llama-cpp: llama-parallel's system prompt not found")
    open(path, "w").write(patched)
PY
fi
# Pass 2: the same tree with tools and examples configured; only the programs asked for are
# built (the library objects are reused; ggml-rpc-server needs ggml alone) and copied in by hand.
cmake -S src -B build -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=ON >>build.log 2>&1 || fail
cmake --build build -j"$jobs" --target "${programs[@]}" >>build.log 2>&1 || fail
mkdir -p "$prefix/bin" "$prefix/share/llama.cpp"
for t in "${programs[@]}"; do install -m 755 "build/bin/$t" "$prefix/bin/$t"; done
# The tools' own shared libraries (llama-common, the *-impl libraries) are not part of the
# library's install: copy whichever the prefix lacks (RPATH is already $prefix/lib).
find build -name 'lib*.so*' | while read -r lib; do
  [ -e "$prefix/lib/$(basename "$lib")" ] || cp -P "$lib" "$prefix/lib/"
done
rm -rf "$prefix/share/llama.cpp/gguf-py"
cp -r src/gguf-py "$prefix/share/llama.cpp/gguf-py"
git -C src log -1 --format='%H %ad' >"$prefix/share/llama.cpp/COMMIT"
touch "$stamp"
cd /
rm -rf "$work"
echo "install-llama-cpp: done" >&2
echo "$prefix"
