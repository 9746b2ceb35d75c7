"""`posttrain env`: what a bug report needs about this machine, in a second.

Versions come from the installed packages' metadata (importlib.metadata) and torch's CUDA build from
its `version.py`, read as text: nothing heavy is imported, so it answers even where torch is broken,
which is when a bug report is most needed.
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

# The libraries a run stands on, in the order a report reads them.
PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "safetensors", "tokenizers", "vllm",
            "deepspeed", "math-verify")


def add_parser(sub) -> None:
    p = sub.add_parser("env", help="print what a bug report needs: versions, commit, Python, OS, CPU flags, GPUs",
                       description="Print posttrain's version (and git commit when it runs from a checkout), Python, the "
                       "OS, the CPU and the instruction flags posttrain's CPU paths depend on, the versions of torch, "
                       "transformers, TRL, PEFT, accelerate and datasets, and the GPUs nvidia-smi sees. Paste it into a "
                       "bug report. Imports no torch.")
    p.set_defaults(func=run)


def run(args) -> int:
    for key, value in report().items():
        print(f"{key + ':':<14}{value}")
    return 0


def report() -> dict[str, str]:
    """Every line of `posttrain env`, as key -> value."""
    out = {"posttrain": _posttrain()}
    out["python"] = f"{platform.python_version()} ({platform.python_implementation()}, {sys.executable})"
    out["os"] = platform.platform()
    from posttrain.models.cpu_paths import cpu_description

    out["cpu"], out["cpu flags"] = cpu_description()
    for name in PACKAGES:
        version = _version(name)
        if version is not None or name in ("torch", "transformers", "trl", "peft", "accelerate", "datasets"):
            out[name] = version or "not installed"
    out["torch cuda"] = _torch_cuda()
    out["gpus"] = _gpus()
    return out


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _posttrain() -> str:
    """The version, with the commit (and whether the tree has changes) when posttrain runs from a git checkout."""
    import posttrain

    text = posttrain.__version__
    root = Path(posttrain.__file__).resolve().parents[2]  # src/posttrain/__init__.py -> the checkout
    if not (root / ".git").exists() or not (root / "src" / "posttrain").is_dir():
        return f"{text} (installed, not a checkout)"
    try:
        commit = _git(root, "rev-parse", "--short=12", "HEAD")
        dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return f"{text} (checkout at {root}; git unavailable)"
    return f"{text} (checkout {root}, commit {commit}{', with uncommitted changes' if dirty else ''})"


def _git(root: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=True)
    return result.stdout.strip()


def _torch_cuda() -> str:
    """The CUDA version torch was built for, read from torch/version.py without importing torch."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return "torch not installed"
    try:
        text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    except OSError:
        return "unknown"
    cuda = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]?([^'\"\n]+?)['\"]?\s*$", text, flags=re.M)
    return f"built for CUDA {cuda.group(1)}" if cuda and cuda.group(1) != "None" else "CPU-only build"


def _gpus() -> str:
    if shutil.which("nvidia-smi") is None:
        return "none found (no nvidia-smi)"
    try:
        result = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as e:
        return f"nvidia-smi failed: {e}"
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    if result.returncode != 0 or not lines:
        return f"nvidia-smi found no GPU ({(result.stderr or result.stdout).strip()[:120] or 'no output'})"
    return "; ".join(lines) + " (name, memory, driver)"
