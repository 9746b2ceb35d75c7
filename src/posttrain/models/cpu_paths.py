"""Which CPU speed paths a run takes, by CPU kind and algorithm: read from the CPU's flags, never from a timing,
so two runs on one kind of machine train alike.

A path stays on where a race on that kind showed it earns >= 1.1x in speed or peak memory, on and off in one
run (docs: speed paths). Kinds:

    amx            amx_bf16 (Intel Sapphire Rapids and later): bf16 autocast on AMX tiles
    avx512_bf16    avx512_bf16 without AMX: bf16 autocast
    avx2           neither: float32 training

On avx512_bf16 every path earned its place (benchmarks/results/speed_paths_*_avx512.txt). On AMX
(speed_paths_sft_dpo_amx.txt) padding-free SFT earned 1.13x, the LM head 1.13x in DPO and 0.80x memory in SFT,
the attention 1.11x in DPO and 0.98x in SFT: it is off for SFT (and RFT, which trains as SFT does) there.
On AVX2 (benchmarks/results/speed_paths_avx2_issue48.md) the CPU attention cost SFT 0.75x and DPO 0.99x, the
CPU LM head 0.65x and 0.97x: both are off there outside the GRPO family, where the LM head earned 1.20x and
flattened scoring (which needs the CPU attention to keep rows apart) 1.12x.

Padding-free SFT batches do not need the CPU attention: transformers' own sdpa and eager attention keep the
flattened rows apart too (their packed-sequence mask, read from the position ids; tested on every family in
tests/models/test_fast_paths_every_family.py), so SFT is padding-free on every kind (trl_config.batching_defaults).
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

# CPU instructions that decide posttrain's CPU speed paths and bf16 (docs: Training fast on a CPU).
CPU_FLAGS = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx2")
PATHS = ("cpu_attention", "lm_head", "flat_scoring")
NAMES = {"cpu_attention": "CPU attention", "lm_head": "the CPU LM head",
         "flat_scoring": "flattened GRPO scoring"}
RL_FAMILY = ("grpo", "gspo", "rloo")
# kind -> path -> (algorithms where it is ON, why it is off elsewhere); a kind missing here has every path on.
# AVX2: benchmarks/results/speed_paths_avx2_issue48.md
OFF_EXCEPT: dict[str, dict[str, tuple[tuple[str, ...], str]]] = {
    "avx2": {"cpu_attention": (RL_FAMILY, "0.75x SFT, 0.99x DPO tokens/s on AVX2"),
             "lm_head": (RL_FAMILY, "0.65x SFT, 0.97x DPO tokens/s on AVX2")},
}
# kind -> path -> (algorithms where it is OFF, why); everywhere else on. AMX: benchmarks/results/speed_paths_sft_dpo_amx.txt
OFF_FOR: dict[str, dict[str, tuple[tuple[str, ...], str]]] = {
    "amx": {"cpu_attention": (("sft", "rft"), "0.98x SFT tokens/s against sdpa on AMX")},
}


def cpu_kind(cpuinfo: str | None = None) -> str:
    """amx, avx512_bf16 or avx2, from /proc/cpuinfo's flags (avx2 where they cannot be read: the slowest kind's choices)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return "avx2"
    line = next((line for line in cpuinfo.splitlines() if line.startswith(("flags", "Features"))), "")
    flags = set(line.partition(":")[2].split())
    return "amx" if "amx_bf16" in flags else "avx512_bf16" if "avx512_bf16" in flags else "avx2"


def path_on(path: str, algorithm: str, kind: str | None = None) -> bool:
    """Whether `path` runs for `algorithm` on this CPU kind."""
    kind = kind or cpu_kind()
    rule, off = OFF_EXCEPT.get(kind, {}).get(path), OFF_FOR.get(kind, {}).get(path)
    return (rule is None or algorithm in rule[0]) and (off is None or algorithm not in off[0])


def startup_note(algorithm: str, kind: str | None = None) -> str | None:
    """The start-up line naming the paths this kind switches off for this algorithm, and why; None when all are on."""
    kind = kind or cpu_kind()
    off = [(path, why) for path, (on_for, why) in OFF_EXCEPT.get(kind, {}).items() if algorithm not in on_for]
    off += [(path, why) for path, (off_for, why) in OFF_FOR.get(kind, {}).items() if algorithm in off_for]
    if not off:
        return None
    return (f"cpu speed paths ({kind}): " + "; ".join(f"{NAMES[p]} off ({why})" for p, why in off)
            + ": each path runs only where it earned >= 1.1x on this kind of CPU (posttrain docs results/speed-paths)")


def cpu_description(cpuinfo: str | None = None) -> tuple[str, str]:
    """(model and logical cores, the CPU_FLAGS it has) from /proc/cpuinfo; platform's word elsewhere."""
    cores = os.cpu_count() or "?"
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return f"{platform.processor() or platform.machine()}, {cores} logical cores", "unknown (no /proc/cpuinfo)"
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, flags=re.M)
    flags_line = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", cpuinfo, flags=re.M)
    flags = set(flags_line.group(1).split()) if flags_line else set()
    have = [f for f in CPU_FLAGS if f in flags]
    name = model.group(1).strip() if model else platform.machine()
    return f"{name}, {cores} logical cores", " ".join(have) or f"none of {', '.join(CPU_FLAGS)}"
