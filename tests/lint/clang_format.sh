#!/usr/bin/env bash
# Every C file of the repository is formatted as .clang-format says: runs
# `clang-format --dry-run --Werror` on each tracked .c and .h file (in a
# git checkout; otherwise on every .c and .h outside build directories).
#
# usage: tests/lint/clang_format.sh SOURCE_DIR
set -euo pipefail
cd "${1:?usage: clang_format.sh SOURCE_DIR}"
command -v clang-format >/dev/null || {
    echo "clang_format: clang-format is not installed (scripts/deps.sh installs it)" >&2
    exit 1
}
files=()
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    while IFS= read -r -d '' f; do
        [ -f "$f" ] && files+=("$f")
    done < <(git ls-files -z -- '*.c' '*.h')
else
    while IFS= read -r -d '' f; do
        files+=("$f")
    done < <(find . -path './build*' -prune -o \( -name '*.c' -o -name '*.h' \) -type f -print0)
fi
[ ${#files[@]} -gt 0 ] || {
    echo "clang_format: no C files found under $(pwd)" >&2
    exit 1
}
clang-format --dry-run --Werror "${files[@]}"
echo "clang_format: ${#files[@]} files formatted"
