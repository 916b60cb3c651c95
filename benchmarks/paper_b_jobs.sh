#!/usr/bin/env bash
# Paper B's paper-length grid as two queues, one per core, each a background job that
# resumes from the cells' checkpoints (a finished cell is skipped in seconds). Start both with
#   mkdir -p runs/paper_b
#   nohup nice -n 10 benchmarks/paper_b_jobs.sh 0 > runs/paper_b/queue0.log 2>&1 &
#   nohup nice -n 10 benchmarks/paper_b_jobs.sh 1 > runs/paper_b/queue1.log 2>&1 &
# The queues share the grid: each takes the next cell (seed 0 first, then 1, then 2) that no
# other queue holds (paper_b.py run's claim lock), so both stay busy to the end whatever
# each cell costs; a killed queue's cell is free again at once.
# After the main grid (114 cells) they run claim 5's grid (paper-length+copies, 42 cells).
# Each finished cell writes its record into docs/paper_b_results.json (under a lock; commit
# it); checkpoints and analyses stay in runs/paper_b/paper-length/ (ignored). When both
# queues are done: python benchmarks/paper_b.py report --preset paper-length
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1
case "${1:-}" in      # the queue's number, for its log (one queue per free core)
  ''|*[!0-9]*) echo "usage: $0 QUEUE_NUMBER" >&2; exit 2 ;;
esac
echo "== $(date -u +%FT%TZ) paper-length queue $1"
$PY benchmarks/paper_b.py run --preset paper-length --seeds 0 1 2 \
  --root runs/paper_b --records docs/paper_b_results.json \
  || echo "== failed: paper-length queue $1 (exit $?)"
# then claim 5's grid: the distance task with the official filler draw (docs/paper_b_rules.md)
# (the intended cells of every seed first: claim 5's intended verdict needs them all)
for variant in intended faithful; do
  echo "== $(date -u +%FT%TZ) paper-length+copies $variant queue $1"
  $PY benchmarks/paper_b.py run --preset paper-length --trigger-copies --tasks distance \
    --only $variant --seeds 0 1 2 --root runs/paper_b --records docs/paper_b_results.json \
    || echo "== failed: paper-length+copies $variant queue $1 (exit $?)"
done
echo "== $(date -u +%FT%TZ) queue $1 done"
