"""Load the model and tokenizer a recipe names: hub id, local directory, PEFT adapter directory,
GGUF file, `s3://` folder or `tiny:` spec, on the right device with a dtype that suits it,
following the tokenizer rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from posttrain.errors import UserError

from .sources import adapter_base, resolve_source, source_notes  # noqa: F401  (re-exported for callers)
from .tokenizer_rules import ensure_pad_token, fit_embeddings


# x86 CPU instructions that compute bf16 matmuls natively (oneDNN uses them through torch's CPU autocast).
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_bf16_flag(cpuinfo: str | None = None) -> str | None:
    """The native-bf16 instruction this CPU has (Linux /proc/cpuinfo flags), or None.

    Without one, bf16 on a CPU is emulated and ~6x slower than float32 (NOTES.md); with one it is
    1.5-1.7x faster on tiny:qwen2-6m (docs/guides/models.md).
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
    line = next((line for line in cpuinfo.splitlines() if line.startswith("flags")), "")
    flags = set(line.partition(":")[2].split())
    return next((f for f in CPU_BF16_FLAGS if f in flags), None)


@dataclass
class DeviceInfo:
    kind: str  # "cuda", "mps" or "cpu"
    bf16: bool  # the device computes bf16 natively

    @classmethod
    def detect(cls) -> "DeviceInfo":
        import torch

        if torch.cuda.is_available():
            return cls("cuda", torch.cuda.is_bf16_supported())
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return cls("mps", False)
        return cls("cpu", cpu_bf16_flag() is not None)


@dataclass
class LoadedModel:
    model: object
    tokenizer: object
    source: str  # resolved local path or hub id of the base model
    adapter_dir: str | None = None  # the adapter that was loaded to continue training
    notes: list[str] = field(default_factory=list)  # what the loader decided, for the start-up log
    processor: object = None  # vision-language models: the processor (images + text); its tokenizer is `tokenizer`

    @property
    def processing_class(self):
        """What TRL trainers take: the processor of a VLM, else the tokenizer."""
        return self.processor if self.processor is not None else self.tokenizer


def torch_dtype(name: str, device: DeviceInfo):
    import torch

    if name == "auto":
        return torch.bfloat16 if device.kind == "cuda" and device.bf16 else torch.float32
    return getattr(torch, name)


def load_model(model_cfg, device: DeviceInfo, *, trainable_adapter: bool = True, vision: bool = False,
               reward_head: bool = False, key: str = "model.base_model_name") -> LoadedModel:
    """Load model + tokenizer for `model_cfg` (the recipe's model section).

    With `vision`, the model is a vision-language model (AutoModelForImageTextToText) and its
    processor is loaded too; a text-only model is then an error naming it. With `reward_head`, it
    is a reward model: AutoModelForSequenceClassification with one output, the causal LM's body with
    a new score head (or a trained reward model's own). `key` names the spec in errors (a distillation
    teacher is loaded by the same code: training.teacher_model_name_or_path).
    """
    from transformers import (AutoModelForCausalLM, AutoModelForImageTextToText, AutoModelForSequenceClassification, AutoProcessor,
                              AutoTokenizer)

    if vision:
        from .vision import require_vision_language

        require_vision_language(model_cfg, "the data has image or video columns")

    source = resolve_source(model_cfg.base_model_name)
    adapter_dir = None
    base = adapter_base(source) if Path(source).is_dir() else None
    if base is not None:
        if reward_head:
            raise UserError(f"{key}: {model_cfg.base_model_name!r} is a LoRA adapter; a reward model starts from a "
                            "whole model (its body gets a new score head). Give the adapter's base, or a model with the adapter merged.")
        adapter_dir, source = source, resolve_source(base)
    dtype = torch_dtype(model_cfg.torch_dtype, device)
    kwargs: dict = {"dtype": dtype, "trust_remote_code": model_cfg.trust_remote_code}
    if model_cfg.revision:
        kwargs["revision"] = model_cfg.revision
    if model_cfg.attn_implementation:
        kwargs["attn_implementation"] = model_cfg.attn_implementation
    if model_cfg.load_in_4bit or model_cfg.load_in_8bit:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=model_cfg.load_in_4bit,
            load_in_8bit=model_cfg.load_in_8bit,
            bnb_4bit_quant_type=model_cfg.bnb_4bit_quant_type,
            bnb_4bit_use_double_quant=model_cfg.bnb_4bit_use_double_quant,
            bnb_4bit_compute_dtype=dtype,
        )
    # An adapter saved by a trainer carries its tokenizer (maybe with a changed template); one saved
    # by bare PEFT does not, and then the base's is the right one.
    has_own_tokenizer = adapter_dir is not None and (Path(adapter_dir) / "tokenizer_config.json").is_file()
    tok_source = model_cfg.tokenizer_name or (adapter_dir if has_own_tokenizer else source)
    processor = None
    # The pinned revision is the model repository's: it applies to a tokenizer or processor read from there too.
    tok_kwargs = {"trust_remote_code": model_cfg.trust_remote_code}
    if model_cfg.revision and tok_source == source:
        tok_kwargs["revision"] = model_cfg.revision
    try:
        if vision:
            processor = AutoProcessor.from_pretrained(tok_source, **tok_kwargs)
            tokenizer = processor.tokenizer
        else:
            tokenizer = AutoTokenizer.from_pretrained(tok_source, **tok_kwargs)
        if reward_head:
            model = AutoModelForSequenceClassification.from_pretrained(source, num_labels=1, **kwargs)
        else:
            model = (AutoModelForImageTextToText if vision else AutoModelForCausalLM).from_pretrained(source, **kwargs)
    except (OSError, ValueError, KeyError) as e:  # missing files, unreadable config.json, unknown model type
        raise UserError(f"{key}: cannot load {model_cfg.base_model_name!r}: {e}") from None

    head = f", {type(model).__name__}: one score per sequence" if reward_head else ""
    notes = [*source_notes(source), f"model: {source} ({dtype}, {device.kind}{head})", ensure_pad_token(tokenizer), fit_embeddings(model, tokenizer)]
    if getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter_dir, is_trainable=trainable_adapter)
        notes.append(f"adapter: continuing {adapter_dir}")
    return LoadedModel(model, tokenizer, source, adapter_dir, notes, processor)


def lora_config(model_cfg):
    """The PEFT LoraConfig for a recipe with use_lora, or None."""
    if not model_cfg.use_lora:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=model_cfg.lora_r,
        lora_alpha=model_cfg.lora_alpha,
        lora_dropout=model_cfg.lora_dropout,
        target_modules=model_cfg.lora_target_modules,
        modules_to_save=model_cfg.lora_modules_to_save or None,
        task_type="CAUSAL_LM",
    )
