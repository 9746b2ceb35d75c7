"""Prompts at the right difficulty: score every training prompt with the starting policy, keep those in a pass-rate band.

    posttrain train --recipe recipes/grpo/tiny-cpu.yaml 'training.difficulty_filter={}'

A prompt the policy never solves gives groups whose rewards are all 0, and one it always solves groups whose rewards
are all 1: both have advantage 0 everywhere and teach nothing (GRPO, GSPO, RLOO alike), while they cost a generation
each step. verl (DAPO), OpenRLHF and prime-rl filter prompts by the policy's pass rate; here it happens once, before
training, with the starting policy:

1. every training prompt (after data.max_prompt_length's fitting) is answered `samples` times at the training section's
   temperature, top_p and max_completion_length, and once greedily, by posttrain's decoding loop (the engine `posttrain
   eval` and held-out scoring use: eval mode, float32 on a CPU, seeded with training.seed);
2. each completion is scored by the recipe's rewards, called with TRL's keywords (rewards/scoring.py; trainer_state is
   None), and passes when its weighted sum is at least `pass_threshold`; pass rate = passes / samples;
3. the prompts whose pass rate lies in [min_pass_rate, max_pass_rate] are kept, before TRL, the refill pool and the
   prompt audit see the data. The dropped ones count under data.max_drop_fraction (the drop ledger's stage "outside
   training.difficulty_filter's pass-rate band"), whose exit 2 names the key to raise.

The report (printed, difficulty/report.json, run_summary.json's `difficulty`) counts kept and dropped prompts by
pass-rate bucket, gives the scoring's seconds (kept with the cache, so a run that read the scores still reports
what they cost; time to accuracy counts them) and sets pass@k (some sample passes) against greedy: pass@k - greedy
is the headroom RL can reach (Yue et al. 2025: RLVR raises pass@1 inside the policy's pass@k). When sampling solves no prompt that greedy misses,
the run stops with exit 2: RL would have nothing to reinforce.

With several processes each scores rows[rank::world] and the scores are gathered to all, so every process keeps the
same prompts. The scores are cached in output_dir/difficulty/ (key.json, pass_rates.jsonl) under a sha256 of what
decides them: the model (its spec, and the weights' bytes of a local folder), the fitted data, the rewards (their
specs, and the source file of a reward of your own), samples, pass_threshold, temperature, top_p,
max_completion_length, seed and the chat template. The band is not in the key: a narrower or wider band reads the
same scores. A run with the same key (a resumed or extended run, or one started again in the same output_dir) reads
them instead of scoring again; another key scores again and says which part changed.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import time
from pathlib import Path

from posttrain.errors import UserError

KEY = "training.difficulty_filter"
FOLDER = "difficulty"  # output_dir/difficulty: key.json, pass_rates.jsonl, report.json
CHUNK = 256  # prompts generated and scored together (a progress line after each when there are more)
BUCKETS = ("0", "(0, 0.25]", "(0.25, 0.5]", "(0.5, 0.75]", "(0.75, 1)", "1")


def bucket(rate: float) -> str:
    """The report's pass-rate bucket.

    >>> [bucket(r) for r in (0.0, 0.125, 0.25, 0.5, 0.625, 0.875, 1.0)]
    ['0', '(0, 0.25]', '(0, 0.25]', '(0.25, 0.5]', '(0.5, 0.75]', '(0.75, 1)', '1']
    """
    if rate <= 0:
        return BUCKETS[0]
    if rate >= 1:
        return BUCKETS[5]
    return BUCKETS[1] if rate <= 0.25 else BUCKETS[2] if rate <= 0.5 else BUCKETS[3] if rate <= 0.75 else BUCKETS[4]


class Difficulty:
    """The scores of one run's prompts (row -> passes, greedy pass), where they came from, and what the band kept."""

    def __init__(self, key: dict, scores: list[dict], cached: bool, seconds: float | None):
        self.key, self.scores, self.cached = key, scores, cached
        self.seconds = seconds  # what scoring took (from key.json when cached; None in a cache from before it was kept)
        self.report: dict = {}

    def write(self, output_dir: Path, report: bool = True) -> None:
        """key.json and pass_rates.jsonl in output_dir/difficulty as soon as they are scored, and with report.json once the
        run's files are written (algorithms/run.py; a run started over has moved the earlier run's aside by then)."""
        folder = Path(output_dir) / FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "pass_rates.jsonl").write_text("".join(json.dumps(s) + "\n" for s in self.scores))
        if report:
            (folder / "report.json").write_text(json.dumps(self.report, indent=2) + "\n")
        # last: a cut-off write is never read as whole
        (folder / "key.json").write_text(json.dumps({**self.key, "seconds": self.seconds}, indent=2) + "\n")


def difficulty_filter(recipe, loaded, train_dataset, output_dir: Path, drops, log):
    """The training prompts in the recipe's pass-rate band, and the Difficulty behind it (None when the key is off).
    UserError (exit 2) when sampling finds nothing greedy misses, or when the band drops more than data.max_drop_fraction."""
    spec = getattr(recipe.training, "difficulty_filter", None)
    if spec is None:
        return train_dataset, None
    rank, world = _rank_world()
    key = cache_key(recipe, loaded, train_dataset)
    found = _read_cache(Path(output_dir), key, len(train_dataset), log) if rank == 0 else None  # (scores, seconds)
    if world > 1:
        import torch.distributed as dist

        box = [found]
        dist.broadcast_object_list(box, src=0)  # every process reads what the main one found, so all score or none does
        found = box[0]
    if found is not None:
        log(f"difficulty: read from cache, not scored again ({Path(output_dir) / FOLDER}, {len(found[0])} prompts)")
        scores, seconds = found
        result = Difficulty(key, scores, cached=True, seconds=seconds)
    else:
        started = time.perf_counter()
        scores = score(recipe, loaded, train_dataset, rank, world, log)
        result = Difficulty(key, scores, cached=False, seconds=round(time.perf_counter() - started, 1))
        log(f"difficulty: scored in {result.seconds:.1f} s")
    kept = _band(result, spec)
    result.report = {**report(result.scores, kept, spec), "seconds": result.seconds}
    if rank == 0 and not result.cached:
        result.write(output_dir, report=False)  # before any stop below: a rerun with another band or drop limit reads them
    for line in render(result.report, spec):
        log(line)
    _no_headroom(result.report, spec)
    from .run_data import split_key

    dropped = len(train_dataset) - len(kept)
    drops.add_stage(split_key(recipe.data, "train"), f"outside {KEY}'s pass-rate band [{spec.min_pass_rate:g}, {spec.max_pass_rate:g}]",
                    len(train_dataset), dropped)
    drops.check()  # now, before the trainer is built: its exit 2 names data.max_drop_fraction
    if len(train_dataset) and not kept:
        raise UserError(f"{KEY}: no training prompt has a pass rate in [{spec.min_pass_rate:g}, {spec.max_pass_rate:g}] "
                        "(the table above), so nothing would train; widen the band")
    return (train_dataset.select(kept) if dropped else train_dataset), result


def _rank_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


# -- scoring ------------------------------------------------------------------------------------------------------
def score(recipe, loaded, dataset, rank: int, world: int, log) -> list[dict]:
    """[{row, passes, greedy}] for every row of `dataset`: this process's rows[rank::world] scored, all gathered."""
    from .grpo import reward_functions

    training, spec = recipe.training, recipe.training.difficulty_filter
    functions, _ = reward_functions(training)  # reward models are refused with the filter (recipe/rl_section.py)
    weights = [r.weight for r in training.rewards]
    mine = list(range(rank, len(dataset), world))
    log(f"difficulty: scoring {len(dataset)} prompts with the starting policy, {spec.samples} samples and 1 greedy completion "
        f"each ({KEY}.samples={spec.samples}, temperature {_value(training, 'temperature')}, top_p {_value(training, 'top_p')}, "
        f"at most {_value(training, 'max_completion_length')} tokens)" + (f", {world} processes" if world > 1 else ""))
    local = []
    for start in range(0, len(mine), CHUNK):
        rows = mine[start:start + CHUNK]
        local += _score_rows(recipe, loaded, dataset, rows, functions, weights, chunk=start // CHUNK)
        if len(mine) > CHUNK:
            log(f"difficulty: {min(start + CHUNK, len(mine))}/{len(mine)} prompts scored" + (" (this process's share)" if world > 1 else ""))
    if world > 1:
        import torch.distributed as dist

        parts = [None] * world
        dist.all_gather_object(parts, local)
        local = [s for part in parts for s in part]
    local.sort(key=lambda s: s["row"])
    return local


def _value(training, key: str):
    """A TRL field as the trainer will see it: the recipe's value (posttrain's defaults are in it), else TRL's default."""
    return training.value(key)


def _score_rows(recipe, loaded, dataset, indices: list[int], functions, weights, chunk: int) -> list[dict]:
    import torch

    from posttrain.generation.base import SamplingParams
    from posttrain.generation.inference_weights import forget_trained
    from posttrain.generation.local import TransformersEngine
    from posttrain.rewards.checks import RewardFault
    from posttrain.rewards.scoring import reward_kwargs, weighted_sums

    training, spec = recipe.training, recipe.training.difficulty_filter
    k, seed = spec.samples, (training.seed if training.seed is not None else 42) + chunk
    model, tokenizer = loaded.model, loaded.tokenizer
    rows = [dataset[i] for i in indices]
    engine = TransformersEngine.around(model, tokenizer, "difficulty", use_chat_template=getattr(recipe.data, "use_chat_template", True))
    longest = _value(training, "max_completion_length")
    sampled_params = SamplingParams(max_new_tokens=longest, temperature=_value(training, "temperature"), top_p=_value(training, "top_p"), seed=seed)
    was_training = model.training
    model.eval()
    try:  # the model is not prepared (autocast-wrapped) yet: its float32 forward, as `posttrain eval` runs it
        with torch.no_grad():
            greedy = engine.generate([r["prompt"] for r in rows], SamplingParams(max_new_tokens=longest, seed=seed))
            sampled = engine.generate([r["prompt"] for r in rows for _ in range(k)], sampled_params)
    finally:
        model.train(was_training)
        forget_trained(model)  # training changes the weights: their packed copies would be stale
    texts = [c.text for c in greedy] + [c.text for c in sampled]
    answered = rows + [r for r in rows for _ in range(k)]
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    try:
        sums = weighted_sums(functions, weights, reward_kwargs(answered, texts, ids), len(texts))
    except RewardFault as fault:  # the user's reward, on real completions: bad input, as in the start-up trial
        raise UserError(f"{KEY}: scoring the prompts before training: {fault}; fix the reward and train again") from fault
    passed = [s is not None and s >= spec.pass_threshold for s in sums]
    n = len(rows)
    return [{"row": i, "passes": sum(passed[n + j * k:n + (j + 1) * k]), "greedy": passed[j]} for j, i in enumerate(indices)]


# -- the cache -----------------------------------------------------------------------------------------------------
def cache_key(recipe, loaded, dataset) -> dict:
    """{key, parts}: the sha256 of every part that decides the scores (module docstring), and the parts themselves, so
    that another key can say which part changed."""
    training, spec = recipe.training, recipe.training.difficulty_filter
    rewards = [r.model_dump(mode="json") for r in training.rewards]
    parts = {
        "model": _sha(json.dumps(recipe.model.model_dump(mode="json"), sort_keys=True, default=str) + _local_weights(recipe.model.base_model_name)),
        "data": _data_sha(dataset),
        "rewards": _sha(json.dumps(rewards, sort_keys=True, default=str) + _reward_sources(training)),
        "samples": spec.samples, "pass_threshold": spec.pass_threshold,
        "temperature": _value(training, "temperature"), "top_p": _value(training, "top_p"),
        "max_completion_length": _value(training, "max_completion_length"),
        "seed": training.seed if training.seed is not None else 42,
        "chat_template": _sha(json.dumps([getattr(recipe.data, "use_chat_template", True), getattr(loaded.tokenizer, "chat_template", None)], default=str)),
    }
    return {"key": _sha(json.dumps(parts, sort_keys=True)), "parts": parts}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _data_sha(dataset) -> str:
    digest = hashlib.sha256()
    for row in dataset:
        digest.update(json.dumps(row, sort_keys=True, default=str).encode() + b"\n")
    return digest.hexdigest()


def _local_weights(spec: str) -> str:
    """The bytes of a local model or adapter folder's weights and configs (top level), hashed: a folder trained again
    under the same name is another policy."""
    folder = Path(spec)
    if not folder.is_dir():
        return ""
    digest = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        if path.is_file() and (path.suffix in (".safetensors", ".bin") or path.name in ("config.json", "adapter_config.json")):
            digest.update(path.name.encode())
            with path.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()


def _reward_sources(training) -> str:
    """The source files of the rewards of your own ('package.module:function'), hashed: an edited reward scores anew."""
    out = []
    for spec in training.rewards:
        if spec.name and ":" in spec.name:
            try:
                from posttrain.rewards.builtin import get_reward

                path = inspect.getsourcefile(inspect.unwrap(get_reward(spec.name, **spec.options)))
                out.append(hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else "")
            except (OSError, TypeError, ValueError):
                out.append("")
    return ",".join(out)


def _read_cache(output_dir: Path, key: dict, rows: int, log) -> tuple[list[dict], float | None] | None:
    folder = output_dir / FOLDER
    try:
        old = json.loads((folder / "key.json").read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        log(f"difficulty: {folder / 'key.json'} is unreadable; scoring again")
        return None
    if old.get("key") != key["key"]:
        changed = [name for name, value in key["parts"].items() if (old.get("parts") or {}).get(name) != value]
        log(f"difficulty: the scores in {folder} do not match this run ({', '.join(changed) or 'the key'} changed); scoring again")
        return None
    try:
        scores = [json.loads(line) for line in (folder / "pass_rates.jsonl").read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        scores = []
    if sorted(s.get("row", -1) if isinstance(s, dict) else -1 for s in scores) != list(range(rows)):
        log(f"difficulty: {folder / 'pass_rates.jsonl'} does not hold a score for each of the {rows} prompts; scoring again")
        return None
    return sorted(scores, key=lambda s: s["row"]), old.get("seconds")


# -- the band and the report ---------------------------------------------------------------------------------------
def _band(result: Difficulty, spec) -> list[int]:
    return [s["row"] for s in result.scores if spec.min_pass_rate <= s["passes"] / spec.samples <= spec.max_pass_rate]


def report(scores: list[dict], kept: list[int], spec) -> dict:
    """Kept and dropped prompts by pass-rate bucket; pass@k, greedy and their difference (the headroom)."""
    k, kept_rows, n = spec.samples, set(kept), len(scores)
    table = {b: {"kept": 0, "dropped": 0} for b in BUCKETS}
    for s in scores:
        table[bucket(s["passes"] / k)]["kept" if s["row"] in kept_rows else "dropped"] += 1
    solved = sum(1 for s in scores if s["passes"])
    greedy = sum(1 for s in scores if s["greedy"])
    only_sampled = sum(1 for s in scores if s["passes"] and not s["greedy"])
    share = (lambda count: round(count / n, 6) if n else 0.0)
    return {"prompts": n, "samples": k, "pass_threshold": spec.pass_threshold,
            "band": [spec.min_pass_rate, spec.max_pass_rate], "kept": len(kept_rows), "dropped": n - len(kept_rows),
            "buckets": table, f"pass@{k}": share(solved), "greedy": share(greedy),
            "headroom": round(share(solved) - share(greedy), 6), "solved_by_sampling_only": only_sampled,
            "mean_pass_rate": round(sum(s["passes"] for s in scores) / (n * k), 6) if n else 0.0}


def render(rep: dict, spec) -> list[str]:
    k, n = rep["samples"], rep["prompts"]
    lines = [f"difficulty: pass rates of {n} prompts ({k} samples each; a completion passes at a reward sum >= {spec.pass_threshold:g})",
             f"  {'pass rate':<12} {'prompts':>8} {'kept':>8} {'dropped':>8}"]
    for name, counts in rep["buckets"].items():
        lines.append(f"  {name:<12} {counts['kept'] + counts['dropped']:>8} {counts['kept']:>8} {counts['dropped']:>8}")
    lines.append(f"  pass@{k} {100 * rep[f'pass@{k}']:.1f}%, greedy {100 * rep['greedy']:.1f}%: headroom "
                 f"{100 * rep['headroom']:+.1f} points ({rep['solved_by_sampling_only']} prompts solved by sampling only); "
                 f"mean pass rate {100 * rep['mean_pass_rate']:.1f}%")
    lines.append(f"difficulty: kept {rep['kept']} of {n} prompts with pass rate in [{spec.min_pass_rate:g}, {spec.max_pass_rate:g}], "
                 f"dropped {rep['dropped']} ({KEY})")
    return lines


def _no_headroom(rep: dict, spec) -> None:
    """Sampling solves no prompt that greedy misses: RL re-weights what the policy samples, and would find nothing."""
    if rep["solved_by_sampling_only"] or not rep["prompts"]:
        return
    k, n = rep["samples"], rep["prompts"]
    sampled, greedy = 100 * rep[f"pass@{k}"], 100 * rep["greedy"]
    rates = f"pass@{k} = greedy = {sampled:.1f}%" if sampled == greedy else f"pass@{k} = {sampled:.1f}% <= greedy = {greedy:.1f}%"
    raise UserError(f"{KEY}: {rates} on {n} prompts: sampling finds nothing greedy misses, so RL has nothing to reinforce; "
                    "train SFT further or choose a task with headroom")
