"""The recipe's `model` section: what to train, how to load it, LoRA/QLoRA."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictBool, StrictInt, model_validator

from .section import Section, raise_all


class ModelSection(Section):
    base_model_name: str = Field(
        min_length=1,
        description="What to train: a hub id ('Qwen/Qwen2.5-0.5B-Instruct'), a local model directory, a PEFT "
        "adapter directory (its base is loaded and the adapter keeps training), a GGUF file ('models/x.Q4_K_M.gguf', "
        "or a folder holding one; dequantized to float32 once per machine, needs the gguf package), or 'tiny:[arch][-size]' for a "
        "small random model built locally in seconds (e.g. 'tiny:', 'tiny:llama-2m'; offline tests and demos)."
    )
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit) of the model.")
    tokenizer_name: str | None = Field(None, description="Load the tokenizer from here instead of base_model_name.")
    trust_remote_code: StrictBool = Field(False, description="Allow model code from the hub to run. Off by default: it executes downloaded code.")
    torch_dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights' dtype. 'auto': bfloat16 on CUDA devices that support it, float32 on CPU and MPS."
    )
    attn_implementation: str | None = Field(
        None,
        description="Attention kernel: 'eager', 'sdpa' (when unset: PyTorch's fused attention, on every device; "
        "on a CPU posttrain's own then keeps the rows of flattened (padding-free) batches apart, which SFT and GRPO use "
        "there, and training in bf16 takes the model's eager attention for rows of <= 384 tokens; naming one here "
        "turns both off), "
        "'flex_attention', 'flash_attention_2' / '_3' / '_4' (CUDA only, each needs its package: "
        "flash-attn, flash-attn-3, flash-attn-4), 'paged|eager', or a hub kernel 'org/repo' (needs the kernels package). "
        "Checked against the machine by `posttrain validate`.",
    )
    use_lora: StrictBool = Field(False, description="Train a LoRA adapter instead of all weights; checkpoints then hold only the adapter.")
    lora_r: StrictInt = Field(16, ge=1, description="LoRA rank.")
    lora_alpha: StrictInt = Field(32, ge=1, description="LoRA scaling numerator (scale = alpha / r).")
    lora_dropout: float = Field(0.05, ge=0.0, lt=1.0, description="Dropout on the LoRA input (TRL's default). On a CPU "
                                "its random masks cost time: a SmolLM2 LoRA step was 1.3x faster or more with 0 "
                                "(`posttrain docs cpu-training-passes`).")
    lora_target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear", description="Modules that get adapters: 'all-linear' or a list of names such as [q_proj, v_proj]."
    )
    lora_modules_to_save: list[str] = Field(
        default_factory=list,
        description="Modules trained and saved in full beside the adapter (e.g. [embed_tokens, lm_head]). Empty by "
        "default so an adapter holds only LoRA weights; each entry can add hundreds of MB per checkpoint.",
    )
    load_in_4bit: StrictBool = Field(False, description="QLoRA: load the frozen base in 4 bits (bitsandbytes, CUDA only). Needs use_lora.")
    load_in_8bit: StrictBool = Field(False, description="Load the frozen base in 8 bits (bitsandbytes, CUDA only). Needs use_lora.")
    bnb_4bit_quant_type: Literal["nf4", "fp4"] = Field("nf4", description="4-bit data type; nf4 is QLoRA's.")
    bnb_4bit_use_double_quant: StrictBool = Field(True, description="Quantise the quantisation constants too (QLoRA paper).")
    freeze_vision_tower: StrictBool = Field(
        True,
        description="Vision-language runs (sft_vlm, or GRPO on image prompts): keep the vision tower's weights fixed and "
        "train the projector and language model. On by default: the tower is pre-trained on far more images than a "
        "fine-tuning set, and freezing it halves the memory it needs. With use_lora only the language model gets "
        "adapters, so the tower is always frozen.",
    )

    @model_validator(mode="after")
    def _quantisation_needs_lora(self):
        problems = []
        attn = self.attn_implementation
        if attn is not None and attn not in ATTN_IMPLEMENTATIONS and not HUB_KERNEL.fullmatch(attn):
            import difflib

            close = difflib.get_close_matches(attn, ATTN_IMPLEMENTATIONS, n=1)
            problems.append(("model.attn_implementation", f"{attn!r} is not an attention implementation transformers knows."
                             + (f" Did you mean {close[0]!r}?" if close else "") + f" Choose one of {', '.join(ATTN_IMPLEMENTATIONS)}, "
                             "a hub kernel 'org/repo', or remove the key (sdpa)."))
        if self.load_in_4bit and self.load_in_8bit:
            problems.append(("model.load_in_8bit", "load_in_4bit and load_in_8bit are both true; choose one (4-bit is QLoRA)."))
        if (self.load_in_4bit or self.load_in_8bit) and not self.use_lora:
            problems.append(("model.use_lora", "a quantised base cannot be trained in full: set model.use_lora=true (QLoRA) or turn quantisation off."))
        dead = [k for k in LORA_KEYS if k in self.model_fields_set]
        if dead and not self.use_lora:
            problems.append((f"model.{dead[0]}", f"{', '.join('model.' + k for k in dead)} only apply with model.use_lora=true, which "
                             "is false, so they would do nothing; set use_lora=true or remove them."))
        raise_all(problems)
        return self


LORA_KEYS = ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_modules_to_save")
# transformers 5's names (modeling_utils: "eager" + ALL_ATTENTION_FUNCTIONS.valid_keys()); a hub kernel
# is 'org/repo' with an optional ':function' or '@revision' (transformers' kernels pattern).
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flex_attention", "flash_attention_2", "flash_attention_3", "flash_attention_4", "paged|eager")
HUB_KERNEL = __import__("re").compile(r"[\w.-]+/[\w.-]+(@[\w.-]+)?(:[\w.]+)?")
