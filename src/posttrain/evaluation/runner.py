"""Run one arm (one model) over a task's items, reusing cached generations, and score every answer.

    records = evaluate("sft", engine, items, SamplingParams(max_new_tokens=512), "runs/eval/cache")

The generation cache
--------------------
Generating is the slow part of an evaluation; scoring is instant. So generations -- not scores --
are cached: a fix to the answer parser re-scores old generations without regenerating them.

* One JSONL file per (engine name, model identity, API endpoint, sampling params); one line per item, keyed by a
  hash of the item's id and prompt. A later run with more items, or an interrupted run, reuses
  every line it finds and generates only what is missing; lines are appended after each chunk, so
  a crash loses at most one chunk.
* Model identity: for a local model (directory, ``tiny:`` spec, or ``vllm:PATH``) a hash of its
  weight, config and tokenizer files' names, sizes and modification times -- retraining into the
  same folder invalidates the cache; an adapter's identity includes its base model's. An ``s3://``
  model is its normalised URI (S3 URIs name immutable content, as in posttrain.storage.cache). For a
  hub id it is the name alone, and for an API model the name plus the endpoint it is served from
  (``--base-url``): one model name on two servers is two models. A model re-published under the
  same name is NOT noticed (evaluate with ``cache_dir=None``, the CLI's ``--no-cache``, to force
  fresh generations).
* Failed requests (``Completion.error``) are never cached, so a re-run retries them.
"""

from __future__ import annotations

import gc
import hashlib
import json
import sys
from pathlib import Path
from typing import Callable

from posttrain.evaluation.scoring import score_completion
from posttrain.generation.base import Completion, Engine, SamplingParams, with_loaded_images

__all__ = ["GenerationCache", "LazyEngine", "evaluate", "item_key", "model_identity"]

CACHE_VERSION = 1  # bump when the cached line format or the key material changes
# what a generation keeps beside its text: with tools, its turns and counts; without a chat template, that it was asked in plain text
EXTRA_FIELDS = ("turns", "tools", "environment_reward", "prompt_form")

# Files that decide what a local model generates. Training state (optimizer, scheduler, trainer
# state) does not, and checkpoint-N subfolders are other models: neither is part of the identity.
_IDENTITY_SUFFIXES = (".safetensors", ".bin", ".json", ".jinja", ".model", ".txt", ".tiktoken")
_TRAINING_STATE = {"training_args.bin", "trainer_state.json", "run_summary.json", "trl_config.json"}


def _sha(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _local_model_dir(spec: str) -> Path | None:
    """The directory ``spec`` loads from, or None for a hub id / API model (``vllm:PATH`` -> PATH)."""
    from posttrain.models.loading import resolve_source

    candidates = (spec, spec.removeprefix("vllm:")) if spec.startswith("vllm:") else (spec,)
    for candidate in candidates:
        if candidate == "tiny" or candidate.startswith("tiny:"):
            return Path(resolve_source(candidate))
        if candidate and Path(candidate).expanduser().exists():
            return Path(candidate).expanduser()
    return None


def model_identity(spec: str) -> str:
    """What a model's cached generations are keyed on (see the module docstring)."""
    if spec.startswith("s3://"):
        from posttrain.storage.location import S3Location

        return f"s3:{S3Location.parse(spec).uri}"
    path = _local_model_dir(spec)
    if path is None:
        return f"name:{spec}"
    files = [path] if path.is_file() else sorted(
        f for f in path.iterdir() if f.is_file() and f.suffix in _IDENTITY_SUFFIXES and f.name not in _TRAINING_STATE
    )
    fingerprint = [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    base = None
    adapter_config = path / "adapter_config.json"
    if adapter_config.is_file():
        base_name = json.loads(adapter_config.read_text()).get("base_model_name_or_path")
        base = model_identity(base_name) if base_name else None
    return "files:" + _sha({"path": str(path.resolve()), "files": fingerprint, "base": base})


def item_key(item: dict) -> str:
    """Cache key of one item: its id and the exact prompt (a changed prompt template regenerates)."""
    return _sha([item["id"], item["prompt"]])


class GenerationCache:
    """The cached generations of one (engine, model identity, sampling params) in one JSONL file."""

    def __init__(self, cache_dir: str | Path, engine_name: str, params: SamplingParams, endpoint: str | None = None,
                 tools: dict | None = None, use_chat_template: bool = True):
        material = {"version": CACHE_VERSION, "engine": engine_name, "identity": model_identity(engine_name),
                    "params": params.to_dict()}
        if not use_chat_template:  # --no-chat-template: the same items asked another way
            material["use_chat_template"] = False
        if endpoint is not None:  # API models only, so local models keep their existing cache files
            material["endpoint"] = endpoint
        if tools is not None:  # generations with tools (posttrain.generation.tool_loop): their specs, schemas and files
            material["tools"] = tools
        self.path = Path(cache_dir) / f"{_sha(material)[:32]}.jsonl"
        self.material = material

    def load(self) -> dict[str, Completion]:
        """Cached completions by item key. A torn last line (a crash mid-write) is skipped."""
        found: dict[str, Completion] = {}
        if not self.path.is_file():
            return found
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if "key" in row:
                found[row["key"]] = Completion(text=row["text"], prompt_tokens=row.get("prompt_tokens"),
                                               completion_tokens=row.get("completion_tokens"),
                                               finish_reason=row.get("finish_reason"),
                                               extra={k: row[k] for k in EXTRA_FIELDS if k in row})
        return found

    def append(self, entries: list[tuple[str, str, Completion]]) -> None:
        """Add (key, item id, completion) lines; the first write starts the file with its key material."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lines = [] if self.path.is_file() else [json.dumps({"cache": self.material})]
        lines += [json.dumps({"key": key, "id": item_id, "text": c.text, "prompt_tokens": c.prompt_tokens,
                              "completion_tokens": c.completion_tokens, "finish_reason": c.finish_reason,
                              **{k: c.extra[k] for k in EXTRA_FIELDS if k in c.extra}},
                             ensure_ascii=False, default=str) for key, item_id, c in entries]
        with self.path.open("a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))


class LazyEngine:
    """An engine built on its first ``generate`` call, so an arm answered fully from the cache never
    loads its model. ``close()`` drops it and frees its memory before the next arm loads."""

    def __init__(self, name: str, build: Callable[[], Engine]):
        self.name = name
        self._build = build
        self._engine: Engine | None = None

    @property
    def loaded(self) -> bool:
        return self._engine is not None

    def generate(self, prompts, params: SamplingParams, **kwargs) -> list[Completion]:
        if self._engine is None:
            self._engine = self._build()
        return self._engine.generate(prompts, params, **kwargs)

    def close(self) -> None:
        if self._engine is None:
            return
        self._engine = None
        gc.collect()
        torch = sys.modules.get("torch")  # only if an engine imported it
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()


def evaluate(arm_name: str, engine: Engine, task_items: list[dict], params: SamplingParams,
             cache_dir: str | Path | None = None, *, chunk_size: int = 64,
             log: Callable[[str], None] | None = None, endpoint: str | None = None, use_chat_template: bool = True) -> list[dict]:
    """Records (``scoring.score_completion``) of ``engine`` answering ``task_items``, in item order.

    Items already in the cache are not sent to the engine (their records have ``cached: True``);
    the rest are generated ``chunk_size`` at a time and appended to the cache after each chunk.
    ``cache_dir=None`` disables the cache. ``endpoint``: the API root an API model answers from.
    ``use_chat_template``: the engine's (False: --no-chat-template), part of the cache's key.
    """
    tools = engine.identity() if hasattr(engine, "identity") else None
    cache = GenerationCache(cache_dir, engine.name, params, endpoint, tools, use_chat_template) if cache_dir is not None else None
    cached = cache.load() if cache else {}
    keys = [item_key(item) for item in task_items]
    todo = [i for i, key in enumerate(keys) if key not in cached]
    fresh: dict[str, Completion] = {}
    if log and len(todo) < len(task_items):
        log(f"{arm_name}: {len(task_items) - len(todo)}/{len(task_items)} generations from the cache {cache.path}")
    for start in range(0, len(todo), chunk_size):
        chunk = todo[start:start + chunk_size]
        rows = {"rows": [task_items[i] for i in chunk]} if getattr(engine, "takes_rows", False) else {}
        completions = engine.generate([with_loaded_images(task_items[i]["prompt"]) for i in chunk], params, **rows)
        if len(completions) != len(chunk):
            raise RuntimeError(f"engine {engine.name!r} returned {len(completions)} completions for {len(chunk)} prompts")
        fresh.update((keys[i], c) for i, c in zip(chunk, completions))
        if cache:
            cache.append([(keys[i], task_items[i]["id"], c) for i, c in zip(chunk, completions) if not c.error])
        if log:
            log(f"{arm_name}: generated {start + len(chunk)}/{len(todo)}")
    return [score_completion(item, arm_name, cached[key] if key in cached else fresh[key], cached=key in cached)
            for item, key in zip(task_items, keys)]
