"""The engine flags `generate`, `eval` and `compare` share: one definition, so every command that
generates speaks the same language (DESIGN invariant 8).

    add_engine_arguments(parser)                       # --batch-size ... --on-error, in one group
    options = engine_options_per_model(args, {spec: engine_kind(spec) for spec in specs})

A flag applies to the models it fits (FLAG_OPTIONS: local, vllm, api); a flag that fits none of the
models given is an error naming it, never a silent no-op. Only argparse is imported here.
"""

from __future__ import annotations

import argparse

from posttrain.flag_types import COUNT, NONNEGATIVE, SECONDS

# flag destination -> (engine option, engine kinds it applies to)
FLAG_OPTIONS = {
    "batch_size": ("batch_size", {"local"}),
    "decoder": ("decoder", {"local"}),
    "no_chat_template": ("use_chat_template", {"local", "vllm"}),
    "base_url": ("base_url", {"api"}),
    "api_key_env": ("api_key_env", {"api"}),
    "concurrency": ("max_workers", {"api"}),
    "timeout": ("timeout", {"api"}),
    "retries": ("max_retries", {"api"}),
    "on_error": ("on_error", {"api"}),
    "no_progress": ("progress", {"local", "api"}),
}


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """The engine flags, in their own help group; every default is None = the engine's default."""
    e = parser.add_argument_group("engines (each flag applies to the models it fits)")
    e.add_argument("--batch-size", type=COUNT, help="local models: prompts per batch (default: 64 on a CPU, 16 on a GPU)")
    e.add_argument("--decoder", choices=["posttrain", "transformers"], help="local models: posttrain's decoding loop "
                   "(default; pre-packed CPU weights, no cache copies: `posttrain docs rollouts`) or transformers' generate; "
                   "the same tokens up to float32 rounding")
    e.add_argument("--no-chat-template", action="store_true", default=None, help="local/vLLM models: send plain-string prompts raw instead of as a user turn in the chat template")
    e.add_argument("--base-url", help="API models: API root, e.g. http://localhost:8000/v1 for an OpenAI-compatible server")
    e.add_argument("--api-key-env", metavar="VAR", help="API models: environment variable holding the key")
    e.add_argument("--concurrency", type=COUNT, help="API models: requests in flight at once (default: 8)")
    e.add_argument("--timeout", type=SECONDS, help="API models: seconds to wait for an answer (default: 60)")
    e.add_argument("--retries", type=NONNEGATIVE, help="API models: retries on 429/5xx/connection errors, with backoff (default: 5)")
    e.add_argument("--on-error", choices=["fail", "continue"], help="API models: stop at a failed request, or record it as an error row and go on (default: fail)")
    e.add_argument("--no-progress", action="store_true", default=None, help="no progress bars")


def options_for_kind(args, kind: str) -> dict:
    """The engine options the flags set for a model of `kind` ("local", "vllm", "api")."""
    options = {}
    for dest, (option, kinds) in FLAG_OPTIONS.items():
        value = getattr(args, dest)
        if value is not None and kind in kinds:
            options[option] = not value if dest.startswith("no_") else value
    return options


def engine_options_per_model(args, kinds: dict[str, str]) -> dict[str, dict]:
    """Options per model spec; a flag that fits none of the models is an error, not a no-op. API
    engines are built once here (cheap: no request is sent), so a missing key or a malformed
    --base-url fails before a command writes anything."""
    from posttrain.errors import UserError
    from posttrain.generation.engines import make_engine

    for dest, (_, flag_kinds) in FLAG_OPTIONS.items():
        if getattr(args, dest) is not None and not flag_kinds & set(kinds.values()):
            flag = "--" + dest.replace("_", "-")
            raise UserError(f"{flag} applies to {' and '.join(sorted(flag_kinds))} models only, and none of the models given "
                            f"({' '.join(kinds)}) is one; remove {flag}")
    options = {spec: options_for_kind(args, kind) for spec, kind in kinds.items()}
    for spec, kind in kinds.items():
        if kind == "api":
            make_engine(spec, **options[spec])
    return options


def endpoint(spec: str, options: dict) -> str | None:
    """The API root an API model's requests go to (None for local and vLLM models): part of the
    generation cache key, since one model name on two servers is two models."""
    from posttrain.generation.engines import engine_class, engine_kind

    if engine_kind(spec) != "api":
        return None
    cls = engine_class(spec)
    return cls.api_root(options.get("base_url") or cls.default_base_url)
