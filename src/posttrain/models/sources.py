"""Where a model spec's files are: `tiny:` specs, `s3://` folders and GGUF files become cached
directories, and an adapter folder names its base. Used by the loader (`models.loading`), the
vision check (`models.vision`) and every command that takes a model spec; imports neither.
"""

from __future__ import annotations

import json
from pathlib import Path

from posttrain.errors import UserError


def resolve_source(name: str) -> str:
    """A model name as transformers can load it: `tiny:` specs, s3:// folders and GGUF files become cached directories."""
    if name == "tiny" or name.startswith("tiny:"):
        from .tiny import resolve_tiny

        return str(resolve_tiny(name))
    if name.startswith("s3://"):  # a model or adapter folder, downloaded once per machine
        from posttrain.storage.cache import cached_download

        return str(cached_download(name))
    from .gguf import gguf_file, resolve_gguf

    if gguf_file(name) is not None:  # dequantized once per machine into a safetensors folder
        return str(resolve_gguf(name))
    return str(Path(name).expanduser()) if Path(name).expanduser().exists() else name


def source_notes(source: str) -> list[str]:
    """Start-up lines about where a resolved model folder came from (a GGUF conversion), if anything."""
    from .gguf import provenance_note

    note = provenance_note(source) if Path(source).is_dir() else None
    return [note] if note else []


def adapter_base(path: str) -> str | None:
    """The base model of a PEFT adapter directory, or None if `path` is not one."""
    config = Path(path) / "adapter_config.json"
    if not config.is_file():
        return None
    base = json.loads(config.read_text()).get("base_model_name_or_path")
    if not base:
        raise UserError(f"{config} names no base_model_name_or_path; cannot tell which model the adapter belongs to")
    return base
