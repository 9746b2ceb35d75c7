"""`training.distributed`: which engine shards the model across processes, from a shipped config.

    training:
      distributed: zero3      # ddp | zero2 | zero3 | zero3_offload | fsdp

Each choice is one commented YAML file in `posttrain/distributed/configs/` holding fields of TRL's
config (transformers' `TrainingArguments`): `deepspeed` (a DeepSpeed config, "auto" values filled
in from the recipe by transformers), `fsdp` + `fsdp_config`, or DDP's own knobs. Going through the
trainer's own fields, rather than an `accelerate launch --config_file`, means the choice works
under any launcher: `posttrain train --nproc N`, torchrun, `accelerate launch`, SLURM's srun, Ray
or a Kubernetes operator, because it travels with the recipe, not with the launch line.

A recipe may instead set TRL's `training.deepspeed` (a JSON file or a mapping) or
`training.fsdp`/`fsdp_config` itself; setting both that and `training.distributed` is an error.

This module imports only the standard library and yaml (no torch): `posttrain validate` uses it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

CONFIG_DIR = Path(__file__).with_name("configs")

# choice -> (python package the engine needs, or None; one line for the start-up log)
BACKENDS: dict[str, tuple[str | None, str]] = {
    "ddp": (None, "DistributedDataParallel: every process holds the whole model"),
    "zero2": ("deepspeed", "DeepSpeed ZeRO-2: optimizer state and gradients sharded"),
    "zero3": ("deepspeed", "DeepSpeed ZeRO-3: weights, gradients and optimizer state sharded"),
    "zero3_offload": ("deepspeed", "DeepSpeed ZeRO-3, optimizer state and weights offloaded to CPU RAM"),
    "fsdp": (None, "PyTorch FSDP2: weights, gradients and optimizer state sharded"),
}

# Whole-backend TRL fields: a recipe that sets one of them and training.distributed is refused (two
# sharding configs). The shipped configs' other fields (ddp_timeout, ...) are presets: a recipe
# that sets one of those keeps its own value.
BACKEND_KEYS = ("deepspeed", "fsdp", "fsdp_config")


def config_path(choice: str) -> Path:
    return CONFIG_DIR / f"{choice}.yaml"


def backend_fields(choice: str) -> dict:
    """The TRL config fields of a shipped backend config (a dict; DeepSpeed's config is a mapping)."""
    import yaml

    return yaml.safe_load(config_path(choice).read_text()) or {}


def package_available(name: str) -> bool:
    """Whether `import name` would find the package, without importing it (no torch import)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a broken install or a blocked import counts as missing
        return False


def deepspeed_stage(training) -> int | None:
    """The ZeRO stage the recipe asks for (shipped choice or the user's own training.deepspeed), if known."""
    choice = training.distributed
    if choice in ("zero2", "zero3", "zero3_offload"):
        return backend_fields(choice)["deepspeed"]["zero_optimization"]["stage"]
    config = training.deepspeed
    if isinstance(config, str) and Path(config).is_file():
        import json

        try:
            config = json.loads(Path(config).read_text())
        except ValueError:
            return None
    if isinstance(config, dict):
        return (config.get("zero_optimization") or {}).get("stage")
    return None


def backend_problems(training, has_cuda: bool) -> list[tuple[str, str]]:
    """(key, message) for every reason the chosen backend cannot run on this machine: its package
    is missing, its config file does not exist, or (FSDP) no GPU. Used by `posttrain validate` and
    before training."""
    problems = []
    choice = training.distributed
    if (choice == "fsdp" or training.fsdp) and not has_cuda:
        # accelerate 1.15 (state.py, AcceleratorState) switches to DistributedType.FSDP only for GPU-like
        # process groups; with CPU (gloo) ranks it keeps MULTI_CPU and wraps the model in plain DDP.
        key = "training.distributed" if choice == "fsdp" else "training.fsdp"
        problems.append((key, "FSDP needs CUDA GPUs and none is visible: on CPU, accelerate (which the trainer uses) "
                         "silently runs plain DDP instead of FSDP. Use training.distributed=ddp (or zero2/zero3, which "
                         "DeepSpeed also runs on CPU) here, and fsdp on the GPU machine."))
    if choice is not None:
        package, _ = BACKENDS[choice]
        if not config_path(choice).is_file():
            problems.append(("training.distributed", f"{choice!r}: the shipped config {config_path(choice)} is missing (a broken install; reinstall posttrain)."))
        if package and not package_available(package):
            problems.append(("training.distributed", f"{choice!r} needs the {package} package, which is not installed: "
                             f"pip install {package} (on a CUDA machine), or choose training.distributed=ddp or fsdp."))
    own = training.deepspeed
    if own is not None:
        if isinstance(own, str) and not Path(own).expanduser().is_file():
            problems.append(("training.deepspeed", f"DeepSpeed config file {own!r} does not exist; give a JSON file or a mapping, or use training.distributed=zero2|zero3|zero3_offload."))
        if not package_available("deepspeed"):
            problems.append(("training.deepspeed", "needs the deepspeed package, which is not installed: pip install deepspeed (on a CUDA machine)."))
    return problems


def skip_deepspeed_inference_op() -> bool:
    """DeepSpeed on a CPU compiles a C++ shared-memory all-reduce (25-130 s on 2 cores, once per machine and torch
    build) when its communication backend starts. Only `inference_all_reduce` (tensor-parallel inference) calls it:
    ZeRO training's collectives go through torch.distributed (gloo) whether it is built or not, so a training run
    computes the same without it. Marking it incompatible in DeepSpeed's table of probed ops (a dict kept in the module
    so that edits persist) skips the build. True when skipped; False where DeepSpeed no longer has the table (the
    build then happens, as before)."""
    import deepspeed.ops

    from posttrain.internals import require

    compatible = require(deepspeed.ops, "__compatible_ops__", missing_ok=True)
    if not isinstance(compatible, dict):
        return False
    compatible["deepspeed_shm_comm"] = False
    return True
