# One SPIN run of a model, one line out: sourced by ring/model/check.sh and
# cluster/model/check.sh. Set before sourcing: model_path (the .pml file),
# memlim (MB for pan), cc_extra (more cc flags, may be empty), width (of the
# name column). Sourcing exits 77 (skipped) without spin or a C compiler, and
# moves into a temp dir (removed at exit) holding a copy of the model.
#   spin_run NAME EXPECT SPIN-DEFINES...
# EXPECT: safe (exhaustive, no error), small (safe, a search of a second or
# less: built unoptimized) or unsafe (a counterexample). A wrong verdict sets
# fail=1 and, for an unexpected error, prints the trail's end.
command -v spin >/dev/null || { echo "no spin: skipped"; exit 77; }
command -v cc >/dev/null || { echo "no C compiler: skipped"; exit 77; }
spin_work=$(mktemp -d)
trap 'rm -rf "$spin_work"' EXIT
cp "$model_path" "$spin_work/"
cd "$spin_work" || exit 1
model=$(basename "$model_path")
fail=0
spin_run() {
  local name=$1 expect=$2; shift 2
  spin -a "$@" "$model" >spin.log 2>&1 || { echo "$name: spin failed"; cat spin.log; fail=1; return; }
  # A counterexample comes within a few hundred thousand states, and a small
  # search is over as soon: built unoptimized (a second to build, not four).
  local opt=-O2
  [ "$expect" = safe ] || opt=-O0
  [ "$expect" = small ] && expect=safe
  # shellcheck disable=SC2086 # cc_extra is a list of flags
  cc $opt -w -DSAFETY -DCOLLAPSE -DMEMLIM="$memlim" $cc_extra -o pan pan.c || { echo "$name: cc failed"; fail=1; return; }
  local start=$SECONDS
  ./pan -m200000 >pan.log 2>&1
  local took=$((SECONDS - start)) errors states what
  errors=$(grep -oE "errors: [0-9]+" pan.log | grep -oE "[0-9]+")
  states=$(grep -oE "^ *[0-9e.+]+ states, stored" pan.log | grep -oE "[0-9e.+]+" | head -1)
  what=$(grep -m1 -E "^pan:1:" pan.log | sed 's/^pan:1: //' | cut -c1-110)
  if grep -q "out of memory\|max search depth too small\|reached -DMEMLIM bound" pan.log; then
    echo "$name: search incomplete"; grep -E "out of memory|max search depth|MEMLIM bound" pan.log; fail=1; return
  fi
  if [ "$expect" = safe ]; then
    if [ "${errors:-1}" = 0 ]; then
      printf "%-${width}s safe: %s states, %ss\n" "$name" "$states" "$took"
    else
      printf "%-${width}s UNSAFE (expected safe): %s\n" "$name" "$what"; spin -t -p "$@" "$model" | tail -30; fail=1
    fi
  elif [ "${errors:-0}" -ge 1 ]; then
    printf "%-${width}s counterexample: %s states, %ss: %s\n" "$name" "$states" "$took" "$what"
  else
    printf "%-${width}s NO COUNTEREXAMPLE (the model cannot see this): %s states\n" "$name" "$states"; fail=1
  fi
}
