"""Tiny, randomly initialised causal LMs built locally in seconds.

Tests and smoke-run recipes need a real model (real tokenizer, chat template, generation config,
safetensors checkpoint) without network access or a model hub. `build_tiny_model` makes one from
scratch; `resolve_tiny` turns a recipe's ``tiny:`` model source into a cached directory.

Importing this module is cheap: torch, transformers and tokenizers are imported inside the
functions that need them, so recipe validation can call `parse_tiny_spec` without loading torch.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path

# Bump whenever the output of `build_tiny_model` changes (corpus, tokenizer, template, sizes), so
# caches built by an older version are not reused: the version is part of the cache directory name.
BUILDER_VERSION = 1

ARCHS = ("qwen2", "llama")
# Vision-language archs, built by `posttrain.models.tiny_vlm` on the same tokenizer and text sizes.
VLM_ARCHS = ("llava",)
DEFAULT_ARCH = "qwen2"
DEFAULT_SIZE = "1m"

from .tiny_parts import (  # noqa: F401  (re-exported: callers import them from here)
    CHAT_TEMPLATE, EOS_TOKEN, IM_END, IM_START, MAX_POSITIONS, PAD_TOKEN, RESPONSE_TEMPLATE, SIZES, SPECIAL_TOKENS, TAG_TOKENS,
    VOCAB_SIZE, build_tokenizer,
)


VALID_SPECS = ["tiny:"] + [f"tiny:{a}" for a in ARCHS + VLM_ARCHS] + [f"tiny:{a}-{s}" for a in ARCHS + VLM_ARCHS for s in SIZES]
_SPEC_RE = re.compile(r"tiny:(?:(?P<arch>[a-z0-9]+)(?:-(?P<size>[a-z0-9]+))?)?")


def parse_tiny_spec(spec: str) -> tuple[str, str]:
    """Split a ``tiny:[arch[-size]]`` model source into ``(arch, size)``; pure, no heavy imports.

    Raises ValueError listing the valid forms, so a recipe typo fails at validation time.
    """
    m = _SPEC_RE.fullmatch(spec.strip()) if isinstance(spec, str) else None
    arch = (m and m["arch"]) or DEFAULT_ARCH
    size = (m and m["size"]) or DEFAULT_SIZE
    if m is None or arch not in ARCHS + VLM_ARCHS or size not in SIZES:
        raise ValueError(f"invalid tiny model spec {spec!r}; valid forms: {', '.join(VALID_SPECS)}")
    return arch, size


def dir_name(arch: str, size: str) -> str:
    """The cache folder of a tiny model: its arch, size and builder version."""
    if arch in VLM_ARCHS:
        from .tiny_vlm import VLM_BUILDER_VERSION

        return f"{arch}-{size}-v{BUILDER_VERSION}.{VLM_BUILDER_VERSION}"
    return f"{arch}-{size}-v{BUILDER_VERSION}"


def cache_root() -> Path:
    """``$POSTTRAIN_CACHE`` (default ``~/.cache/posttrain``)."""
    return Path(os.environ.get("POSTTRAIN_CACHE") or "~/.cache/posttrain").expanduser()


def resolve_tiny(spec: str) -> Path:
    """Return the directory of the tiny model named by ``spec``, building it on first use.

    Layout: ``<cache_root>/tiny/<arch>-<size>-v<BUILDER_VERSION>/``. The build goes to a temporary
    sibling directory that is renamed into place only when complete: a crashed build is never
    mistaken for a finished one. Processes of one machine (the test suite's parallel workers, two
    runs started at once) take turns on a flock (``.<name>.lock`` beside the model): the first
    builds, the others wait and find it built. Where a lock does not hold (a file system without
    flock shared by several machines), the first rename wins and the others discard their
    (identical, seed 0) copy. A killed build may leave a hidden ``.*.tmp`` sibling behind; it is
    never read and is safe to delete.
    """
    arch, size = parse_tiny_spec(spec)
    final = cache_root() / "tiny" / dir_name(arch, size)
    if (final / "config.json").is_file():
        return final
    if os.environ.get("LOCAL_RANK", "0") != "0":
        # Under torchrun/accelerate, transformers saves weights on the main rank only, so a build here
        # would hold just the tokenizer: wait for local rank 0's build instead.
        return _wait_for(final)
    from posttrain.locks import exclusive

    with exclusive(final.parent / f".{final.name}.lock"):
        if (final / "config.json").is_file():  # built by the process we waited for
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
        try:
            build_tiny_model(tmp, arch=arch, size=size, seed=0)
            try:
                os.rename(tmp, final)
            except OSError:
                if not (final / "config.json").is_file():  # not a lost race: a real error
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _wait_for(final: Path, timeout: float = 600.0) -> Path:
    deadline = time.monotonic() + timeout
    while not (final / "config.json").is_file():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for local rank 0 to build {final}")
        time.sleep(0.2)
    return final


def build_tiny_model(out_dir, arch: str = DEFAULT_ARCH, size: str = DEFAULT_SIZE, seed: int = 0) -> Path:
    """Build a randomly initialised causal LM plus tokenizer and save both to ``out_dir``.

    The result loads with ``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained(out_dir)``.
    Same ``seed`` gives byte-identical weights and tokenizer. Embeddings are untied so ``lm_head``
    and ``embed_tokens`` are separate parameter groups. Generation stops at either <|im_end|>
    (end of a chat turn) or <|endoftext|> (the tokenizer's eos).
    """
    if arch in VLM_ARCHS and size in SIZES:
        from .tiny_vlm import build_tiny_vlm

        return build_tiny_vlm(out_dir, arch=arch, size=size, seed=seed)
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig, LlamaConfig, Qwen2Config

    if arch not in ARCHS or size not in SIZES:
        raise ValueError(f"arch must be one of {ARCHS}, size one of {tuple(SIZES)}; got {arch!r}, {size!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(seed)
    eos, pad, im_end = (tokenizer.convert_tokens_to_ids(t) for t in (EOS_TOKEN, PAD_TOKEN, IM_END))
    config = (Qwen2Config if arch == "qwen2" else LlamaConfig)(
        vocab_size=len(tokenizer),
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=False,
        bos_token_id=eos,  # as in Qwen2: no bos is prepended; "<|endoftext|>" doubles as bos
        eos_token_id=eos,
        pad_token_id=pad,
        **SIZES[size],
    )
    # fork_rng: seed the init without disturbing the caller's global RNG state.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(
        bos_token_id=eos, eos_token_id=[im_end, eos], pad_token_id=pad, do_sample=False
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
