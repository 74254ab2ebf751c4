#!/usr/bin/env bash
# The GPU check, one command from a checkout on a fresh GPU machine (no install, no network):
#
#     bash benchmarks/gpu_check.sh [--quick] [OUT_DIR]
#
# 1. the GPU lane (python -m pytest tests/gpu): 16-bit training and compiled blocks against fp32, loss scaling,
#    the fused optimizer, the offload stream, recomputation, checkpoints GPU -> CPU -> GPU, `textmill train` under
#    torchrun with NCCL, `evaluate lambada`, `serve`, the key/value cache, a 124M step's activation memory, a small
#    ablation (two corpora, two seeds each, bits per byte of held-out English, the verdict);
# 2. benchmarks/bench_gpu.py: GPT-2 124M, 345M and a 1.1B LLaMA shape against transformers' compiled model in the
#    same run (tokens/s, MFU, peak memory, the kernel-time split), each against its MFU target.
# --quick: the lane, then GPT-2 124M alone with fewer steps. Each part has a deadline (the whole check ends inside
# 8 minutes, 4 with --quick; GPU_CHECK_LANE_S and GPU_CHECK_BENCH_S set others), and a part past it is stopped,
# saying so, with what it printed kept.
# Everything is written under OUT_DIR (default ./gpu-check): environment.txt, gpu-lane.log, gpu-lane.xml,
# bench.md. Without a GPU the same command rehearses on the CPU: the lane's tests on the CPU (gloo for NCCL; what
# needs CUDA skipped with its reason) and the benchmark's CPU shapes. Exit status: 0 when both parts passed.
set -uo pipefail
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
out=$(realpath -m "${1:-gpu-check}")
mkdir -p "$out" || exit 2
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python=${PYTHON:-python3}

if [ "$quick" = 1 ]; then lane_s=150 bench_s=80 bench=(--quick); else lane_s=210 bench_s=260 bench=(--steps 50 --warmup 5); fi
# A rehearsal on a busy machine may give the parts longer (the deadlines are the GPU machine's budget).
lane_s=${GPU_CHECK_LANE_S:-$lane_s} bench_s=${GPU_CHECK_BENCH_S:-$bench_s}
"$python" -c "import torch" || { echo "gpu_check: $python cannot import torch (PYTHON=... names another)"; exit 2; }
if ! "$python" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    export TEXTMILL_GPU_LANE_ON_CPU=1  # a rehearsal: the lane runs on the CPU
    echo "gpu_check: no GPU here: rehearsing on the CPU"
fi

{
    date -u; uname -a; nproc; if command -v nvidia-smi >/dev/null; then nvidia-smi; else echo "nvidia-smi: not found"; fi
    "$python" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda,
'gpu', torch.cuda.get_device_name() if torch.cuda.is_available() else None)"
    "$python" -m pip list 2>/dev/null | grep -iE '^(torch|triton|transformers|tiktoken|tokenizers|numpy|pyarrow|pytest) '
    git log -1 --format='textmill %H %s' 2>/dev/null
} > "$out/environment.txt" 2>&1
cat "$out/environment.txt"

started=$SECONDS
timeout --kill-after=10 "$lane_s" "$python" -m pytest tests/gpu -n 0 -p no:cacheprovider -v --durations=0 \
    --junitxml="$out/gpu-lane.xml" 2>&1 | tee "$out/gpu-lane.log"
lane=${PIPESTATUS[0]}
lane_took=$((SECONDS - started))

started=$SECONDS
timeout --kill-after=10 "$bench_s" "$python" benchmarks/bench_gpu.py "${bench[@]}" 2>&1 | tee "$out/bench.md"
bench_status=${PIPESTATUS[0]}
bench_took=$((SECONDS - started))

said() { case $1 in 0) echo "passed";; 124|137) echo "stopped at its ${2}s deadline";; *) echo "failed (exit $1)";; esac; }
echo "gpu_check: GPU lane $(said "$lane" "$lane_s") in ${lane_took}s; benchmark $(said "$bench_status" "$bench_s") in" \
     "${bench_took}s; files in $out" | tee -a "$out/environment.txt"
[ "$lane" = 0 ] && [ "$bench_status" = 0 ]
