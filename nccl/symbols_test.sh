#!/usr/bin/env bash
# The library exports every nccl* function PyTorch imports (the checked-in
# list of torch 2.15, and the installed torch's own list when one is found),
# exports nothing but nccl* functions, and carries the soname libnccl.so.2.
# A negative control proves the comparison reports a missing name.
#   symbols_test.sh LIB LIST
set -euo pipefail
lib=${1:?usage: symbols_test.sh LIB LIST}
list=${2:?}
exported=$(nm -D --defined-only "$lib" | awk '$2 == "T" || $2 == "W" {print $3}' | sort -u)
missing_from() {  # the names of stdin that the library does not export
  grep -v '^#' | grep . | sort -u | comm -23 - <(echo "$exported")
}
fail=0
soname=$(readelf -d "$lib" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
if [ "$soname" != "libnccl.so.2" ]; then echo "FAIL: soname is '$soname', not libnccl.so.2"; fail=1; fi
leaked=$(grep -v '^nccl' <<<"$exported" || true)
if [ -n "$leaked" ]; then echo "FAIL: exports beyond the NCCL API:"; echo "$leaked" | head; fail=1; fi
m=$(missing_from < "$list")
if [ -n "$m" ]; then echo "FAIL: not exported (from $list): $m"; fail=1; fi
echo "checked-in list: $(grep -vc '^#' "$list") names; library exports $(wc -l <<<"$exported")"
# Negative control: a name the library lacks must be reported.
if [ -z "$(printf 'ncclAllReduce\nncclNotAFunction\n' | missing_from)" ]; then
  echo "FAIL: the comparison did not report a missing name"; fail=1
fi
# The installed torch, where there is one (found without importing it).
torch_dir=$(python3 -c 'import importlib.util as u; s = u.find_spec("torch"); print(s.submodule_search_locations[0] if s else "")' 2>/dev/null || true)
if [ -n "$torch_dir" ] && [ -f "$torch_dir/lib/libtorch_cuda.so" ]; then
  wanted=$(nm -D --undefined-only "$torch_dir/lib/libtorch_cuda.so" | awk '{print $2}' | grep '^nccl' | sed 's/@.*//' | sort -u)
  m=$(missing_from <<<"$wanted")
  if [ -n "$m" ]; then echo "FAIL: the installed torch imports names not exported: $m"; fail=1; fi
  echo "installed torch ($torch_dir): imports $(wc -l <<<"$wanted") nccl* names, all exported: $([ -z "$m" ] && echo yes || echo no)"
else
  echo "no torch with libtorch_cuda.so installed here: checked the list of torch 2.15 only"
fi
[ "$fail" -eq 0 ] && echo "PASS"
exit $fail
