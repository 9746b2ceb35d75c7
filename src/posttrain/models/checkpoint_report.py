"""What a checkpoint holds, read from safetensors headers alone (no torch, no weights loaded).

Groups: LoRA A/B matrices, embeddings, lm_head, other. An adapter that carries full embedding or
lm_head matrices (a resized vocabulary, or modules_to_save) is flagged: it is the usual reason an
adapter checkpoint weighs hundreds of MB instead of a few.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path

from posttrain.errors import UserError

DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
GROUPS = ("lora_A", "lora_B", "embeddings", "lm_head", "other")


def tensor_group(name: str) -> str:
    if "lora_A" in name or "lora_embedding_A" in name:
        return "lora_A"
    if "lora_B" in name or "lora_embedding_B" in name:
        return "lora_B"
    if "embed_tokens" in name or "wte" in name or "word_embeddings" in name:
        return "embeddings"
    if "lm_head" in name or "embed_out" in name:
        return "lm_head"
    return "other"


def read_header(path: Path) -> dict:
    try:
        with path.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            if size > path.stat().st_size:
                raise ValueError(f"header length {size} exceeds the file")
            header = json.loads(f.read(size))
        if not isinstance(header, dict):
            raise ValueError("header is not a JSON object")
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not a readable safetensors file ({e}); it may be truncated or another format") from None
    header.pop("__metadata__", None)
    return header


@dataclass
class CheckpointReport:
    path: Path
    is_adapter: bool
    params: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GROUPS, 0))
    bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GROUPS, 0))
    files: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes.values())

    def render(self) -> str:
        kind = "LoRA adapter" if self.is_adapter else "model"
        lines = [f"{self.path}: {kind}, {len(self.files)} safetensors file(s), {_human(sum(f.stat().st_size for f in self.files))} on disk", ""]
        lines.append(f"{'group':<12}{'parameters':>14}{'bytes':>14}")
        for g in GROUPS:
            if self.params[g]:
                lines.append(f"{g:<12}{self.params[g]:>14,}{_human(self.bytes[g]):>14}")
        lines.append(f"{'total':<12}{sum(self.params.values()):>14,}{_human(self.total_bytes):>14}")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def inspect_checkpoint(path: Path) -> CheckpointReport:
    if path.is_file() and path.suffix == ".safetensors":
        files, is_adapter = [path], path.name.startswith("adapter")
    elif path.is_dir():
        files = sorted(path.glob("*.safetensors"))
        is_adapter = (path / "adapter_config.json").is_file()
    else:
        raise UserError(f"{path} is neither a directory nor a .safetensors file")
    if not files:
        raise UserError(f"{path} holds no .safetensors file (only safetensors checkpoints can be inspected)")
    report = CheckpointReport(path, is_adapter, files=files)
    for file in files:
        for name, info in read_header(file).items():
            group = tensor_group(name)
            n = math.prod(info["shape"])
            report.params[group] += n
            report.bytes[group] += n * DTYPE_BYTES.get(info["dtype"], 4)
    if is_adapter:
        for group in ("embeddings", "lm_head"):
            if report.params[group]:
                report.warnings.append(
                    f"the adapter carries full {group} matrices ({_human(report.bytes[group])}): a resized vocabulary or "
                    "modules_to_save. Without them it would be "
                    f"{_human(report.bytes['lora_A'] + report.bytes['lora_B'] + report.bytes['other'])}."
                )
    return report
