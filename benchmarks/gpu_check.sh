#!/bin/bash
# The one prepared GPU session (one CUDA GPU, no hub). Parts, each with its own time limit:
#   benchmark  the gpu.py table (SFT/TRL/packing/GRPO HF vs vLLM/generation/QLoRA; ~8 min)
#   paths      one short run per GPU-only path the CPU tests cannot execute (~1-2 min)
#   rollout    rollout_speed.py on the GPU: generate vs posttrain's decoding loop vs vLLM, SmolLM2 (~3 min)
#   race       defaults_race.py --real --repeats 1: SmolLM2 + LoRA, posttrain vs TRL vs FAI-RL defaults (~4 min)
#
#   bash benchmarks/gpu_check.sh                      # every part; writes $OUT (default benchmarks/results/gpu-check/)
#   PARTS="rollout race" bash benchmarks/gpu_check.sh  # the real-model speed parts only (about 7 minutes)
#
# Needs: torch with CUDA, and for full coverage `pip install deepspeed vllm bitsandbytes` (each
# missing one is reported as skipped by the step that needs it, never as a pass).
set -uo pipefail
OUT=${OUT:-benchmarks/results/gpu-check}
mkdir -p "$OUT"
export TOKENIZERS_PARALLELISM=false
PY=${PY:-python}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
$PY -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())" | tee -a "$OUT/gpu.txt"

PARTS=${PARTS:-benchmark paths rollout race}
want() { [[ " $PARTS " == *" $1 "* ]]; }

# 1. The benchmark (SFT/TRL/packing/GRPO HF vs vLLM/generation/QLoRA at Qwen2.5-0.5B and -1.5B shapes).
want benchmark && timeout 480 $PY benchmarks/gpu.py --timeout 120 --out "$OUT/gpu.json" 2>&1 | tail -40 | tee "$OUT/benchmark.txt"

# 2. GPU-only paths, 3 steps each on the tiny model; one line per path: ok / FAILED / skipped.
run() {  # name, then posttrain train arguments
  local name=$1; shift
  # under torchrun (1 process) so DeepSpeed/FSDP find a process group, as on a real multi-GPU launch
  if timeout 90 $PY -m torch.distributed.run --standalone --nproc-per-node 1 -m posttrain train --recipe recipes/sft/tiny-cpu.yaml "training.output_dir=$OUT/runs/$name" \
       training.max_steps=3 training.logging_steps=1 training.save_steps=3 "$@" > "$OUT/$name.log" 2>&1; then
    echo "$name: ok ($(grep -o 'distributed type [A-Z_]*' "$OUT/$name.log" | head -1))"
  else
    echo "$name: FAILED (exit $?, see $name.log): $(grep -E 'Error|error' "$OUT/$name.log" | tail -1 | cut -c1-200)"
  fi
}
want paths && {
  run fsdp training.distributed=fsdp
  $PY -c "import deepspeed" 2>/dev/null && { run zero2 training.distributed=zero2; run zero3 training.distributed=zero3; } || echo "zero2/zero3: skipped (no deepspeed)"
  $PY -c "import bitsandbytes" 2>/dev/null && run qlora_ddp model.use_lora=true model.load_in_4bit=true training.distributed=ddp || echo "qlora: skipped (no bitsandbytes)"
  if $PY -c "import vllm" 2>/dev/null; then
    timeout 150 $PY -m posttrain train --recipe recipes/grpo/tiny-cpu.yaml "training.output_dir=$OUT/runs/grpo_vllm" training.max_steps=2 \
      training.use_vllm=true training.vllm_mode=colocate training.vllm_gpu_memory_utilization=0.2 training.save_steps=2 \
      > "$OUT/grpo_vllm.log" 2>&1 && echo "grpo_vllm_colocate: ok" || echo "grpo_vllm_colocate: FAILED (see grpo_vllm.log)"
  else
    echo "grpo_vllm_colocate: skipped (no vllm)"
  fi
} 2>&1 | tee "$OUT/paths.txt"

# 3. Rollouts on the real model: transformers' generate (as TRL calls it) vs posttrain's loop vs vLLM.
want rollout && timeout 240 $PY benchmarks/rollout_speed.py --device cuda --models smollm2 --prompts 16 --generations 8 \
  --max-new-tokens 128 --repeats 3 --out "$OUT/rollout_speed.json" 2>&1 | grep -v -i warn | tail -20 | tee "$OUT/rollout.txt"

# 4. The defaults race on the real model (SFT, DPO, GRPO with LoRA), one repeat, 120 s per contestant.
want race && timeout 330 $PY benchmarks/defaults_race.py --real --repeats 1 --timeout 120 --out "$OUT/defaults_race_real.json" \
  2>&1 | tail -45 | tee "$OUT/race.txt"
