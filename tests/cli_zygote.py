"""`python -m posttrain ARGS` for the tests, without paying the imports on every run.

A fresh `posttrain train` spends ~5 s of CPU importing torch, transformers, PEFT and TRL before its
first line of work; the suite starts well over a hundred of them, so on 2 cores that was about a
third of its time. Here one "zygote" process per test worker imports them once, then forks a child
per command: the child is a new process with its own pid, working directory, environment,
stdout/stderr (files, read back as `subprocess.run` would return them), exit code, atexit handlers
and interpreter shutdown, and it runs the same `posttrain.cli.main` that `python -m posttrain` runs.
What it cannot have is a fresh import: so a command whose environment differs from the zygote's in
a variable a library reads when it is imported (`HF_*`, `OMP_*`, `TORCH*`, ...; see
`IMPORT_TIME`) runs as a real subprocess instead, and so does one started while another is running
(one zygote serves one command at a time). The zygote imports and runs nothing else, so no torch
thread pool or library state is forked. `POSTTRAIN_TEST_FORK=0` turns it off.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# environment variables read at import time by the libraries the zygote pre-imports (or by Python)
IMPORT_TIME = ("HF_", "HUGGINGFACE", "TRANSFORMERS", "TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_", "CUDA", "NCCL",
               "TOKENIZERS", "DEEPSPEED", "DS_", "ACCELERATE", "TRL", "PEFT", "WANDB", "MLFLOW", "PYTHON", "LD_", "LC_",
               "LANG", "TZ", "TQDM")

ZYGOTE = r"""
import json, os, sys
channel_out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # whatever an import prints must not reach the channel
import importlib, importlib.util, pkgutil
import posttrain, posttrain.cli, posttrain.algorithms.run, trl, peft, datasets, pandas, scipy.stats  # the heavy imports, once
for name in ("SFTTrainer", "DPOTrainer", "GRPOTrainer", "KTOTrainer"):  # TRL and transformers import lazily
    getattr(trl, name, None)
import transformers
for name in ("Qwen2ForCausalLM", "LlamaForCausalLM", "LlavaForConditionalGeneration", "AutoTokenizer"):
    getattr(transformers, name, None)
for module in pkgutil.walk_packages(posttrain.__path__, "posttrain."):
    if module.name != "posttrain.__main__":
        try:
            importlib.import_module(module.name)
        except Exception:  # an optional dependency: the command imports it (or fails) as a fresh process would
            pass
# not deepspeed (accelerate imports it in every run): what it prints at import is the run's own output
main_path = importlib.util.find_spec("posttrain.__main__").origin
own = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
base = [p for p in sys.path[1:] if p not in own]  # sys.path without the cwd and the zygote's PYTHONPATH
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:  # the command's process
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[:] = [request["cwd"], *[p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p], *base]
        if importlib.util.find_spec("sitecustomize"):  # as Python's start-up (site.py) imports it
            importlib.import_module("sitecustomize")
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        channel_out.close()
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False, buffering=1)
        sys.argv = [main_path, *request["args"]]
        raise SystemExit(posttrain.cli.main(request["args"]))  # exits as `python -m posttrain` does
    channel_out.write(f"{pid}\n")
    channel_out.flush()
    _, status = os.waitpid(pid, 0)
    channel_out.write(f"{os.waitstatus_to_exitcode(status)}\n")
    channel_out.flush()
"""


class Zygote:
    def __init__(self):
        self.env = dict(os.environ)
        self.proc = subprocess.Popen([sys.executable, "-c", ZYGOTE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=self.env)
        self.lock = threading.Lock()
        atexit.register(self.close)

    def usable_for(self, env: dict) -> bool:
        changed = {k for k in env.keys() | self.env.keys() if env.get(k) != self.env.get(k)}
        return self.proc.poll() is None and not any(k.startswith(IMPORT_TIME) and k != "PYTHONPATH" for k in changed)

    def run(self, args: list[str], cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory(prefix="cli-") as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            request = {"args": args, "cwd": str(Path(cwd).resolve()), "env": env, "stdout": str(out), "stderr": str(err)}
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            pid = int(self.proc.stdout.readline())
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
            if not ready:
                os.kill(pid, 9)
                self.proc.stdout.readline()
                raise subprocess.TimeoutExpired([sys.executable, "-m", "posttrain", *args], timeout,
                                                out.read_text(errors="replace"), err.read_text(errors="replace"))
            code = int(self.proc.stdout.readline())
            return subprocess.CompletedProcess([sys.executable, "-m", "posttrain", *args], code,
                                               out.read_text(errors="replace"), err.read_text(errors="replace"))

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


_zygote: Zygote | None = None


def run_posttrain(args: list[str], cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """`python -m posttrain ARGS` in `cwd` with exactly `env`: forked from the zygote where that is
    the same as a fresh process (see the module docstring), else a real subprocess."""
    global _zygote
    if os.environ.get("POSTTRAIN_TEST_FORK", "1") != "0" and hasattr(os, "fork"):
        if _zygote is None or _zygote.proc.poll() is not None:
            _zygote = Zygote()
        if _zygote.usable_for(env) and _zygote.lock.acquire(blocking=False):
            try:
                return _zygote.run(args, cwd, env, timeout)
            finally:
                _zygote.lock.release()
    return subprocess.run([sys.executable, "-m", "posttrain", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)
