#!/usr/bin/env bash
# Paper C's training runs as two queues, one per core, each a background job that resumes
# from the runs' checkpoints (a finished run is skipped in seconds). Start both with
#   mkdir -p out/paper_c
#   nohup nice -n 10 benchmarks/paper_c_jobs.sh 0 > out/paper_c/queue0.log 2>&1 &
#   nohup nice -n 10 benchmarks/paper_c_jobs.sh 1 > out/paper_c/queue1.log 2>&1 &
# Order: the paper preset's seeds 0, 1, 2 (Number on queue 0, Letter on queue 1), then the
# cpu preset's. Runs elsewhere: PAPER_C_RUNS=/work/runs/paper_c/runs (checkpoints) and
# PAPER_C_CACHE=/work/runs/paper_c/cache. A queue stopped mid-run resumes from the run's
# latest checkpoint (dropout's stream included, so the result equals an uninterrupted run).
# Each finished run writes its record to docs/paper_c_runs/{task}-{preset}-s{seed}.json
# (commit it); checkpoints stay in out/paper_c/runs/ (ignored). The analyses follow in
# benchmarks/paper_c_analyse_jobs.sh (or `python benchmarks/paper_c.py analyse` by hand).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1
case "${1:-}" in
  0) jobs=("paper 0 number" "paper 1 number" "paper 2 number" "cpu 0 number" "cpu 1 number" "cpu 2 number") ;;
  1) jobs=("paper 0 letter" "paper 1 letter" "paper 2 letter" "cpu 0 letter" "cpu 1 letter" "cpu 2 letter") ;;
  *) echo "usage: $0 0|1" >&2; exit 2 ;;
esac
for job in "${jobs[@]}"; do
  read -r preset seed task <<< "$job"
  echo "== $(date -u +%FT%TZ) $preset seed $seed $task"
  $PY benchmarks/paper_c.py train --preset "$preset" --seed "$seed" --tasks "$task" \
    || echo "== failed: $preset seed $seed $task (exit $?)"
done
echo "== $(date -u +%FT%TZ) queue $1 done"
