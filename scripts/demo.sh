#!/usr/bin/env bash
# README's first command: installs what is missing, builds the demo (Release, -O3 -march=native)
# in build/release and runs it on the shipped King James Bible models. Arguments go to the demo:
#   scripts/demo.sh
#   scripts/demo.sh --prompt "John 3:16 " --temperature 0.8 --top-p 0.95 -k 6
#   scripts/demo.sh --help
# Environment: BUILD_DIR (default build/release), JOBS (default nproc) parallel build jobs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The Eigen demo needs no llama.cpp: skip its ~10-minute build here (scripts/test.sh does it).
SPECDEC_WITH_LLAMA_CPP="${SPECDEC_WITH_LLAMA_CPP:-OFF}" "$root/scripts/install-deps.sh"
build="${BUILD_DIR:-$root/build/release}"
echo "building specdec-demo in $build ..." >&2
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSPECDEC_BUILD_EXAMPLES=ON >/dev/null
cmake --build "$build" -j"${JOBS:-$(nproc)}" --target specdec-demo >/dev/null
exec "$build/examples/specdec-demo" "$@"
