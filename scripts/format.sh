#!/usr/bin/env bash
# clang-format over the C++ sources of include/ tests/ examples/ bench/, per .clang-format.
#
#   scripts/format.sh            reformats them in place
#   scripts/format.sh --check    changes nothing: lists the files clang-format would change and
#                                exits 1 if there are any (0 when all are formatted)
#
# CLANG_FORMAT names the binary (default clang-format; scripts/install-deps.sh installs it).
# Formatting depends on clang-format's version: compare results from the same one.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
clang_format="${CLANG_FORMAT:-clang-format}"
check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac
command -v "$clang_format" >/dev/null ||
  { echo "format: $clang_format not found (scripts/install-deps.sh installs clang-format)" >&2; exit 2; }

mapfile -t files < <(git ls-files -- 'include/*.hpp' 'include/*.h' 'tests/*.cpp' 'tests/*.hpp' \
                       'examples/*.cpp' 'examples/*.hpp' 'bench/*.cpp' 'bench/*.hpp')
if ((check == 0)); then
  "$clang_format" -i --style=file "${files[@]}"
  echo "format: ${#files[@]} files formatted with $("$clang_format" --version)"
  exit 0
fi
unformatted=()
for file in "${files[@]}"; do
  if ! "$clang_format" --style=file --dry-run -Werror "$file" >/dev/null 2>&1; then
    unformatted+=("$file")
  fi
done
if ((${#unformatted[@]})); then
  printf '%s\n' "${unformatted[@]}"
  echo "format: ${#unformatted[@]} of ${#files[@]} files not formatted per .clang-format" \
       "(scripts/format.sh reformats them)" >&2
  exit 1
fi
echo "format: all ${#files[@]} files formatted per .clang-format"
