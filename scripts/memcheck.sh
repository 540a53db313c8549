#!/usr/bin/env bash
# Memory check: the engines' stress and pause-point tests under AddressSanitizer (use after
# free, out-of-bounds access, double free, leaks), at a size that keeps the whole run near
# 3 minutes on a 2-core machine once built. `bash scripts/memcheck.sh`; CI runs it.
#
# - `--cfg forest_memcheck`: engines recycle nothing and poison what they free (debug builds),
#   so every free reaches the allocator that ASan watches.
# - `--cfg crossbeam_sanitize`: crossbeam-epoch's own sanitizer mode, which frees retired
#   memory in small batches as soon as the epoch allows, so an early free shows up soon.
# - RUSTC_BOOTSTRAP lets the stable compiler take -Zsanitizer; its ASan runtime ships with
#   the stable toolchain. `--target` keeps build scripts and proc macros uninstrumented.
# - A debug build: debug assertions on (poisoning, version-word checks) and the tests' debug
#   sizes (forest-core's conformance kit: 50 k stress ops). FOREST_STRESS_SECONDS bounds
#   forest-bwtree's stress rounds (default here 2 s per test), FOREST_STRESS_KEYS their keys
#   (default here 5 000: two rounds of 20 000 took 15 s a test under ASan).
set -euo pipefail
cd "$(dirname "$0")/.."

host=$(rustc -vV | sed -n 's/^host: //p')
runtime="$(rustc --print sysroot)/lib/rustlib/$host/lib/librustc-stable_rt.asan.a"
if [ ! -e "$runtime" ]; then
  echo "memcheck: this toolchain has no AddressSanitizer runtime for $host ($runtime)" >&2
  exit 1
fi

export RUSTC_BOOTSTRAP=1
export RUSTFLAGS="--cfg forest_memcheck --cfg crossbeam_sanitize -Zsanitizer=address -Cforce-frame-pointers=yes"
export CARGO_TARGET_DIR=target/asan
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export FOREST_STRESS_SECONDS="${FOREST_STRESS_SECONDS:-2}"
export FOREST_STRESS_KEYS="${FOREST_STRESS_KEYS:-5000}"

# Runs one crate's test binaries under ASan; arguments after `--` filter test names.
asan_test() {
  local crate=$1
  shift
  printf '\n--- %s %s\n' "$crate" "$*"
  cargo test -q -p "$crate" --target "$host" "$@"
}

start=$(date +%s)
printf 'memcheck: building (%s)\n' "$host"
cargo test -q -p forest-masstree -p forest-lockbtree -p forest-bwtree --target "$host" \
  --features forest-masstree/pause-points,forest-bwtree/pause-points --no-run
built=$(date +%s)

# forest-masstree's integration tests are one binary (`it`); its modules are the test files.
asan_test forest-masstree --features pause-points --test it -- pause_points:: memcheck_poison::
# The default and the layer-per-slice configurations: the others share their memory paths
# (the full set ran 27 stress tests for no new frees; the narrow-node one left in session 11).
asan_test forest-masstree --test it -- conformance::default_config::stress_ \
  conformance::suffix_layers::stress_
asan_test forest-masstree --test it -- removal::removed_ removal::factor_analysis_variants_under \
  removal::owned_keys_under_churn removal::stats_walk_
# Scans racing splits and layer creation, and slot shifts under readers (gets racing splits are
# the conformance stress's and the removal races' too).
asan_test forest-masstree --test it -- scans_during_splits_and_new_layers hard_cases::sorted_nodes_shift
# The default configuration (order4's and order5's stress share its memory paths at other
# node sizes; the concurrent structure test splits and merges at order 4).
asan_test forest-lockbtree --test it -- conformance::default_config::stress_ structure::concurrent
asan_test forest-bwtree --features pause-points --lib
asan_test forest-bwtree --features pause-points --test it -- pause_points:: stress::
# Binaries of their own: each installs a global allocator.
asan_test forest-bwtree --features pause-points --test drop_while_frozen --test memcheck_poison

end=$(date +%s)
printf '\nmemcheck: passed (build %d s, tests %d s)\n' $((built - start)) $((end - built))
