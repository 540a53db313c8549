#!/usr/bin/env bash
# The durability soaks behind docs/RELIABILITY.md: SIGKILL cycles through the store and
# through `forest serve`, and simulated power losses while writers run. Each prints its count
# of kills or losses and of acknowledged writes checked; any lost write fails the run.
#
#   bash scripts/soak.sh [KILLS_PER_TEST_STORE] [KILLS_PER_ENGINE_SERVE] [POWER_LOSSES]
#
# Defaults give the recorded bars: 120 x 9 store tests = 1,080 kills, 84 x 12 serve
# combinations = 1,008 kills, 1,200 power losses. CI runs a bounded share of each (the tests'
# own defaults). About 5 minutes on 2 cores once built.
set -euo pipefail
cd "$(dirname "$0")/.."

store_kills=${1:-120}
serve_kills=${2:-84}
power_losses=${3:-1200}
run() {
  cargo nextest run --cargo-profile ci --no-fail-fast --success-output final "$@" 2>&1 |
    grep -E "kills, |acknowledged writes checked|power losses|^seed |FAIL|Summary"
}

echo "== store: SIGKILL cycles ($store_kills per engine x mode)"
FOREST_KILL_CYCLES=$store_kills run -p forest-store --test it -E "test(crash_kill::)"
echo "== forest serve: SIGKILL cycles ($serve_kills per engine x mode x pipelining)"
FOREST_KILL_CYCLES=$serve_kills run -p forest --test it -E "test(serve_crash::)"
echo "== store: simulated power losses while writing ($power_losses)"
FOREST_POWER_LOSS_CYCLES=$power_losses run -p forest-store --test it -E "test(power_loss::)"
