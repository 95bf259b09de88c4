#!/usr/bin/env bash
# Test of bench/plot.py on a checked-in sample of collective-bench output
# (bench/testdata/collective_bench_sample.txt): the PNGs it names exist, are
# PNGs and are not empty; reading stdin works; an input without data rows
# exits non-zero (negative control). Exit 77 (skipped) when no python3 here
# can import matplotlib.
#   bash bench/plot_test.sh        (PYTHON=... picks the interpreter; default python3,
#                                  else /usr/bin/python3)
set -u
here=$(cd "$(dirname "$0")" && pwd)
sample=$here/testdata/collective_bench_sample.txt
py=""
candidates=(python3 /usr/bin/python3)  # e.g. a pyenv python3 first in PATH without matplotlib
[ -n "${PYTHON:-}" ] && candidates=("$PYTHON")
for cand in "${candidates[@]}"; do
  if command -v "$cand" > /dev/null 2>&1 && "$cand" -c "import matplotlib" > /dev/null 2>&1; then
    py=$cand; break
  fi
done
[ -n "$py" ] || { echo "plot_test: SKIP: matplotlib not importable (apt-get install python3-matplotlib)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "plot_test: FAIL: $*"; exit 1; }

"$py" "$here/plot.py" -o "$work/out" --title "sample" "$sample" > "$work/list" 2> "$work/err" \
  || { cat "$work/err"; fail "plot.py exited $? on the sample"; }
for op in all_reduce all_gather; do
  for kind in busbw time pct; do
    png=$work/out/${op}_2ranks_$kind.png
    [ -s "$png" ] || fail "$png missing or empty"
    [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$png is not a PNG"
    grep -qx "$png" "$work/list" || fail "plot.py did not list $png"
  done
done
[ "$(wc -l < "$work/list")" -eq 6 ] || fail "expected 6 PNGs, plot.py listed: $(cat "$work/list")"

"$py" "$here/plot.py" -o "$work/stdin" < "$sample" > /dev/null 2>&1 || fail "plot.py failed reading stdin"
[ -s "$work/stdin/all_reduce_2ranks_busbw.png" ] || fail "no PNG from stdin"

# Negative control: headers and comments but no data rows must fail, with a message.
grep -v '^ *[0-9]' "$sample" > "$work/no_rows.txt"
if "$py" "$here/plot.py" -o "$work/none" "$work/no_rows.txt" > /dev/null 2> "$work/err"; then
  fail "plot.py succeeded on an input without data rows"
fi
grep -q "no collective-bench data rows" "$work/err" || fail "no clear message without data rows: $(cat "$work/err")"
[ -z "$(ls -A "$work/none" 2> /dev/null)" ] || fail "PNGs written for an input without data rows"
echo "plot_test: OK (6 PNGs from the sample, stdin read, no-rows input refused)"
