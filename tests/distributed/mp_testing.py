"""Helpers for real multi-process runs (gloo on CPU): free ports, reading weights and metrics."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# One thread per process: the machines that run the suite have 2 cores, and 2 ranks share them.
ENV = {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
# Small and quick: the 1m tiny model, 3 steps, a step's loss and grad-norm logged every step.
# Random batches (TRL's sampler), whatever the batching default: the weight tolerances below were
# calibrated on them, and with grouped batches ZeRO-3 vs DDP drifted to 1.2e-4 (losses still equal
# to 1e-4). float32 on every CPU: on one with native bf16 posttrain trains in bf16 by default, whose
# rounding depends on each batch's shape (2 x 8 rows against 1 x 16 differed by 7e-5 in the loss);
# the tests compare process layouts, not precisions, at float32's tolerance.
FAST = ["training.max_steps=3", "training.logging_steps=1", "training.save_steps=1000", "training.learning_rate=1e-2",
        "training.max_length=64", "training.seed=0", "training.train_sampling_strategy=random", "training.bf16=false"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def posttrain(*args, timeout: int = 300, env: dict | None = None, **popen) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posttrain", *map(str, args)], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **ENV, **(env or {})}, **popen)


def start(*args, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "posttrain", *map(str, args)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, **ENV, **(env or {})})


def losses(out: Path, key: str = "loss") -> list[float]:
    return [r[key] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if key in r]


def weights(out: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(out / "model.safetensors"))


def max_weight_diff(a: Path, b: Path) -> float:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    return max((wa[k] - wb[k]).abs().max().item() for k in wa)
