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


@pytest.mark.parametrize("flags, per_cycle", [("avx2 fma avx512f avx512_bf16 amx_bf16", 1024), ("avx2 fma avx512f avx512_bf16", 128),
                                              ("avx2 fma avx512f", None), ("avx2 fma", None)])
def test_cpu_bf16_peak_from_the_bf16_units(flags, per_cycle):
    """bf16 on a CPU had no MFU at all; now AMX and AVX512-BF16 CPUs get an estimated bf16 peak, others (emulated bf16) none."""
    peak, how = cpu_peak_flops(2, f"flags : {flags}\n", max_khz=2_000_000, precision="bf16")
    if per_cycle is None:
        assert peak is None and "emulated" in how
    else:
        assert peak == 2 * 2e9 * per_cycle and f"{per_cycle} BF16 FLOP/cycle" in how
    assert cpu_peak_flops(2, f"flags : {flags}\n", max_khz=2_000_000, precision="fp16")[0] is None


def test_rl_mfu_is_over_training_time_not_the_whole_step():
    """A GRPO step of 10 s: 6 s generating, 2 s scoring, 2 s training 1,000 tokens at 6 MFLOP/token on a 1 TFLOP/s
    peak: MFU 6e9 / 2 s / 1e12 = 0.003 (over the whole step it read 0.0006, mostly generation's idle matmul units)."""
    from types import SimpleNamespace

    from posttrain.algorithms.monitor import RunMonitor, StepTimers

    timers = StepTimers()
    monitor = RunMonitor(rl=True, window=5, stop_on=[], max_completion_length=8, samples_per_step=4, peak=1e12,
                         peak_source="test", timers=timers, log=lambda _: None)
    monitor.flops_per_token, monitor._last_tokens = 6_000_000, 0.0
    monitor._interval_s, monitor._interval_steps = 10.0, 1
    timers.generation_s, timers.scoring_s = 6.0, 2.0
    logs = {"num_tokens": 1000}
    monitor._add_speed(logs, SimpleNamespace(num_input_tokens_seen=0))
    assert logs["time/training_s"] == 2.0 and logs["speed/tokens_per_s"] == 100.0
    assert logs["speed/mfu"] == pytest.approx(0.003)
    assert monitor.summary()["speed"]["mfu"] == pytest.approx(0.003)
