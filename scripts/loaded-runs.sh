#!/usr/bin/env bash
# `make test` N times in a row on fresh clones of this checkout's HEAD, beside a CPU hog
# (another CPU-heavy job): the suite must hold on a loaded machine, not only on a quiet one.
# Stops at the first failure. Each run's output is DIR/runK.log; one line per run is
# appended to DIR/summary.  Usage: scripts/loaded-runs.sh [N=5] [DIR=/tmp/mesh-loaded-runs]
set -u
runs=${1:-5}
dir=${2:-/tmp/mesh-loaded-runs}
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
mkdir -p "$dir"
python3 -c "while True: pass" &
hog=$!
trap 'kill $hog 2>/dev/null' EXIT
for i in $(seq 1 "$runs"); do
  clone="$dir/clone$i"
  rm -rf "$clone"
  git clone -q "$repo" "$clone"
  start=$(date +%s)
  (cd "$clone" && make test > "$dir/run$i.log" 2>&1)
  code=$?
  tail=$(grep -E '^=+ .*(passed|failed).* =+$' "$dir/run$i.log" | tail -1)
  echo "run $i at $(git -C "$clone" rev-parse --short HEAD): exit $code in $(( $(date +%s) - start )) s, load $(cut -d' ' -f1-3 /proc/loadavg); $tail" | tee -a "$dir/summary"
  [ "$code" -eq 0 ] || exit "$code"
  rm -rf "$clone"
done
