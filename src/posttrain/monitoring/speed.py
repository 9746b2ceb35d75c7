"""How fast a run trains: tokens/s, samples/s, the RL step split, and MFU against the device's peak.

Definitions (what metrics.jsonl's ``speed/*`` keys mean):

* ``speed/tokens_per_s``: non-padding tokens the trainer consumed per second of step time, from
  TRL's own ``num_tokens`` counter (SFT/CPT: attention-mask tokens of the training batches; GRPO/GSPO:
  prompt + completion tokens of the generated batches). Padding is never counted.
* ``speed/samples_per_s``: training sequences per second (GRPO: completions, i.e. prompts x
  num_generations).
* ``time/generation_s``, ``time/scoring_s``, ``time/training_s`` (RL only): seconds per optimizer
  step spent generating completions, computing rewards, and the rest (log-probs, loss, backward,
  optimizer). The three add up to the step time.
* ``speed/mfu``: model FLOPs utilisation, ``FLOPs per token x tokens_per_s / peak`` with the usual
  6N FLOPs per trained token for full training (Kaplan et al. 2020; the PaLM paper's MFU), 4N + 2N_trainable
  with LoRA (frozen weights need no weight gradient), and nothing for attention, so it slightly
  under-counts for long sequences. In GRPO/GSPO it is taken over the *training* time of each step
  (``time/training_s``: the loss's forward and backward, the no-grad log-prob passes and the
  optimizer), not the whole step: generation (2N per decoded token, memory-bound) and scoring are
  not 6N work and would make the number meaningless; ``speed/generation_tokens_per_s`` covers
  generation. The no-grad log-prob passes add uncounted 2N per token, so RL MFU is a slight
  under-estimate. Logged only when the peak is known.

The peak: dense (no sparsity) tensor-core throughput for the run's precision from the vendor's
data sheet for common GPUs (``GPU_PEAK_TFLOPS``); other GPUs get no MFU. On a CPU the peak is an
*estimate*: cores used x clock x FLOPs per cycle per core from the units the CPU reports. float32:
AVX-512 64, AVX2 with FMA 32, otherwise 8. bf16 (autocast's matmuls run in bf16 through oneDNN):
AMX-BF16 1,024 (Intel's figure for its tile unit), AVX512-BF16 128 (VDPBF16PS: two bf16
products per float32 lane); a CPU with neither emulates bf16 and gets no peak. The clock is the
maximum frequency the kernel reports. Turbo, shared cores and memory bandwidth make real CPU peaks
lower, so CPU MFU is a rough lower-bound-ish indicator, labelled "estimated".
"""

from __future__ import annotations

import os
from pathlib import Path

# name fragment (lower case) -> {precision: dense TFLOPS}; first match wins, so specific names come first.
GPU_PEAK_TFLOPS: list[tuple[str, dict[str, float]]] = [
    ("h200", {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0}),
    ("h100 pcie", {"bf16": 756.0, "fp16": 756.0, "fp32": 51.0}),
    ("h100", {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0}),  # SXM
    ("a100", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}),
    ("l40s", {"bf16": 362.0, "fp16": 362.0, "fp32": 91.6}),
    ("l4", {"bf16": 121.0, "fp16": 121.0, "fp32": 30.3}),
    ("a10g", {"bf16": 70.0, "fp16": 70.0, "fp32": 35.0}),
    ("v100", {"fp16": 125.0, "fp32": 15.7}),
    ("t4", {"fp16": 65.0, "fp32": 8.1}),
]


def gpu_peak_flops(name: str, precision: str) -> float | None:
    """Dense peak FLOP/s of a GPU by its device name, or None when it is not in the table.

    >>> gpu_peak_flops("NVIDIA H100 80GB HBM3", "bf16")
    989000000000000.0
    >>> gpu_peak_flops("NVIDIA GeForce GTX 1080", "fp32") is None
    True
    """
    lowered = name.lower()
    for fragment, peaks in GPU_PEAK_TFLOPS:
        if fragment in lowered:
            return peaks[precision] * 1e12 if precision in peaks else None
    return None


def cpu_peak_flops(threads: int, cpuinfo: str | None = None, max_khz: int | None = None,
                   precision: str = "fp32") -> tuple[float | None, str]:
    """Estimated peak of ``threads`` CPU cores in ``precision`` (fp32 or bf16) and how it was estimated.

    >>> cpu_peak_flops(2, "flags : fpu avx2 fma\\nmodel name : X\\n", max_khz=3_000_000)
    (192000000000.0, '2 cores x 3.00 GHz x 32 FP32 FLOP/cycle (AVX2+FMA), estimated')
    >>> cpu_peak_flops(2, "flags : avx512f avx512_bf16 fma\\n", max_khz=2_000_000, precision="bf16")
    (512000000000.0, '2 cores x 2.00 GHz x 128 BF16 FLOP/cycle (AVX512-BF16), estimated')
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None, "unknown CPU (no /proc/cpuinfo): no peak"
    flags = set()
    mhz = None
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags" and not flags:
            flags = set(value.split())
        elif key.strip() == "cpu MHz" and mhz is None:
            try:
                mhz = float(value)
            except ValueError:
                pass
    if max_khz is None:
        try:
            max_khz = int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text())
        except (OSError, ValueError):
            max_khz = int(mhz * 1000) if mhz else None
    if not max_khz:
        return None, "CPU clock unknown: no peak"
    if precision == "bf16":
        if "amx_bf16" in flags:
            per_cycle, unit = 1024, "AMX-BF16"
        elif "avx512_bf16" in flags:
            per_cycle, unit = 128, "AVX512-BF16"
        else:
            return None, "CPU without avx512_bf16/amx_bf16: bf16 is emulated, no peak"
    elif precision != "fp32":
        return None, f"CPU in {precision}: no peak estimate"
    elif "avx512f" in flags:
        per_cycle, unit = 64, "AVX-512"
    elif "avx2" in flags and "fma" in flags:
        per_cycle, unit = 32, "AVX2+FMA"
    else:
        per_cycle, unit = 8, "SSE"
    ghz = max_khz / 1e6
    kind = "BF16" if precision == "bf16" else "FP32"
    return threads * ghz * 1e9 * per_cycle, f"{threads} cores x {ghz:.2f} GHz x {per_cycle} {kind} FLOP/cycle ({unit}), estimated"


def device_peak(precision: str) -> tuple[float | None, str]:
    """(peak FLOP/s or None, where it came from) for the device this process trains on."""
    import torch

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        peak = gpu_peak_flops(name, precision)
        return peak, (f"{name}, {precision} dense peak {peak / 1e12:g} TFLOPS (data sheet)" if peak
                      else f"{name}: not in posttrain's peak table, no MFU")
    return cpu_peak_flops(torch.get_num_threads(), precision=precision)


def flops_per_token(params: int, trainable: int) -> int:
    """Training FLOPs per token: forward 2N, backward 2N for activations + 2N_trainable for weights
    (6N for full fine-tuning, about 4N for LoRA).

    >>> flops_per_token(1_000, 1_000), flops_per_token(1_000, 10)
    (6000, 4020)
    """
    return 4 * params + 2 * trainable


def mfu(flops_per_token: float, tokens_per_s: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation: FLOPs per token x tokens/s over the peak; None without a peak.

    >>> round(mfu(6_000_000, 1000.0, 6e10), 3)
    0.1
    """
    if not peak or tokens_per_s is None:
        return None
    return flops_per_token * tokens_per_s / peak


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))
