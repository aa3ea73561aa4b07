#!/usr/bin/env bash
# Where Gloo's three all-reduce algorithms cross over on this machine, and our
# gloo backend against raw Gloo's best, side by side (loopback TCP).
#
#   bench/gloo_crossover.sh [RUNS] [WORLD_SIZES]
#     RUNS         repetitions of the raw sweep; the median of each cell is shown (default 5)
#     WORLD_SIZES  ranks for the raw sweep, quoted (default "2 3 4")
#   BUILD_DIR=...  where test_comm was built (default build); the side-by-side
#                  part runs its disabled GlooBench test (2 ranks, the fastest
#                  of 9-30 short interleaved rounds per variant and size)
#
# The raw sweep is ../shared/anchors/gloo_allreduce.cc, built with
# g++ -O2 -lgloo. The thresholds in src/gradmesh/comm/gloo/algorithm_choice.cc
# come from this script's output; more ranks than cores (3-4 on a 2-core
# machine) measure contention more than the network, so read those as trends.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${1:-5}
WORLD_SIZES=${2:-"2 3 4"}
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
ANCHOR=$ROOT/../shared/anchors/gloo_allreduce.cc

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
g++ -O2 "$ANCHOR" -o "$tmp/anchor" -lgloo -lpthread

for world in $WORLD_SIZES; do
  for run in $(seq "$RUNS"); do
    rm -rf "$tmp/store" && mkdir "$tmp/store"
    pids=()
    for rank in $(seq 1 $((world - 1))); do
      "$tmp/anchor" "$rank" "$world" "$tmp/store" >/dev/null &
      pids+=($!)
    done
    "$tmp/anchor" 0 "$world" "$tmp/store" >>"$tmp/raw.$world"
    wait "${pids[@]}"
  done
  echo "== raw Gloo all-reduce, $world ranks: median of $RUNS runs, microseconds (fastest marked *)"
  python3 - "$tmp/raw.$world" <<'EOF'
import collections, statistics, sys
cells = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    # "<bytes> ring <t>us <bw>GB/s | chunked <t>us <bw>GB/s | hd <t>us <bw>GB/s"
    for name, value in ((f[1], f[2]), (f[5], f[6]), (f[9], f[10])):
        cells[(int(f[0]), name)].append(float(value[:-2]))
print(f"{'bytes':>10} {'ring':>10} {'chunked':>10} {'hd':>10}")
for size in sorted({s for s, _ in cells}):
    t = {n: statistics.median(cells[(size, n)]) for n in ("ring", "chunked", "hd")}
    best = min(t, key=t.get)
    print(f"{size:>10}" + "".join(f" {t[n]:>9.1f}{'*' if n == best else ' '}" for n in ("ring", "chunked", "hd")))
EOF
done

echo "== ours against raw Gloo, 2 ranks, microseconds: median over $RUNS runs of each run's fastest round;"
echo "   ours/same: median over runs of the paired per-round ratio to raw Gloo's run of the same algorithm"
for run in $(seq "$RUNS"); do
  "$BUILD_DIR/test_comm" --gtest_also_run_disabled_tests --gtest_filter=GlooBench.DISABLED_AllreduceAgainstRawGloo |
    grep -E '^ +[0-9]' >>"$tmp/ours"
done
python3 - "$tmp/ours" <<'EOF'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()  # bytes ring chunked hd ours algorithm ours/best ours/same
    rows[int(f[0])].append((float(f[1]), float(f[2]), float(f[3]), float(f[4]), f[5], float(f[7])))
print(f"{'bytes':>10} {'ring':>9} {'chunked':>9} {'hd':>9} {'ours':>9} {'ours uses':<17} {'ours/best':>9} {'ours/same':>9}")
for size in sorted(rows):
    ring, chunked, hd, ours = (statistics.median(r[i] for r in rows[size]) for i in range(4))
    same = statistics.median(r[5] for r in rows[size])
    best = min(ring, chunked, hd)
    print(f"{size:>10} {ring:>9.1f} {chunked:>9.1f} {hd:>9.1f} {ours:>9.1f} {rows[size][0][4]:<17} "
          f"{ours / best:>9.3f} {same:>9.3f}")
EOF
