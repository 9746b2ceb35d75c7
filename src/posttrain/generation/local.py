"""Batched generation with transformers on the local machine (CPU, CUDA or MPS).

    engine = TransformersEngine("tiny:qwen2-1m")   # batch_size: 64 on a CPU, 16 on a GPU (default_batch_size)
    completions = engine.generate(["2 + 3 =", [{"role": "user", "content": "Hi"}]], SamplingParams())

What makes batching both fast and exact:
- prompts are sorted by token length, so a batch holds similar lengths and pads little; results
  come back in the caller's order;
- padding is on the left and the attention mask marks it; transformers derives position ids from
  that mask and keeps a KV cache, so under greedy decoding a batched prompt yields the same tokens
  as the prompt alone (checked by `tests/generation/test_local_engine.py`; in float32 — bf16 on a
  GPU may flip near-tied argmaxes);
- decoding uses exactly the `SamplingParams` given (greedy when temperature is 0, else
  temperature + top-p sampling, no top-k). The model's own generation_config contributes only its
  stop tokens: a checkpoint's sampling defaults (Qwen ships top_k=20, repetition_penalty=1.05)
  would otherwise make the same params mean different things on different models and engines.

Vision-language models (anything `AutoModelForImageTextToText` loads, e.g. `tiny:llava-2m`) take
chat prompts with image parts (`{"type": "image", "image": PIL.Image}`): each batch goes through
the model's processor (chat template, image tokens, pixel values) with left padding, and the same
length sorting and stop-token handling apply. A text-only model given an image prompt is an error
naming the model.

A model spec is a hub id, a local model directory, a PEFT adapter directory or `tiny:...`.
Adapters are loaded onto their base and merged for speed. Adapters that carry full embedding /
lm_head matrices with more rows than the base (another tool added tokens and resized the
vocabulary) are detected from the safetensors header, and the base is resized to that row count
before the adapter loads; without this PEFT fails with a size-mismatch error.

torch and transformers are imported inside functions: importing this module is cheap.
"""

from __future__ import annotations

from pathlib import Path

from posttrain.errors import UserError
from posttrain.generation.base import Completion, Prompt, SamplingParams, check_params, has_images
from posttrain.generation.plain_prompts import own_turn, plain_text
from posttrain.models.checkpoint_report import read_header, tensor_group
from posttrain.models.loading import DeviceInfo, adapter_base, resolve_source, source_notes, torch_dtype
from posttrain.models.tokenizer_rules import ensure_pad_token


class TransformersEngine:
    """Generate with a transformers causal LM, batch_size prompts at a time.

    model_spec: hub id, local dir, PEFT adapter dir, .gguf file or `tiny:ARCH-SIZE`.
    batch_size: prompts per batch; None: 64 on a CPU, 16 elsewhere (`default_batch_size`).
    device: "cuda", "mps", "cpu" or None (the best one available).
    dtype: "auto" (bf16 on a bf16-capable GPU, float32 elsewhere) or a torch dtype name.
    use_chat_template: wrap plain-string prompts as one user turn in the tokenizer's chat template
        (when it has one); False sends them raw. Chats use the template; without one (a base model)
        or with False they go as a plain transcript (`plain_prompts`).
    progress: show a bar of answers finished, tokens made and tokens/s (on stderr; `progress.GenerationBar`).
    decoder: "posttrain" (posttrain's decoding loop, `generation.decoding`; the weights pre-packed once
        for the whole call) or "transformers" (`model.generate`). Vision-language models always use
        `generate`.
    """

    def __init__(self, model_spec: str, *, batch_size: int | None = None, device: str | None = None, dtype: str = "auto",
                 use_chat_template: bool = True, progress: bool = True, decoder: str = "posttrain"):
        if batch_size is not None and batch_size < 1:
            raise UserError(f"batch_size must be at least 1, got {batch_size}")
        if decoder not in ("posttrain", "transformers"):
            raise UserError(f"decoder must be 'posttrain' or 'transformers', got {decoder!r}")
        self.name = model_spec
        self.decoder = decoder
        self.use_chat_template = use_chat_template
        self.progress = progress
        loaded = load_for_generation(model_spec, device, dtype)
        self.model, self.tokenizer, self.stop_token_ids, self.notes, self.processor = loaded  # processor: VLMs only
        self.batch_size = batch_size or default_batch_size(self.model.device)

    @classmethod
    def around(cls, model, tokenizer, name: str, *, batch_size: int | None = None, use_chat_template: bool = True):
        """An engine over a model already in memory (a model being trained: `algorithms.held_out`), without
        loading or changing it: its stop tokens are read as `load_for_generation` reads them, and decoding
        uses posttrain's loop, as `posttrain eval` does. The caller puts the model in eval mode."""
        engine = cls.__new__(cls)
        engine.name, engine.decoder, engine.use_chat_template, engine.progress = name, "posttrain", use_chat_template, False
        engine.model, engine.tokenizer, engine.processor, engine.notes = model, tokenizer, None, []
        engine.stop_token_ids = stop_token_ids(model.generation_config, tokenizer)
        engine.batch_size = batch_size or default_batch_size(model.device)
        return engine

    def __repr__(self) -> str:
        return f"TransformersEngine({self.name!r}, batch_size={self.batch_size})"

    def generate(self, prompts: list[Prompt], params: SamplingParams, tools: list[dict] | None = None) -> list[Completion]:
        """One Completion per prompt, in the order given. Sampling is seeded with params.seed
        (without disturbing the caller's RNG), so the same prompts, params and batch size give the
        same samples. With `tools` (JSON schemas) the chat template renders them and each
        completion's tool calls are read back as TRL's GRPO reads them (Completion.tool_calls)."""
        check_params(params)
        if self.processor is not None:
            if tools:
                raise UserError(f"{self.name!r}: tools with a vision-language model are not supported by posttrain yet")
            return self._generate_with_processor(prompts, params)
        with_images = [i for i, p in enumerate(prompts) if has_images(p)]
        if with_images:
            raise UserError(f"prompt(s) {with_images[:10]} have images but {self.name!r} is a text-only model; "
                            "use a vision-language model (one AutoModelForImageTextToText loads)")
        if tools:
            self._check_tools(tools)
        encoded = [encode_prompt(self.tokenizer, p, self.use_chat_template, tools) for p in prompts]
        empty = [i for i, ids in enumerate(encoded) if not ids]
        if empty:
            raise UserError(f"prompt(s) {empty[:10]} are empty after tokenization (no chat template around them); give non-empty text")
        config = self._generation_config(params)
        if self.decoder == "transformers":
            completions = self._in_batches([len(ids) for ids in encoded], params.seed,
                                           lambda batch, bar: self._generate_batch([encoded[i] for i in batch], config, tools=tools))
        else:
            from posttrain.generation.decoding import decode
            from posttrain.generation.inference_weights import inference_linears

            with inference_linears(self.model, rows=min(self.batch_size, len(encoded))):  # packed once for every batch
                completions = self._in_batches([len(ids) for ids in encoded], params.seed, lambda batch, bar: self._generate_batch(
                    [encoded[i] for i in batch], config, lambda **inputs: decode(self.model, **inputs, weights=False, on_step=bar.step),
                    tools))
        if sends_plain(self.tokenizer, self.use_chat_template):
            answered_plain(prompts, completions)
        return completions

    def _check_tools(self, tools: list[dict]) -> None:
        """Once per tool set: the template renders tools and a parser reads calls back (as at training start-up)."""
        import json

        key = json.dumps(tools, sort_keys=True)
        if getattr(self, "_tools_checked", None) == key:
            return
        if not self.use_chat_template:
            raise UserError(f"{self.name!r}: tools need the chat template (it renders them); drop --no-chat-template")
        from posttrain.data.tool_template import check_tool_template

        self.notes += check_tool_template(self.tokenizer, self.name, tools)
        self._tools_checked = key

    def _in_batches(self, sizes: list[int], seed: int, generate_batch) -> list[Completion]:
        """Longest prompts first (less padding per batch), seeded sampling that leaves the caller's RNG
        alone, results in the caller's order. `generate_batch(indices, bar)` -> one Completion per index;
        it may report each decoding step to `bar` (a `GenerationBar`)."""
        import torch

        from posttrain.generation.progress import GenerationBar

        order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
        batches = [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        results: list[Completion | None] = [None] * len(sizes)
        devices = [self.model.device] if self.model.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.inference_mode(), GenerationBar(len(sizes), self.name, self.progress) as bar:
            torch.manual_seed(seed)
            for batch in batches:
                completions = generate_batch(batch, bar)
                bar.batch_done([c.completion_tokens for c in completions])
                for i, completion in zip(batch, completions):
                    results[i] = completion
        return results

    def _generate_with_processor(self, prompts: list[Prompt], params: SamplingParams) -> list[Completion]:
        """Vision-language models: render each chat, batch images and text through the processor
        (left padding), longest prompts first, results in the caller's order."""
        chats = [[{"role": "user", "content": p}] if isinstance(p, str) else p for p in prompts]
        texts = [self.processor.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
        images = [[part["image"] for m in c if isinstance(m.get("content"), list) for part in m["content"]
                   if isinstance(part, dict) and part.get("type") == "image"] for c in chats]
        sizes = [len(self.tokenizer(t, add_special_tokens=False)["input_ids"]) + 1000 * len(im) for t, im in zip(texts, images)]
        config = self._generation_config(params)

        def generate_batch(batch: list[int], bar) -> list[Completion]:
            batch_images = [images[i] for i in batch]
            inputs = self.processor(text=[texts[i] for i in batch], images=batch_images if any(batch_images) else None,
                                    padding=True, padding_side="left", add_special_tokens=False, return_tensors="pt")
            inputs = inputs.to(self.model.device)
            if "pixel_values" in inputs:
                inputs["pixel_values"] = inputs["pixel_values"].to(self.model.dtype)
            out = self.model.generate(**inputs, generation_config=config)
            width = inputs["input_ids"].shape[1]
            return [self._completion(row[width:].tolist(), int(mask.sum())) for row, mask in zip(out, inputs["attention_mask"])]

        return self._in_batches(sizes, params.seed, generate_batch)

    def _generation_config(self, params: SamplingParams):
        from transformers import GenerationConfig

        sampling = dict(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
        return GenerationConfig(
            max_new_tokens=params.max_new_tokens,
            eos_token_id=self.stop_token_ids,
            pad_token_id=self.tokenizer.pad_token_id,
            **(sampling if params.temperature > 0 else dict(do_sample=False)),
        )

    def _generate_batch(self, batch_ids: list[list[int]], config, generate=None, tools: list[dict] | None = None) -> list[Completion]:
        import torch

        width = max(len(ids) for ids in batch_ids)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in batch_ids], device=self.model.device)
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in batch_ids], device=self.model.device)
        out = (generate or self.model.generate)(input_ids=input_ids, attention_mask=mask, generation_config=config)
        return [self._completion(row[width:].tolist(), len(ids), tools, ids) for row, ids in zip(out, batch_ids)]

    def _completion(self, new_ids: list[int], prompt_tokens: int, tools: list[dict] | None = None,
                    prompt_ids: list[int] | None = None) -> Completion:
        """Cut at the first stop token (a finished row is padded to the batch's length after it).
        The stop token counts as generated, as providers count it, but is not part of the text.
        With tools, the turn is parsed by TRL's `parse_response` (what GRPO trains with): the calls
        go to `tool_calls`, the text around them stays the text."""
        stop = next((k for k, t in enumerate(new_ids) if t in self.stop_token_ids), None)
        kept = new_ids if stop is None else new_ids[:stop]
        completion = Completion(
            text=self.tokenizer.decode(kept, skip_special_tokens=True),
            prompt_tokens=prompt_tokens,
            completion_tokens=len(new_ids) if stop is None else stop + 1,
            finish_reason="length" if stop is None else "stop",
        )
        if tools:
            from trl.chat_template_utils import parse_response

            parsed = parse_response(self.tokenizer, new_ids if stop is None else new_ids[: stop + 1], prefix=prompt_ids, tools=tools)
            calls = parsed.get("tool_calls") or None
            if calls:
                completion.text = parsed.get("content") or ""
                completion.tool_calls = [{"id": f"call_{k}", "type": "function", "function": dict(call.get("function", call))}
                                         for k, call in enumerate(calls)]
        return completion


def answered_plain(prompts: list[Prompt], completions: list[Completion]) -> None:
    """Chats sent as plain text: each completion cut where the model began the user's next turn, and
    marked (`extra["prompt_form"]`: reports say which prompt form an arm was asked in)."""
    for prompt, completion in zip(prompts, completions):
        if isinstance(prompt, list):
            completion.text, cut = own_turn(completion.text)
            completion.finish_reason = "stop" if cut else completion.finish_reason
            completion.extra["prompt_form"] = "plain"


def default_batch_size(device) -> int:
    """Prompts per batch when none is given: 64 on a CPU, 16 elsewhere. A CPU decode step reads every
    weight once whatever the batch, so more rows per step is nearly free there: SmolLM2, 64 greedy
    prompts of 40 new tokens, one thread, batch 64 gave 1.6x batch 16's tokens/s (the same outputs:
    batching never changes them, tests/generation/test_local_engine.py). On a GPU the KV cache of a
    large model at batch 64 can exhaust memory, so 16 stays there; --batch-size sets it anywhere."""
    return 64 if device.type == "cpu" else 16


def sends_plain(tokenizer, use_chat_template: bool) -> bool:
    """Whether prompts go without the chat template: the tokenizer has none (a base model), or the
    caller said so (--no-chat-template)."""
    return not (use_chat_template and getattr(tokenizer, "chat_template", None))


def encode_prompt(tokenizer, prompt: Prompt, use_chat_template: bool, tools: list[dict] | None = None) -> list[int]:
    """Token ids for one prompt. Chats are rendered with the chat template and the generation
    prompt (and the tools offered, if any); the rendered text already holds any bos the template
    wants, so no special tokens are added again. Without a template (`sends_plain`), raw strings are
    sent as they are and chats as a plain transcript (`plain_prompts.plain_text`), with the
    tokenizer's usual special tokens (e.g. Llama's bos)."""
    if sends_plain(tokenizer, use_chat_template):
        return tokenizer(prompt if isinstance(prompt, str) else plain_text(prompt), add_special_tokens=True)["input_ids"]
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    text = tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def load_for_generation(model_spec: str, device: str | None, dtype: str):
    """(model in eval mode, tokenizer with a pad token, stop token ids, notes for the log, processor
    of a vision-language model or None)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer, GenerationConfig

    if device is None:
        info = DeviceInfo.detect()
        device = info.kind
    else:
        kind = device.split(":")[0]
        info = DeviceInfo(kind, kind == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    from posttrain.log import quiet_libraries

    quiet_libraries()  # transformers is imported now: its weight-loading bar and warnings too
    source = resolve_source(model_spec)
    folder = Path(source)
    if folder.is_dir() and not any((folder / name).is_file() for name in ("config.json", "adapter_config.json")):
        raise UserError(f"model {model_spec!r}: the folder holds neither a model (config.json) nor an adapter "
                        "(adapter_config.json); give a model folder, a training run's output_dir (once it has finished) "
                        "or one of its checkpoint-N folders.")
    adapter_dir = None
    base = adapter_base(source) if folder.is_dir() else None
    if base is not None:
        adapter_dir, source = source, resolve_source(base)
    tokenizer_dir = adapter_dir if adapter_dir and (Path(adapter_dir) / "tokenizer_config.json").is_file() else source
    from posttrain.models.vision import is_vision_language

    try:
        if is_vision_language(source, _ModelOptions(), key=None):
            processor = AutoProcessor.from_pretrained(tokenizer_dir)
            tokenizer = processor.tokenizer
            model = AutoModelForImageTextToText.from_pretrained(source, dtype=torch_dtype(dtype, info))
        else:
            processor = None
            tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
            model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype(dtype, info))
    except (OSError, ValueError, KeyError, UserError) as e:  # missing files, unreadable config, unknown model type
        raise UserError(f"cannot load model {model_spec!r} (from {source!r}): {e}") from None
    notes = [*source_notes(source), f"model: {source} ({model.dtype}, {info.kind})", ensure_pad_token(tokenizer)]
    if adapter_dir is not None:
        model, note = attach_adapter(model, adapter_dir)
        notes.append(note)
    stop_ids = stop_token_ids(model.generation_config, tokenizer)
    # Only the stop tokens survive from the checkpoint's generation config: see the module docstring.
    model.generation_config = GenerationConfig(
        bos_token_id=model.generation_config.bos_token_id, eos_token_id=stop_ids, pad_token_id=tokenizer.pad_token_id
    )
    return model.to(device).eval(), tokenizer, stop_ids, notes, processor


class _ModelOptions:
    """What `is_vision_language` reads from a recipe's model section, for a bare model spec."""

    base_model_name = ""
    trust_remote_code = False
    revision = None


def stop_token_ids(generation_config, tokenizer) -> list[int]:
    """The tokenizer's eos plus every eos of the model's generation config (e.g. <|im_end|>)."""
    ids = generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    if not ids:
        raise UserError(f"{tokenizer.name_or_path!r}: neither the tokenizer nor the generation config names an eos token, so generation could never stop early")
    return ids


def adapter_vocab_rows(adapter_dir: str) -> int | None:
    """Rows of the full embedding / lm_head matrices an adapter carries, or None if it has none.

    Read from the safetensors header only. LoRA A/B factors are not counted: their shapes follow
    the base matrix and the rank, they never set the vocabulary size on their own.
    """
    rows = set()
    for file in sorted(Path(adapter_dir).glob("*.safetensors")):
        for name, info in read_header(file).items():
            if tensor_group(name) in ("embeddings", "lm_head"):
                rows.add(info["shape"][0])
    if len(rows) > 1:
        raise UserError(f"adapter {adapter_dir}: its embedding and lm_head matrices disagree on the vocabulary size ({sorted(rows)} rows); the adapter is inconsistent, re-save it")
    return rows.pop() if rows else None


def attach_adapter(model, adapter_dir: str):
    """Load a PEFT adapter onto `model` (resizing the vocabulary first if the adapter needs it),
    merge it for faster generation; return (model, note for the log)."""
    from peft import PeftModel

    base_rows = model.get_input_embeddings().weight.shape[0]
    rows = adapter_vocab_rows(adapter_dir)
    note = f"adapter: {adapter_dir} (merged)"
    if rows is not None and rows != base_rows:
        if rows < base_rows:
            raise UserError(
                f"adapter {adapter_dir} carries embeddings with {rows} rows but its base {model.name_or_path!r} has "
                f"{base_rows}: the adapter was trained on a different base model; check base_model_name_or_path in "
                f"{Path(adapter_dir) / 'adapter_config.json'}"
            )
        # The adapter's own matrices overwrite every row, so the new rows need no careful init.
        model.resize_token_embeddings(rows, mean_resizing=False)
        note += f"; base vocabulary resized from {base_rows} to {rows} rows to match the adapter's embeddings"
    try:
        model = PeftModel.from_pretrained(model, adapter_dir)
    except (RuntimeError, ValueError) as e:
        raise UserError(f"cannot load adapter {adapter_dir} onto {model.name_or_path!r}: {e}") from None
    return model.merge_and_unload(), note
