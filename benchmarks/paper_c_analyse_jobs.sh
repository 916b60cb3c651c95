#!/usr/bin/env bash
# Paper C's analyses as one background job that follows the training queues
# (benchmarks/paper_c_jobs.sh): every POLL seconds it runs `paper_c.py analyse`, which
# analyses every finished run (model.pt written) and skips every cell already cached, then
# rewrites the report; it stops once all twelve runs (paper and cpu presets, seeds 0-2,
# both tasks) are finished and analysed. Start it with
#   nohup nice -n 10 benchmarks/paper_c_analyse_jobs.sh > out/paper_c/analyse.log 2>&1 &
# Set PAPER_C_RUNS / PAPER_C_CACHE to read runs from, and cache into, other folders.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
POLL=${POLL:-600}
export OMP_NUM_THREADS=1
RUNS=${PAPER_C_RUNS:-out/paper_c/runs}
while true; do
  echo "== $(date -u +%FT%TZ) analyse"
  $PY benchmarks/paper_c.py analyse || echo "== analyse failed (exit $?)"
  $PY benchmarks/paper_c.py report || echo "== report failed (exit $?)"
  done_runs=$(ls "$RUNS"/*-{paper,cpu}-s[012]/model.pt 2>/dev/null | wc -l)
  if [ "$done_runs" -ge 12 ]; then
    echo "== $(date -u +%FT%TZ) all 12 runs finished and analysed"
    break
  fi
  sleep "$POLL"
done
