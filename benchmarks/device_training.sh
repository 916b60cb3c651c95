#!/usr/bin/env bash
# The training costs of papers B and C on a GPU, in one run (what the device checks of
# issues 22 and 24 ran on a lent H100/H200). TransformerLens and the packages the device's
# image lacks travel as wheels in .whl/ (see the README of the device tool); the repository
# itself is on PYTHONPATH. Each benchmark has its own time limit so one slow stage cannot
# take the others with it. Output: one text file per benchmark under ${OUT:-out/device}.
set -uo pipefail
OUT=${OUT:-out/device}
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
$PY -c "import torch, lens_possym.papers.b.cells, lens_possym.papers.c.presets; print('torch', torch.__version__, torch.cuda.get_device_name())" || exit 1
timeout 100 $PY benchmarks/bench_paper_c.py --device cuda --steps 50 2>&1 | tee "$OUT/paper_c.txt"
timeout 190 $PY benchmarks/bench_paper_b.py --preset paper --device cuda --steps 10 2>&1 | tee "$OUT/paper_b.txt"
timeout 60 $PY benchmarks/bench_paper_b.py --preset paper-length --device cuda --steps 30 --tasks count 2>&1 | tee "$OUT/paper_b_length.txt"
echo done
