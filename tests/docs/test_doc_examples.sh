#!/usr/bin/env bash
# test_doc_examples.sh BUILD_DIR SOURCE_DIR [SHARED_DIR]
#
# Every ```c block of README.md and docs/*.md must compile without a warning
# under -std=c11 -Wall -Wextra -Werror against include/ (return codes the
# headers mark warn_unused_result must be checked). tools/doc_examples.py
# turns each block into a translation unit: `#include` lines (and setup lines
# starting with '#') go to the top after every public header; the rest is
# the body of a function returning int, unless the block is marked
# `<!-- doctest: top -->` (top-level code). `<!-- doctest-setup: CODE -->` on
# the lines before a block declares what the example takes from its context
# (a device from the previous example, a buffer, a callback). A block with
# its own main() is also linked with the static library and run.
set -u
BUILD=${1:?build dir} SRC=${2:?source dir}
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is missing"; exit 77; }
CC=${CC:-cc}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
python3 "$SRC/tools/doc_examples.py" "$TMP" "$SRC/README.md" "$SRC"/docs/*.md >"$TMP/list" || exit 1
# a sanitizer build's static library needs the sanitizer runtimes to link
SAN=$(sed -n 's/^CM_SANITIZE:STRING=//p' "$BUILD/CMakeCache.txt" 2>/dev/null | tr ';' ',')
LINKFLAGS=()
[ -n "$SAN" ] && LINKFLAGS=(-fsanitize="$SAN")
fail=0 n=0
while read -r file origin; do
  req=$(sed -n 's|^/\* doctest: requires \(.*\) \*/$|\1|p' "$file")
  if [ -n "$req" ] && ! printf '#include <%s>\n' "$req" | "$CC" -E -x c - >/dev/null 2>&1; then
    echo "ok $origin # SKIP: $req is not installed"
    continue
  fi
  if "$CC" -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -I"$SRC/include" -c "$file" -o "$file.o" 2>"$file.err"; then
    echo "ok $origin"
    n=$((n + 1))
    # a complete program (the README's example) must also link and run
    if grep -q '^int main(' "$file" && ! grep -q '^/\* doctest: no-run \*/$' "$file" &&
       [ -f "$BUILD/libcubemem.a" ]; then
      if "$CC" "${LINKFLAGS[@]}" -o "$file.bin" "$file.o" "$BUILD/libcubemem-tools.a" "$BUILD/libcubemem.a" -lpthread -ldl -lm 2>"$file.err" \
         && "$file.bin" >"$file.out" 2>&1; then
        echo "ok $origin links and runs: $(head -1 "$file.out")"
      else
        echo "not ok $origin does not link or run: $(cat "$file.err" "$file.out" 2>/dev/null | head -5)"
        fail=1
      fi
    fi
  else
    echo "not ok $origin"
    sed 's/^/    /' "$file.err" | head -20
    echo "    --- the translation unit:"
    cat -n "$file" | sed 's/^/    /' | tail -n +1 | head -80
    fail=1
  fi
done <"$TMP/list"
[ "$n" -gt 0 ] || { echo "no C examples found"; exit 1; }
[ $fail = 0 ] && echo "test_doc_examples: $n examples compile cleanly"
exit $fail
