#!/usr/bin/env bash
# Issue 41's device check, in one run of at most 8 minutes: profiles at GPU speed.
#
#   bash benchmarks/device_check.sh --fetch-wheels   # here (internet to PyPI): wheels -> .whl/
#   bash benchmarks/device_check.sh                  # on the lent GPU (device tool, carry .whl)
#   PY=.venv/bin/python bash benchmarks/device_check.sh --dry-run
#                                 # here, on the CPU, small n: proves the script itself works
#
# On the device machine (no internet) the packages its image lacks travel as wheels in .whl/
# (ignored by git; about 4 MiB: TransformerLens, datasets and what they import that the image
# has not). The device tool's call:  run(command="bash benchmarks/device_check.sh",
# carry=[".whl"], timeout_s=540); then copy the files it returns into docs/device/ and commit.
#
# Each stage has its own time limit, so one slow stage cannot take the others with it; the
# limits add up to 460 s. Output: one text file per stage under $DEST (default: $OUT, the
# device tool's folder that comes back, else docs/device/; at most 8 files):
#   gpu.txt            nvidia-smi, torch and the packages' versions
#   bench_fp32.txt     bench_device.py: float64 checks on every tiny family, profile/forward
#                      at n = 256, 1,024, 2,048 (float32 model), exact vs re-run, fused kernel
#   bench_bf16.txt     the same timings with a bfloat16 model
#   bench_long.txt     n = 8,192 and 32,768: time and peak memory above the model
#   test_fused.txt     pytest tests/scores/test_fused.py tests/scores/test_stages.py on the GPU
#   stages.txt         profile_stages.py at n = 2,048: ops, syncs and CUDA time per stage
#   log.txt            each stage's exit status and seconds
set -uo pipefail
MODE=device
case "${1:-}" in
  --dry-run) MODE=dry ;;
  --fetch-wheels) MODE=fetch ;;
  "") ;;
  *) echo "usage: $0 [--dry-run | --fetch-wheels]" >&2; exit 2 ;;
esac
PY=${PY:-python3}

if [ "$MODE" = fetch ]; then
  # exact versions: the ones CI installs (transformer-lens 4.3.0) and what datasets needs
  # beyond the device image (which has torch, transformers, pyarrow, pandas, numba, ...)
  mkdir -p .whl
  exec $PY -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl transformer-lens==4.3.0 beartype==0.23.1 \
    fancy-einsum==0.0.3 typeguard==4.6.1 gguf==0.19.0 datasets==5.2.0 dill==0.4.1 \
    multiprocess==0.70.19
fi

if [ "$MODE" = dry ]; then
  DEST=${DEST:-$(mktemp -d /tmp/device_check_dry.XXXXXX)}
  DEVICE=cpu
  SIZES="64 128"; LONG="256"; RERUN=16; FUSED="64"; STAGE_N="64 --layers 6"; VOCAB="--vocab 4096"
  SCALE=20     # the CPU is slow: every limit times this (the point is that the stages run)
else
  DEST=${DEST:-${OUT:-docs/device}}
  DEVICE=cuda
  SIZES="256 1024 2048"; LONG="8192 32768"; RERUN=128; FUSED="256 2048"; STAGE_N=2048
  VOCAB=""; SCALE=1
fi
mkdir -p "$DEST"
LOG="$DEST/log.txt"
: > "$LOG"
export PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

if [ "$MODE" = device ] && [ -d .whl ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || { echo "wheel install failed" | tee -a "$LOG"; exit 1; }
  export PYTHONPATH=$PWD:/tmp/site
fi

stage() {  # stage NAME LIMIT_S FILE COMMAND...: run with its own time limit, log its status
  local name=$1 limit=$(( $2 * SCALE )) file=$3; shift 3
  local start=$SECONDS
  echo "== $name (limit ${limit} s): $*" | tee -a "$LOG"
  timeout "$limit" "$@" > "$DEST/$file" 2>&1
  local rc=$?
  echo "   $name: exit $rc in $(( SECONDS - start )) s$([ $rc = 124 ] && echo ' (stopped by its limit)')" \
    | tee -a "$LOG"
  tail -n 25 "$DEST/$file"
}

versions() {
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  fi
  $PY -c "import torch, transformers, transformer_lens, lens_possym as lp; \
print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), \
torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu'); \
print('transformers', transformers.__version__, 'lens-possym', lp.__version__)"
}

BENCH="benchmarks/bench_device.py --device $DEVICE --weights random $VOCAB"
export -f versions
export PY
stage versions 45 gpu.txt bash -c versions
if ! grep -q "^torch" "$DEST/gpu.txt"; then
  echo "the packages do not import: see $DEST/gpu.txt" | tee -a "$LOG"; exit 1
fi
stage bench_fp32 140 bench_fp32.txt $PY $BENCH --sizes $SIZES --rerun-n $RERUN \
  --fused-sizes $FUSED
stage bench_bf16 50 bench_bf16.txt $PY $BENCH --dtype bfloat16 --skip checks fused \
  --sizes $SIZES --rerun-n $RERUN
stage bench_long 150 bench_long.txt $PY $BENCH --skip checks timing fused --long $LONG
# pyproject's addopts need pytest-socket, which the device image lacks: cleared here
stage test_fused 50 test_fused.txt $PY -m pytest -q -p no:cacheprovider -o addopts="" \
  tests/scores/test_fused.py tests/scores/test_stages.py
stage stages 25 stages.txt $PY benchmarks/profile_stages.py --device $DEVICE --n $STAGE_N
echo "done: $DEST" | tee -a "$LOG"
