"""Checks of a valid recipe against this machine, still without importing torch.

The schema checks what a recipe *says*; preflight checks what it *needs*: local files that
exist, a GPU for bitsandbytes quantisation, the tracking provider's package. It runs in
`posttrain validate` and before anything heavy loads in `posttrain train`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

from posttrain.data.splits import DATA_SUFFIXES, looks_local
from posttrain.shipped import CHATML_TOOLS, copy_hint

from .errors import Problem, RecipeError
from .schema import Recipe

TRACKING_PACKAGES = {"wandb": "wandb", "tensorboard": "tensorboard", "mlflow": "mlflow", "trackio": "trackio"}


def has_cuda() -> bool:
    """Whether an NVIDIA GPU is visible, without importing torch."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None


def gpu_compute_capability() -> float | None:
    """The lowest compute capability among visible NVIDIA GPUs (nvidia-smi, no torch), or None if unknown."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True, text=True, timeout=10).stdout
        caps = [float(line) for line in out.split()]
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return min(caps) if caps else None


def precision_problems(training) -> list[Problem]:
    """bf16 asked for on a machine without it: emulated on such a CPU (~6x slower), refused by an old GPU."""
    asked = [k for k in ("bf16", "bf16_full_eval") if getattr(training, k, None)]
    if not asked or getattr(training, "use_cpu", None):
        return []
    key = f"training.{asked[0]}"
    if not has_cuda():
        from posttrain.models.loading import CPU_BF16_FLAGS, cpu_bf16_flag

        if cpu_bf16_flag():
            return []
        return [Problem(key, f"bf16 needs a CUDA GPU with bf16 support (Ampere or newer) or a CPU with native bf16 ({' or '.join(CPU_BF16_FLAGS)}), "
                             "and this machine has neither; remove it (posttrain picks bf16 by itself where the device computes it natively, "
                             "float32 elsewhere) or set training.use_cpu=true to run it emulated (about 6x slower than float32).")]
    cap = gpu_compute_capability()
    if cap is not None and cap < 8.0:
        return [Problem(key, f"this GPU (compute capability {cap}) has no bf16; Ampere (8.0) or newer does. Remove it, or use "
                             "training.fp16=true on this GPU.")]
    return []


# recipe key -> the adapter_config.json field it would have to match when continuing an adapter
ADAPTER_FIELDS = {"lora_r": "r", "lora_alpha": "lora_alpha", "lora_dropout": "lora_dropout",
                  "lora_target_modules": "target_modules", "lora_modules_to_save": "modules_to_save"}


def adapter_problems(model, folder: Path) -> list[Problem]:
    """A model directory that holds a PEFT adapter: readable, and LoRA keys that agree with it.

    Continuing an adapter trains that adapter (its rank, targets and scaling); a LoRA key that says
    otherwise would be silently ignored, so it is an error.
    """
    import json

    config_path = folder / "adapter_config.json"
    if not config_path.is_file():
        if not (folder / "config.json").is_file():
            return [Problem("model.base_model_name", f"{str(folder)!r} holds neither a model (config.json) nor an adapter "
                                                     "(adapter_config.json).")]
        return model_config_problems(folder / "config.json")
    try:
        config = json.loads(config_path.read_text())
    except ValueError as e:
        return [Problem("model.base_model_name", f"{config_path} is not valid JSON: {e}")]
    if not isinstance(config, dict) or not config.get("base_model_name_or_path"):
        return [Problem("model.base_model_name", f"{config_path} names no base_model_name_or_path; cannot tell which model the adapter belongs to.")]
    base = config["base_model_name_or_path"]
    if isinstance(base, str) and (looks_local(base) or local_looking_model(base)) and not Path(base).expanduser().is_dir():
        return [Problem("model.base_model_name", f"the adapter's base model {base!r} ({config_path}: base_model_name_or_path) "
                                                 "is not a folder on this machine; copy the base model there or edit the path.")]
    out = []
    for key, field in ADAPTER_FIELDS.items():
        if key not in model.model_fields_set:
            continue
        mine, theirs = getattr(model, key), config.get(field)
        same = sorted(mine) == sorted(theirs or []) if isinstance(mine, list) and isinstance(theirs, (list, type(None))) else mine == theirs
        if not same:
            out.append(Problem(f"model.{key}", f"{mine!r} differs from the adapter being continued ({config_path}: {field}={theirs!r}); "
                                               "continuing trains that adapter as it is. Remove the key, or start a new adapter from "
                                               "its base model."))
    return out


def model_config_problems(path: Path) -> list[Problem]:
    """A model folder's config.json, read as transformers reads it: a JSON object naming its model_type."""
    import json

    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return [Problem("model.base_model_name", f"{path} is not valid JSON ({e}); the folder's model cannot be loaded.")]
    if not isinstance(config, dict) or not config.get("model_type"):
        return [Problem("model.base_model_name", f"{path} names no model_type, so transformers cannot tell which model it "
                                                 "is; give a folder saved with save_pretrained.")]
    return []


def vllm_problems() -> list[str]:
    """Why vLLM generation cannot run here (package, GPU), without importing torch or vllm."""
    problems = []
    if importlib.util.find_spec("vllm") is None:
        problems.append("vLLM needs the vllm package, which is not installed: pip install vllm (on a machine with an NVIDIA GPU).")
    if not has_cuda():
        problems.append("vLLM needs a CUDA GPU and none is visible.")
    return problems


# flash_attention_N -> (module transformers imports, pip package, lowest CUDA compute capability), from
# transformers' FLASH_ATTENTION_COMPATIBILITY_MATRIX (modeling_flash_attention_utils.py).
FLASH_ATTENTION = {
    "flash_attention_2": ("flash_attn", "pip install flash-attn --no-build-isolation", 8.0),
    "flash_attention_3": ("flash_attn_interface", "FlashAttention-3 (flash-attn-3, built from the flash-attention "
                          "repository's hopper/ folder)", 8.0),
    "flash_attention_4": ("flash_attn", "pip install flash-attn-4", 9.0),
}


def kernel_problems(recipe) -> list[Problem]:
    """GPU kernels the recipe asks for that this machine cannot run: Liger (training.use_liger_kernel) and
    the attention implementation (model.attn_implementation). transformers would fail only when the
    model loads or the trainer starts, after the data step; these fail in `posttrain validate`."""
    problems = []
    if getattr(recipe.training, "use_liger_kernel", False):
        key = "training.use_liger_kernel"
        if importlib.util.find_spec("liger_kernel") is None:
            problems.append(Problem(key, "needs the liger-kernel package, which is not installed: pip install liger-kernel "
                                         "(or set training.use_liger_kernel=false)."))
        if not has_cuda():
            problems.append(Problem(key, "Liger's kernels are Triton GPU kernels: they need a CUDA GPU and none is visible; "
                                         "set training.use_liger_kernel=false on this machine."))
    attn = recipe.model.attn_implementation
    key = "model.attn_implementation"
    if attn in FLASH_ATTENTION:
        module, install, capability = FLASH_ATTENTION[attn]
        if not has_cuda():
            problems.append(Problem(key, f"{attn} needs a CUDA GPU and none is visible; use sdpa (or remove the key) on this machine."))
        else:
            found = gpu_compute_capability()
            if found is not None and found < capability:
                problems.append(Problem(key, f"{attn} needs a GPU of compute capability {capability} or newer; this one is {found}. "
                                             "Use sdpa (or flash_attention_2 on Ampere and newer)."))
        if importlib.util.find_spec(module) is None:
            problems.append(Problem(key, f"{attn} needs its package, which is not installed: {install} (or use sdpa)."))
    elif attn is not None and "/" in attn and importlib.util.find_spec("kernels") is None:
        problems.append(Problem(key, f"the hub kernel {attn!r} needs the kernels package: pip install kernels (or use sdpa)."))
    return problems


def model_name_problems(name: str) -> list[Problem]:
    from posttrain.models.gguf import spec_problem

    if name.startswith("tiny:") or name == "tiny":
        from posttrain.models.tiny import parse_tiny_spec

        try:
            parse_tiny_spec(name)
        except ValueError as e:
            return [Problem("model.base_model_name", str(e))]
    elif name.lower().endswith(".gguf") or Path(name).expanduser().is_dir():
        problem = spec_problem(name)
        return [Problem("model.base_model_name", problem)] if problem else []
    elif looks_local(name) and not Path(name).expanduser().is_dir():
        return [Problem("model.base_model_name", f"{name!r} looks like a local path but is not a directory; give a model or adapter directory, a .gguf file, or a hub id.")]
    elif local_looking_model(name):
        first = name.split("/")[0]
        why = f"{first}/ is a folder here" if Path(first).expanduser().is_dir() else "a hub id is ORG/NAME, one slash"
        return [Problem("model.base_model_name", f"{name!r} looks like a local path ({why}), but {name} does not exist "
                                                 f"(relative paths are from {os.getcwd()}); give the model's folder, or a hub id ORG/NAME.")]
    return []


def local_looking_model(name: str) -> bool:
    """A name with no folder behind it that is still a path, not a hub id: `runs/nope` when runs/ is a
    folder here, or a name with more than one slash (hub ids have exactly one). Such a name used to be
    sent to the hub: a minute of retries, then "check your internet connection"."""
    if "/" not in name or "://" in name or ":" in name.split("/")[0] or Path(name).expanduser().exists():
        return False
    return name.count("/") > 1 or Path(name.split("/")[0]).expanduser().is_dir()


def data_file_problems(key: str, ds) -> list[Problem]:
    """A dataset entry's local file: present, a known format, a split and subset a file can have."""
    from posttrain.data.splits import local_file_problems

    problems = []
    if looks_local(ds.name) and Path(ds.name).expanduser().is_dir():
        problems.append(Problem(f"{key}.name", f"{ds.name!r} is a directory, not a data file; give a "
                                               f"{'/'.join(DATA_SUFFIXES)} file (e.g. one inside it)."))
    elif looks_local(ds.name) and not Path(ds.name).expanduser().is_file():
        problems.append(Problem(f"{key}.name", f"data file {ds.name!r} does not exist (relative paths are from {os.getcwd()})."))
    elif looks_local(ds.name) and not ds.name.endswith(DATA_SUFFIXES):
        problems.append(Problem(f"{key}.name", f"{ds.name!r}: local data must be one of {', '.join(DATA_SUFFIXES)}."))
    elif local_looking_model(ds.name):  # `data/train`: a typo for a file in data/, not a hub dataset
        problems.append(Problem(f"{key}.name", f"{ds.name!r} does not exist (relative paths are from {os.getcwd()}), and "
                                               f"{ds.name.split('/')[0]}/ is a folder here, so it is not a hub dataset id either; "
                                               f"give a {'/'.join(DATA_SUFFIXES)} file."))
    if looks_local(ds.name) or (ds.name.startswith("s3://") and ds.name.endswith(DATA_SUFFIXES)):
        problems += [Problem(f"{key}.{field}", message) for field, message in local_file_problems(ds)]
    return problems


def preflight_raw(raw: dict) -> list[Problem]:
    """The file checks that do not need a valid recipe, run on the raw mapping when the schema failed,
    so a missing data file is reported together with the schema's problems instead of in a second round."""
    from types import SimpleNamespace

    problems = []
    model = raw.get("model")
    if isinstance(model, dict) and isinstance(model.get("base_model_name"), str) and model["base_model_name"]:
        problems += model_name_problems(model["base_model_name"])
    data = raw.get("data")
    for section in ("datasets", "eval_datasets"):
        entries = data.get(section) if isinstance(data, dict) else None
        for i, entry in enumerate(entries if isinstance(entries, list) else []):
            if not (isinstance(entry, dict) and isinstance(entry.get("name"), str) and entry["name"]):
                continue
            split, subset = entry.get("split", "train"), entry.get("subset")
            if isinstance(split, str) and (subset is None or isinstance(subset, str)):
                problems += data_file_problems(f"data.{section}[{i}]", SimpleNamespace(name=entry["name"], split=split, subset=subset))
    return problems


def reward_model_problem(config: dict, adapter_config: dict | None = None) -> str | None:
    """Why a saved model is not a reward model (a one-output sequence classifier), or None.

    >>> reward_model_problem({"architectures": ["Qwen2ForCausalLM"]})
    'a causal language model (Qwen2ForCausalLM), not a reward model'
    >>> reward_model_problem({"architectures": ["Qwen2ForSequenceClassification"], "id2label": {"0": "LABEL_0"}}) is None
    True
    """
    if adapter_config is not None:
        task = adapter_config.get("task_type")
        return None if task == "SEQ_CLS" else f"a LoRA adapter for task {task!r}, not a reward model's (SEQ_CLS)"
    architectures = config.get("architectures") or []
    if not any(a.endswith("ForSequenceClassification") for a in architectures):
        kind = "a causal language model" if any(a.endswith("ForCausalLM") for a in architectures) else "a model"
        return f"{kind} ({', '.join(architectures) or 'no architectures in config.json'}), not a reward model"
    labels = len(config.get("id2label") or {}) or config.get("num_labels", 2)
    return None if labels == 1 else f"a classifier with {labels} outputs, not a reward model (one score per sequence)"


def reward_folder_problem(folder: Path) -> str | None:
    """`reward_model_problem` of a local model or adapter folder (reads its JSON only; no torch)."""
    adapter = folder / "adapter_config.json"
    config = folder / "config.json"
    try:
        if adapter.is_file():
            return reward_model_problem({}, json.loads(adapter.read_text()))
        if config.is_file():
            return reward_model_problem(json.loads(config.read_text()))
    except ValueError as e:
        return f"unreadable JSON in {folder}: {e}"
    return "a folder that holds neither a model (config.json) nor an adapter (adapter_config.json)"


def reward_model_problems(training) -> list[Problem]:
    """GRPO/RLOO rewards given as `model:`: a local folder must hold a reward model, and a `tiny:` spec never
    does (it builds a causal LM); hub ids are checked when the run loads them."""
    out = []
    for i, spec in enumerate(getattr(training, "rewards", None) or []):
        name = getattr(spec, "model", None)
        if name is None:
            continue
        key = f"training.rewards[{i}].model"
        if name.startswith("tiny:") or name == "tiny":
            problem = "a tiny causal language model, not a reward model"
        elif Path(name).expanduser().is_dir():
            problem = reward_folder_problem(Path(name).expanduser())
        elif looks_local(name) or local_looking_model(name):
            problem = f"a path that does not exist (relative paths are from {os.getcwd()})"
        else:
            continue
        if problem:
            out.append(Problem(key, f"{name!r} is {problem}. Train a reward model with training.algorithm=reward "
                                    "(`posttrain recipes copy reward/tiny-cpu`) and give its output_dir; a function reward goes under `name:`."))
    return out


def teacher_problems(training) -> list[Problem]:
    """A distillation teacher (training.teacher_model_name_or_path) checked as the student's spec is: a tiny: spec that
    parses, a local folder that holds a model or adapter, and not a reward model. Its tokenizer is checked at train."""
    spec = getattr(training, "teacher_model_name_or_path", None)
    key = "training.teacher_model_name_or_path"
    if not spec:
        return []
    problems = [Problem(key, p.message) for p in model_name_problems(spec)]
    folder = Path(spec).expanduser()
    if problems or spec.lower().endswith(".gguf") or not folder.is_dir():
        return problems
    from posttrain.models.gguf import gguf_file

    if gguf_file(spec) is not None:
        return []
    if not (folder / "config.json").is_file() and not (folder / "adapter_config.json").is_file():
        return [Problem(key, f"{spec!r} holds neither a model (config.json) nor an adapter (adapter_config.json); give the "
                             "teacher's model folder, a posttrain run's output_dir, or a hub id.")]
    if reward_folder_problem(folder) is None:
        return [Problem(key, f"{spec!r} is a reward model (a one-output sequence classifier), not a causal language model; a "
                             "teacher must predict the next token. A reward model is a GRPO/RLOO reward: training.rewards[i].model.")]
    return []


def tool_problems(training) -> list[Problem]:
    """GRPO/GSPO tools and environment: imported and checked in a worker process (posttrain.tools.probe),
    so a module that does not import, a tool TRL cannot describe to the model or an environment without
    reset stops `validate` and `train` here, before any model loads. And the chat template file they
    often need (training.chat_template_path: posttrain's own key in GRPO/GSPO/RLOO, TRL's in SFT and reward
    models) must exist."""
    out = []
    template = getattr(training, "chat_template_path", None)
    if template is not None and not Path(template).expanduser().is_file():
        out.append(Problem("training.chat_template_path", f"{template!r} is not a file (relative paths are from {os.getcwd()}); "
                                                          f"give a Jinja template file, e.g. {copy_hint(CHATML_TOOLS)}."))
    if getattr(training, "uses_tools", False):
        from posttrain.tools.probe import probe

        problems, _ = probe(training.tools, training.environment, training.environment_kwargs)
        out += [Problem(key, message) for key, message in problems]
    return out


def reward_problems(training) -> list[Problem]:
    """GRPO/GSPO rewards resolved as train resolves them: an import path that does not import, a
    function that lacks, or options it does not take, stop `validate` and `train` here."""
    from posttrain.rewards.builtin import get_reward

    out = []
    for i, spec in enumerate(getattr(training, "rewards", None) or []):
        if spec.name is None:  # a reward model (`model:`): reward_model_problems
            continue
        try:
            get_reward(spec.name, **spec.options)
        except ValueError as e:
            out.append(Problem(f"training.rewards[{i}]", str(e)))
    return out


def held_out_problems(recipe) -> list[Problem]:
    """The held-out items read as train reads them before the model loads (a generated task, or a local file);
    a hub task is left to train, which downloads it."""
    spec = recipe.held_out
    if spec is None or (spec.data is None and spec.task != "arithmetic") or (spec.data and not looks_local(spec.data)):
        return []
    from posttrain.errors import UserError
    from posttrain.evaluation.tasks import held_out_items

    try:
        held_out_items(spec)
    except UserError as e:
        key = next((k for k in ("held_out.data", "held_out.n", "held_out.prompt_column", "held_out.answer_column") if str(e).startswith(k)), "held_out")
        return [Problem(key, str(e).removeprefix(key + ": ").removeprefix(key + " "))]
    return []


def preflight(recipe: Recipe) -> None:
    problems: list[Problem] = precision_problems(recipe.training)
    model = recipe.model
    name = model.base_model_name
    name_problems = model_name_problems(name)
    problems += name_problems
    if not name_problems and looks_local(name):
        from posttrain.models.gguf import gguf_file

        if gguf_file(name) is None:  # a GGUF file or folder becomes a model folder when it is converted
            problems += adapter_problems(model, Path(name).expanduser())
    if model.load_in_4bit or model.load_in_8bit:
        key = "model.load_in_4bit" if model.load_in_4bit else "model.load_in_8bit"
        if not has_cuda():
            problems.append(Problem(key, "bitsandbytes quantisation (QLoRA) needs a CUDA GPU and none is visible; set it to false (plain LoRA) or run on a GPU machine."))
        elif importlib.util.find_spec("bitsandbytes") is None:
            problems.append(Problem(key, "needs the bitsandbytes package: pip install bitsandbytes"))

    from posttrain.storage.location import S3Location, is_s3_uri

    sources = [("model.base_model_name", name)] + [(f"data.datasets[{i}].name", d.name) for i, d in enumerate(recipe.data.datasets)]
    for key, value in sources:
        if is_s3_uri(value):
            try:
                S3Location.parse(value)
            except ValueError as e:
                problems.append(Problem(key, str(e)))

    for section in ("datasets", "eval_datasets"):
        for i, ds in enumerate(getattr(recipe.data, section)):
            problems += data_file_problems(f"data.{section}[{i}]", ds)

    from posttrain.storage.preflight import s3_problems

    s3_sources = [(k, v) for k, v in sources if is_s3_uri(v)]
    problems += [Problem(k, m) for k, m in s3_problems(recipe.s3, s3_sources)]  # only imports boto3 when S3 is used

    from posttrain.distributed.backends import backend_problems, deepspeed_stage

    training = recipe.training
    problems += [Problem(key, message) for key, message in backend_problems(training, has_cuda())]
    if (model.load_in_4bit or model.load_in_8bit) and training.distributed is None and deepspeed_stage(training) == 3:
        problems.append(Problem("training.deepspeed", "a ZeRO stage 3 config with a quantised base (QLoRA): ZeRO-3 cannot partition "
                                "bitsandbytes' packed 4/8-bit weights here; use stage 2, or drop model.load_in_4bit."))
    problems += kernel_problems(recipe)
    if getattr(training, "use_vllm", False):
        problems += [Problem("training.use_vllm", p + " Or set training.use_vllm=false (generation with transformers).") for p in vllm_problems()]
    out = Path(recipe.training.output_dir).expanduser()
    if out.exists() and not out.is_dir():
        problems.append(Problem("training.output_dir", f"{str(out)!r} exists and is not a directory; choose another output_dir."))

    problems += held_out_problems(recipe)
    problems += tool_problems(training)
    problems += reward_problems(training)
    problems += reward_model_problems(training)
    problems += teacher_problems(training)

    provider = recipe.tracking.provider
    if provider != "none" and importlib.util.find_spec(TRACKING_PACKAGES[provider]) is None:
        problems.append(Problem("tracking.provider", f"{provider!r} needs its package: pip install {TRACKING_PACKAGES[provider]} (or set tracking.provider=none)."))
    if problems:
        raise RecipeError(problems)
