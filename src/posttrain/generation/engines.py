"""Turn a model spec into an engine: `make_engine("openai:gpt-4o-mini")`, `make_engine("tiny:qwen2-1m")`.

The rule for a spec:
- `openai:MODEL`, `anthropic:MODEL`, `gemini:MODEL`, `vertex:MODEL`: the HTTP API engine of that provider;
- `vllm:MODEL_OR_PATH`: the vLLM engine (GPU + vllm installed, else a clear error);
- anything else is the local transformers engine: a hub id, a model or adapter directory, `tiny:...`,
  or `s3://bucket/path` (a model or adapter folder, downloaded once per machine into the cache that
  training uses, posttrain.storage.cache; the endpoint comes from the usual AWS variables, e.g.
  AWS_ENDPOINT_URL_S3 for an S3-compatible server).

A spec is read as `PREFIX:REST` when the text before its first ':' has no '/' or '\\' in it. Hub ids
cannot contain ':', so such a prefix is either a known provider, `tiny`, `s3`, or an existing local path;
anything else is rejected as an unknown provider (a typo such as `opneai:gpt-4o` should not turn
into a confusing hub download). A local directory whose name holds ':' works as it is when it
exists, or written with a folder in front (`./my:model`).

Options are the engine's keyword arguments; None means "the engine's default", so a CLI can pass
every flag through. An option the chosen engine does not take is an error naming the options it
does take. Importing this module is cheap: each engine module loads only when chosen.
"""

from __future__ import annotations

import inspect
from pathlib import Path

from posttrain.errors import UserError
from posttrain.generation.base import Engine

API_PROVIDERS = ("openai", "anthropic", "gemini", "vertex")
LOCAL_PREFIXES = ("tiny",)


def engine_kind(spec: str) -> str:
    """"api", "vllm" or "local" for a model spec, following the rule in the module docstring."""
    if not spec or not spec.strip():
        raise UserError("empty model spec; give a hub id, a local dir, tiny:..., openai:MODEL, anthropic:MODEL, gemini:MODEL, vertex:MODEL or vllm:MODEL")
    prefix, sep, rest = spec.partition(":")
    if prefix == "s3" and not Path(spec).expanduser().exists():
        from posttrain.storage.location import S3Location

        S3Location.parse(spec)  # a malformed URI is an error naming what is expected
        return "local"
    if not sep or "/" in prefix or "\\" in prefix or prefix in LOCAL_PREFIXES or Path(spec).expanduser().exists():
        return "local"
    if prefix in API_PROVIDERS or prefix == "vllm":
        if not rest:
            raise UserError(f"model spec {spec!r} names no model after '{prefix}:'; e.g. {prefix}:MODEL_NAME")
        return "api" if prefix in API_PROVIDERS else "vllm"
    known = ", ".join(f"{p}:" for p in (*API_PROVIDERS, "vllm", *LOCAL_PREFIXES)) + ", s3://"
    raise UserError(
        f"model spec {spec!r}: unknown provider {prefix!r} (known: {known}); a local path containing ':' must "
        f"exist, or be written with a folder in front (./{spec})"
    )


def engine_class(spec: str):
    """The engine class a spec selects (imports only that engine's module)."""
    kind = engine_kind(spec)
    if kind == "api":
        from posttrain.generation.api import API_ENGINES

        return API_ENGINES[spec.partition(":")[0]]
    if kind == "vllm":
        from posttrain.generation.vllm_engine import VLLMEngine

        return VLLMEngine
    from posttrain.generation.local import TransformersEngine

    return TransformersEngine


def engine_options(cls) -> list[str]:
    """The keyword options an engine class takes (API engines: their own plus the shared ones)."""
    names = []
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            params = inspect.signature(klass.__init__).parameters.values()
            names += [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.name not in names]
    return names


def make_engine(spec: str, **options) -> Engine:
    """The engine for `spec`, built with `options` (None values dropped: the engine's default)."""
    cls = engine_class(spec)
    options = {k: v for k, v in options.items() if v is not None}
    allowed = engine_options(cls)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise UserError(f"{', '.join(unknown)}: not an option of {cls.__name__} (model {spec!r}); it takes {', '.join(allowed)}")
    model = spec.partition(":")[2] if engine_kind(spec) != "local" else spec
    return cls(model, **options)
