#!/usr/bin/env bash
# Compiles the registry's sources (every daemon/*.cc that includes
# daemon/registry_state.h) with clang's thread-safety analysis as errors, so
# the lock rules annotated in daemon/registry.h (GUARDED_BY, REQUIRES,
# EXCLUDES; base/thread_annotations.h) are checked, not just written.
# First a control: code that breaks the rules must fail, or the check would
# pass vacuously (say, if the macros expanded to nothing under clang).
# Exit 77 (CTest: skipped) without clang++.
#   thread_safety_check.sh SOURCE_DIR [FLAGS...]   (e.g. -I BUILD_DIR/proto)
set -u
src=$1
shift
cxx=${CLANGXX:-clang++}
command -v "$cxx" >/dev/null || { echo "clang++ not installed: thread-safety check skipped"; exit 77; }
out=$(mktemp -d "${TMPDIR:-/tmp}/collectived-tsa-XXXXXX")
trap 'rm -rf "$out"' EXIT
check() { "$cxx" -std=c++20 -fsyntax-only -Wthread-safety -Werror=thread-safety -I "$src" -I "$src/include" "$@"; }

cat > "$out/control.cc" <<'CC'
#include "base/mutex.h"
class Counter {
 public:
  void Unlocked() { ++n_; }                                      // writes without the lock
  void CallsLocked() { BumpLocked(); }                           // calls a REQUIRES without it
  void Relocks() COLLECTIVED_EXCLUDES(mu_) { collectived::MutexLock l(&mu_); Relocks(); }
  void Early() { collectived::MutexLock l(&mu_); l.Unlock(); ++n_; }  // after letting go
 private:
  void BumpLocked() COLLECTIVED_REQUIRES(mu_) { ++n_; }
  collectived::Mutex mu_;
  int n_ COLLECTIVED_GUARDED_BY(mu_) = 0;
};
CC
if check "$out/control.cc" > "$out/control.log" 2>&1; then
  echo "FAIL control: code breaking the lock rules compiled; the analysis is not on"; exit 1
fi
found=$(grep -c "error:.*thread-safety" "$out/control.log")
if [ "$found" -ne 4 ]; then
  echo "FAIL control: expected 4 thread-safety errors, got $found"; cat "$out/control.log"; exit 1
fi
echo "ok   control: 4 broken lock rules caught"

status=0
files=$(grep -l '#include "daemon/registry_state.h"' "$src"/daemon/*.cc)
[ -n "$files" ] || { echo "FAIL no registry sources found under $src/daemon"; exit 1; }
for f in $files; do
  if check "$@" "$f" > "$out/log" 2>&1; then
    echo "ok   $(basename "$f")"
  else
    echo "FAIL $(basename "$f")"; grep -E "error" "$out/log" | head -20; status=1
  fi
done
exit $status
