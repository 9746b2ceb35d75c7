"""Generation with vLLM: continuous batching and paged attention on a CUDA GPU.

Used only when `vllm` is installed and a CUDA GPU is visible; otherwise constructing the engine
raises a UserError that says which of the two is missing, so `posttrain generate --model vllm:...`
fails before anything loads. Prompts are rendered to token ids exactly as the transformers engine
does (`local.encode_prompt`: same chat template, same generation prompt, same rule for plain
strings), so both engines see identical inputs. A PEFT adapter directory is served as a LoRA on
its base model; adapters that carry full embedding matrices need the transformers engine (vLLM
LoRA cannot load a resized vocabulary), or merge them first.
"""

from __future__ import annotations

from pathlib import Path

from posttrain.errors import UserError
from posttrain.generation.base import Completion, Prompt, SamplingParams, check_params
from posttrain.generation.local import adapter_vocab_rows, answered_plain, encode_prompt, sends_plain
from posttrain.models.loading import adapter_base, resolve_source


def vllm_unavailable_reason() -> str | None:
    """Why vLLM cannot run here (not installed / no CUDA GPU), or None when it can."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (pip install vllm, on a machine with an NVIDIA GPU)"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU is visible (torch.cuda.is_available() is False); vLLM needs one"
    return None


class VLLMEngine:
    """Generate with vLLM. model_spec: hub id, local dir, PEFT adapter dir or `tiny:...`.

    dtype: "auto" or a dtype name vLLM accepts; gpu_memory_utilization: the share of GPU memory
    vLLM may reserve (0-1); use_chat_template: as for TransformersEngine.
    """

    def __init__(self, model_spec: str, *, dtype: str = "auto", use_chat_template: bool = True,
                 gpu_memory_utilization: float = 0.9, max_model_len: int | None = None):
        reason = vllm_unavailable_reason()
        if reason is not None:
            raise UserError(f"cannot use the vLLM engine for {model_spec!r}: {reason}. Use the transformers engine instead (drop the 'vllm:' prefix).")
        from vllm import LLM

        self.name = f"vllm:{model_spec}"
        self.use_chat_template = use_chat_template
        source = resolve_source(model_spec)
        base = adapter_base(source) if Path(source).is_dir() else None
        self.lora = None
        if base is not None:
            if adapter_vocab_rows(source) is not None:
                raise UserError(f"adapter {source} carries full embedding/lm_head matrices, which vLLM LoRA cannot load; use the transformers engine (drop 'vllm:') or merge the adapter into its base first")
            from vllm.lora.request import LoRARequest

            self.lora = LoRARequest("adapter", 1, source)
            source = resolve_source(base)
        kwargs = dict(model=source, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization, enable_lora=self.lora is not None)
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        self.llm = LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()

    def __repr__(self) -> str:
        return f"VLLMEngine({self.name.partition(':')[2]!r})"

    def generate(self, prompts: list[Prompt], params: SamplingParams, tools: list[dict] | None = None) -> list[Completion]:
        from vllm import SamplingParams as VSamplingParams

        check_params(params)
        if tools:
            raise UserError(f"{self.name}: tools with the vLLM engine are not supported by posttrain yet; evaluate with the "
                            "transformers engine (the model's folder without vllm:), or serve it (posttrain vllm-serve) and use "
                            "openai:MODEL --base-url")
        encoded = [{"prompt_token_ids": encode_prompt(self.tokenizer, p, self.use_chat_template)} for p in prompts]
        sampling = VSamplingParams(
            max_tokens=params.max_new_tokens,
            temperature=params.temperature,
            top_p=params.top_p if params.temperature > 0 else 1.0,
            seed=params.seed,
        )
        outputs = self.llm.generate(encoded, sampling, lora_request=self.lora)
        completions = [
            Completion(
                text=out.outputs[0].text,
                prompt_tokens=len(out.prompt_token_ids),
                completion_tokens=len(out.outputs[0].token_ids),
                finish_reason=out.outputs[0].finish_reason,
            )
            for out in outputs
        ]
        if sends_plain(self.tokenizer, self.use_chat_template):
            answered_plain(prompts, completions)
        return completions
