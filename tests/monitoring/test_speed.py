"""Speed metrics' pure parts: the GPU peak table, the CPU peak estimate, FLOPs per token, MFU."""

import pytest

from posttrain.monitoring.speed import cpu_peak_flops, flops_per_token, gpu_peak_flops, mfu


def test_gpu_peaks_from_the_table():
    assert gpu_peak_flops("NVIDIA H100 PCIe", "bf16") == 756e12  # the specific name wins over "h100"
    assert gpu_peak_flops("NVIDIA H100 80GB HBM3", "bf16") == 989e12
    assert gpu_peak_flops("NVIDIA A100-SXM4-80GB", "fp32") == 19.5e12
    assert gpu_peak_flops("Tesla V100-SXM2-16GB", "bf16") is None  # V100 has no bf16
    assert gpu_peak_flops("Some Future GPU", "bf16") is None


@pytest.mark.parametrize("flags, per_cycle", [("fpu avx2 fma avx512f", 64), ("fpu avx2 fma", 32), ("fpu sse2", 8)])
def test_cpu_peak_from_vector_units_and_clock(flags, per_cycle):
    peak, how = cpu_peak_flops(4, f"processor : 0\nflags : {flags}\ncpu MHz : 1000.0\n", max_khz=2_500_000)
    assert peak == 4 * 2.5e9 * per_cycle
    assert "estimated" in how and f"{per_cycle} FP32" in how
    # a clock of 0 (unknown) gives no peak rather than a made-up one
    assert cpu_peak_flops(1, f"flags : {flags}\ncpu MHz : 2000.0\n", max_khz=0)[0] is None


def test_flops_per_token_and_mfu():
    assert flops_per_token(1_000_000, 1_000_000) == 6_000_000  # full fine-tuning: 6N
    assert flops_per_token(1_000_000, 10_000) == 4_020_000  # LoRA: no weight gradient for frozen weights
    assert mfu(6_000_000, 500.0, 3e10) == pytest.approx(0.1)
    assert mfu(6_000_000, 500.0, None) is None
