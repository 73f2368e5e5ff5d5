#!/usr/bin/env bash
# Every shell script of the repository passes shellcheck (settings in
# .shellcheckrc): each tracked *.sh file and each tracked file whose first
# line is a sh or bash #! line (in a git checkout; otherwise the same kinds
# of files outside build directories).
#
# usage: tests/lint/shellcheck.sh SOURCE_DIR
set -euo pipefail
cd "${1:?usage: shellcheck.sh SOURCE_DIR}"
command -v shellcheck >/dev/null || {
    echo "shellcheck: shellcheck is not installed (scripts/deps.sh --test installs it)" >&2
    exit 1
}
is_script() {
    case $1 in
    *.sh) return 0 ;;
    esac
    head -n 1 "$1" 2>/dev/null | grep -qE '^#!.*[/ ](ba|da)?sh( |$)'
}
files=()
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    while IFS= read -r -d '' f; do
        [ -f "$f" ] && is_script "$f" && files+=("$f")
    done < <(git ls-files -z)
else
    while IFS= read -r -d '' f; do
        is_script "$f" && files+=("$f")
    done < <(find . -path './build*' -prune -o -type f -print0)
fi
[ ${#files[@]} -gt 0 ] || {
    echo "shellcheck: no shell scripts found under $(pwd)" >&2
    exit 1
}
shellcheck "${files[@]}"
echo "shellcheck: ${#files[@]} scripts clean"
