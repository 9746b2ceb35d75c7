"""Run a training command in this process and record when it reached each milestone (for startup.py).

    STARTUP_T0=$(date +%s.%N) python benchmarks/_startup_probe.py OUT.json -m posttrain train --recipe R ...
    STARTUP_T0=$(date +%s.%N) python benchmarks/_startup_probe.py OUT.json benchmarks/_direct_trl.py sft ...

STARTUP_T0 is the wall-clock time the parent took just before starting this process, so every
milestone includes the interpreter's own start. Milestones (seconds after STARTUP_T0):

- `probe_start`: this file starts running (the interpreter is up);
- `heavy_import`: `posttrain.algorithms.run` starts to import, i.e. the CLI has read, overridden,
  validated and preflighted the recipe and torch/transformers/TRL are about to load (posttrain only);
- `train_begin`: the trainer's `on_train_begin`;
- `step1`: the first optimizer step and its callbacks are done. The probe then writes OUT.json and
  ends the process at once (`os._exit`): nothing after step 1 is measured, so runs stay short.

`cpu` holds the process's CPU seconds (all threads) at the same milestones: on a shared machine
they move far less than wall time. `own_s` (posttrain only) is posttrain's own recipe handling:
the CLI's part (`heavy_import - probe_start`, which includes importing posttrain and pydantic) plus
the time inside the recipe functions `_build_run` calls later (printing the diff against the
defaults, the output_dir lock, resume check, resolved recipe, provenance, run history);
`own_cpu_s` is the same in CPU seconds counted from the process's start (so it includes the
interpreter's own start, ~0.02 s). The trainable weights before step 1 and after it go to
OUT.before.safetensors and OUT.after.safetensors, so startup.py can check, parameter by parameter,
that the two contestants really trained the same step; `param_sum` is their checksum, for the table.

The hooks go in through an import hook, so neither posttrain nor the TRL script is changed or
imported early.
"""

from __future__ import annotations

import importlib.abc
import json
import os
import runpy
import sys
import time

T0 = float(os.environ.get("STARTUP_T0") or time.time())
marks: dict[str, float] = {"probe_start": time.time() - T0}
cpu: dict[str, float] = {"probe_start": time.process_time()}  # CPU seconds of this process so far
own = {"seconds": 0.0, "cpu": 0.0, "depth": 0, "calls": {}}
OUT = sys.argv[1]

# run.py's recipe work after the CLI (functions looked up in run.py's namespace at call time)
RUN_OWN = ("format_differences", "resume_point", "check_resume_recipe", "resolved_dict", "to_yaml", "provenance",
           "write_history", "keep_metrics", "runtime_defaults")


def timed(fn, name):
    def wrapper(*args, **kwargs):
        if own["depth"]:
            return fn(*args, **kwargs)
        own["depth"] += 1
        start, start_cpu = time.perf_counter(), time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent = time.perf_counter() - start
            own["seconds"] += spent
            own["cpu"] += time.process_time() - start_cpu
            own["calls"][name] = own["calls"].get(name, 0.0) + spent
            own["depth"] -= 1

    return wrapper


def after_run_module(module) -> None:
    for name in RUN_OWN:
        if hasattr(module, name):
            setattr(module, name, timed(getattr(module, name), name))
    lock = module.OutputDirLock
    lock.acquire = timed(lock.acquire, "OutputDirLock.acquire")


def save_trainable(model, which: str) -> float | None:
    """Write the trainable weights to OUT.<which>.safetensors; their checksum."""
    if model is None:
        return None
    import torch
    from safetensors.torch import save_file

    with torch.no_grad():
        weights = {name: p.detach().float().contiguous().clone() for name, p in model.named_parameters() if p.requires_grad}
    save_file(weights, f"{OUT}.{which}.safetensors")
    return float(sum(w.double().sum() for w in weights.values()))


def finish(model) -> None:
    marks["step1"] = time.time() - T0
    cpu["step1"] = time.process_time()
    total = save_trainable(model, "after")
    result = {"marks": {k: round(v, 4) for k, v in marks.items()}, "cpu": {k: round(v, 4) for k, v in cpu.items()}, "param_sum": total}
    if "heavy_import" in marks:
        cli = marks["heavy_import"] - marks["probe_start"]
        result["own_s"] = round(cli + own["seconds"], 4)
        result["own_cpu_s"] = round(cpu["heavy_import"] + own["cpu"], 4)  # includes the interpreter's start
        result["own_parts"] = {"cli": round(cli, 4), **{k: round(v, 4) for k, v in own["calls"].items()}}
    with open(OUT, "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def after_trainer_callback(module) -> None:
    handler = module.CallbackHandler
    on_train_begin, on_step_end = handler.on_train_begin, handler.on_step_end

    def train_begin(self, args, state, control):
        marks["train_begin"] = time.time() - T0
        cpu["train_begin"] = time.process_time()
        control = on_train_begin(self, args, state, control)
        save_trainable(getattr(self, "model", None), "before")  # a few ms, the same for both contestants
        return control

    def step_end(self, args, state, control):
        control = on_step_end(self, args, state, control)
        finish(getattr(self, "model", None))
        return control

    handler.on_train_begin, handler.on_step_end = train_begin, step_end


class Hook(importlib.abc.MetaPathFinder):
    """Runs `before` as a module starts importing and `after(module)` once it has."""

    def __init__(self, hooks: dict):
        self.hooks = hooks

    def find_spec(self, name, path, target=None):
        if name not in self.hooks:
            return None
        before, after = self.hooks.pop(name)
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        exec_module = spec.loader.exec_module

        def run(module):
            if before:
                before()
            exec_module(module)
            if after:
                after(module)

        spec.loader.exec_module = run
        return spec


def mark(name):
    def now():
        marks.setdefault(name, time.time() - T0)
        cpu.setdefault(name, time.process_time())

    return now


sys.meta_path.insert(0, Hook({
    "posttrain.algorithms.run": (mark("heavy_import"), after_run_module),
    "transformers.trainer_callback": (None, after_trainer_callback),
}))

target = sys.argv[2:]
if target[0] == "-m":
    sys.argv = [target[1], *target[2:]]
    runpy.run_module(target[1], run_name="__main__", alter_sys=True)
else:
    sys.argv = target
    runpy.run_path(target[0], run_name="__main__")
raise SystemExit(f"{' '.join(target)} ended without a training step")
