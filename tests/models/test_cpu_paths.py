"""The CPU speed paths a run takes are read from the CPU's flags, per kind and algorithm, and said at start-up."""

from __future__ import annotations

import pytest

from posttrain.models.cpu_paths import cpu_kind, path_on, startup_note

AMX = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
AVX512 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n"
AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n"


def test_the_kind_comes_from_the_flags():
    assert (cpu_kind(AMX), cpu_kind(AVX512), cpu_kind(AVX2), cpu_kind("")) == ("amx", "avx512_bf16", "avx2", "avx2")


def test_on_avx512_every_path_runs():
    assert all(path_on(p, a, "avx512_bf16") for p in ("cpu_attention", "lm_head", "flat_scoring") for a in ("sft", "dpo", "grpo", "kto"))
    assert startup_note("sft", "avx512_bf16") is None


def test_on_amx_sft_takes_transformers_attention():
    """0.98x against sdpa in SFT on AMX (the same padding-free batches), 1.11x in DPO: off for SFT and RFT alone."""
    for algorithm in ("sft", "rft"):
        assert not path_on("cpu_attention", algorithm, "amx") and path_on("lm_head", algorithm, "amx")
    assert all(path_on(p, a, "amx") for p in ("cpu_attention", "lm_head", "flat_scoring") for a in ("dpo", "grpo", "kto"))
    assert startup_note("sft", "amx").startswith("cpu speed paths (amx): CPU attention off (0.98x SFT tokens/s against sdpa on AMX)")
    assert startup_note("dpo", "amx") is None


def test_on_avx2_only_the_rl_family_keeps_the_attention_and_the_lm_head():
    for algorithm in ("sft", "cpt", "dpo", "kto", "reward", "distill"):
        assert not path_on("cpu_attention", algorithm, "avx2") and not path_on("lm_head", algorithm, "avx2")
    for algorithm in ("grpo", "gspo", "rloo"):  # the LM head earned 1.20x and flattened scoring 1.12x there
        assert path_on("cpu_attention", algorithm, "avx2") and path_on("lm_head", algorithm, "avx2")
    note = startup_note("sft", "avx2")
    assert note.startswith("cpu speed paths (avx2): CPU attention off (0.75x SFT")
    assert "the CPU LM head off (0.65x SFT" in note and "posttrain docs results/speed-paths" in note
    assert startup_note("grpo", "avx2") is None
