"""Do FAI-RL users' own recipes convert, validate and run? Every recipe of a local FAI-RL checkout, through posttrain.

    python benchmarks/fairl_recipes.py PATH/TO/FAI-RL/recipes [--run] [--model tiny|smollm2] [--only SUBSTRING]
                                       [--out benchmarks/results/fairl_recipes.json]

FAI-RL's recipes are theirs: read from your checkout (github.com/Roblox/FAI-RL, folder `recipes/`), never
copied into this repository. For every training, inference and evaluation recipe (YAML) below the folder:

1. `posttrain convert RECIPE -o OUT` (the CLI, as a user runs it): converts, or exits 2 naming the keys it cannot;
2. `posttrain validate OUT --schema-only`: the converted recipe is a valid posttrain recipe as written;
3. with `--run`, the converted recipe runs on this CPU with only what a CPU run must change swapped (shown per
   recipe in the JSON): the model by `tiny:qwen2-1m` (`tiny:llava-2m` for vision-language recipes; `--model
   smollm2` puts the real SmolLM2-135M-Instruct GGUF in the text recipes), the data by a local file with the
   columns the converted recipe reads (generated: arithmetic questions, their answers, small images and a short
   video), 2 training steps (GRPO/GSPO: 2 completions of 8 tokens), 2 generated prompts of 4 tokens, 4 evaluated
   items; quantisation, DeepSpeed, uploads and tracking off. Nothing else of the converted recipe changes:
   templates, columns, rewards, LoRA settings and the other keys run as converted.

Proof that a run means something: a training run counts only when it wrote run_summary.json with the 2 steps
done and a finite loss; generation only when every row has a completion; evaluation only when its summary
holds the items. Prints a table and the counts; writes JSON.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from string import Formatter

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

TEXT_MODEL, VLM_MODEL = "tiny:qwen2-1m", "tiny:llava-2m"
ROWS = 24


def posttrain(*args, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled"}
    return subprocess.run([sys.executable, "-m", "posttrain", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


# ----------------------------------------------------------------------------------------- local data
def template_fields(*templates) -> list[str]:
    out = []
    for t in templates:
        if isinstance(t, str):
            out += [f for _, f, _, _ in Formatter().parse(t) if f and f not in out]
    return out


class Media:
    """A small PNG and a short MP4 beside the data files (relative paths, as a user's CSV holds them)."""

    def __init__(self, folder: Path):
        from PIL import Image

        Image.new("RGB", (48, 32), "red").save(folder / "red.png")
        self.image, self.video = "red.png", None
        try:
            import av
            import numpy as np

            with av.open(str(folder / "clip.mp4"), mode="w") as container:
                stream = container.add_stream("mpeg4", rate=10)
                stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
                for i in range(10):
                    for packet in stream.encode(av.VideoFrame.from_ndarray(np.full((32, 32, 3), 20 * i, np.uint8), format="rgb24")):
                        container.mux(packet)
                for packet in stream.encode():
                    container.mux(packet)
            self.video = "clip.mp4"
        except ImportError:  # no PyAV: video recipes cannot run here
            pass


def problems(n: int) -> list[dict]:
    from posttrain.data.synthetic import problems as make

    return make(n, seed=0)


def row_values(columns: dict[str, str], problem: dict, media: Media) -> dict:
    """One row: each needed column by its role (question, answer, gold, response, chosen, rejected, image, video)."""
    answer = str(problem["answer"]).split("####")[-1].strip()
    fill = {"question": problem["question"], "gold": answer, "gsm8k_gold": f"{problem['question']} #### {answer}",
            "response": f"<think>{problem.get('expression', '')}</think><answer>{answer}</answer>",
            "chosen": f"The answer is {answer}.", "rejected": "I do not know.", "image": media.image, "video": media.video,
            "text": f"{problem['question']} The answer is {answer}.", "persona": "a patient teacher",
            "choices": json.dumps(["1", answer, "3", "4"]), "letter": "B"}
    return {column: fill[role] for column, role in columns.items()}


def training_columns(spec: dict, algorithm: str) -> dict[str, str]:
    """column -> role, for one converted dataset spec."""
    cols: dict[str, str] = {}
    for c in spec.get("image_columns") or []:
        cols[c] = "image"
    for c in spec.get("video_columns") or []:
        cols[c] = "video"
    templates = [spec.get(k) for k in ("text_template", "system_template", "prompt_template", "completion_template")]
    if any(templates):
        fields = template_fields(*templates)
        answer_field = template_fields(spec.get("completion_template"))[-1:] or fields[-1:]
        for f in fields:
            cols.setdefault(f, "response" if f in answer_field else "question")
        return cols
    template = spec.get("template", "none")
    if algorithm in ("grpo", "gspo"):
        preset = {"gsm8k": ("question", "answer"), "openmathinstruct2": ("problem", "expected_answer")}.get(template, ("prompt", "answer"))
        cols[spec.get("prompt_column", preset[0])] = "question"
        cols[spec.get("answer_column", preset[1])] = "gsm8k_gold" if template == "gsm8k" else "gold"
    elif algorithm == "dpo":
        cols.update({spec.get("prompt_column", "prompt"): "question", spec.get("chosen_column", "chosen"): "chosen",
                     spec.get("rejected_column", "rejected"): "rejected"})
    elif algorithm == "cpt" or "text_column" in spec:
        cols[spec.get("text_column", "text")] = "text"
    else:
        cols.update({spec.get("prompt_column", "prompt"): "question", spec.get("completion_column", "completion"): "response"})
    return cols


def write_rows(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".csv":
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# -------------------------------------------------------------------------------------- the CPU swaps
def cpu_training(recipe: dict, work: Path, name: str, media: Media, text_model: str) -> tuple[dict, list[str]]:
    r = copy.deepcopy(recipe)
    algorithm = r["training"]["algorithm"]
    swaps = []
    vlm = algorithm == "sft_vlm"
    r["model"]["base_model_name"] = VLM_MODEL if vlm else text_model
    swaps.append(f"model -> {r['model']['base_model_name']}")
    for key in ("load_in_4bit", "load_in_8bit", "attn_implementation"):
        if r["model"].pop(key, None):
            swaps.append(f"model.{key} off (CPU)")
    datasets = []
    for i, spec in enumerate(r["data"]["datasets"]):
        cols = training_columns(spec, algorithm)
        if "video" in cols.values() and media.video is None:
            raise RuntimeError("PyAV is not installed: no video for a video recipe")
        rows = [row_values(cols, p, media) for p in problems(ROWS)]
        suffix = ".csv" if spec.get("image_columns") or spec.get("video_columns") else ".jsonl"
        local = write_rows(work / f"{name}-data{i}{suffix}", rows)
        new = {k: v for k, v in spec.items() if k not in ("name", "subset", "split", "max_samples", "weight")}
        datasets.append({"name": str(local), **new})
    r["data"]["datasets"] = datasets
    r["data"].pop("eval_datasets", None)
    swaps.append(f"data -> local files of {ROWS} generated rows with the recipe's columns")
    t = r["training"]
    t.update({"output_dir": str(work / f"run-{name}"), "max_steps": 2, "logging_steps": 1, "save_steps": 2, "warmup_steps": 0,
              "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1, "dataloader_drop_last": False})
    if "eval_steps" in t:
        t["eval_steps"] = 2
    for key in ("distributed", "deepspeed"):
        if t.pop(key, None) is not None:
            swaps.append(f"training.{key} off (one CPU process)")
    if algorithm not in ("grpo", "gspo"):
        t["max_length"] = 128
        swaps.append("training.max_length -> 128")
    if algorithm in ("grpo", "gspo"):
        t.update({"num_generations": 2, "max_completion_length": 8})
        if "steps_per_generation" in t:
            t["steps_per_generation"] = 2
        swaps.append("2 completions of 8 tokens per prompt")
    r.pop("s3", None)
    r.pop("tracking", None)
    swaps.append("2 steps, batch 2; no uploads, no tracking")
    return r, swaps


def cpu_inference(recipe: dict, work: Path, name: str, media: Media, text_model: str) -> tuple[dict, list[str]]:
    r = copy.deepcopy(recipe)
    inf = r["inference"]
    vlm = bool(inf.get("image_columns") or inf.get("video_columns"))
    inf["models"] = [VLM_MODEL if vlm else text_model]
    for key in ("base_url", "api_key_env", "concurrency", "timeout", "retries", "on_error"):
        inf.pop(key, None)
    cols = {c: "question" for c in template_fields(inf.get("prompt_template"), inf.get("system_prompt"))}
    if not cols:
        cols[inf.get("prompt_column", "prompt")] = "question"
    cols.update({c: "image" for c in inf.get("image_columns") or []})
    cols.update({c: "video" for c in inf.get("video_columns") or []})
    if "video" in cols.values() and media.video is None:
        raise RuntimeError("PyAV is not installed: no video for a video recipe")
    local = write_rows(work / f"{name}-prompts.csv", [row_values(cols, p, media) for p in problems(2)])
    for key in ("subset",):
        inf.pop(key, None)
    inf.update({"dataset": str(local), "split": "train", "n": 2, "max_new_tokens": 4, "out": str(work / f"{name}-gen.jsonl")})
    return r, [f"models -> {inf['models'][0]}", "dataset -> 2 generated rows with the template's columns", "4 new tokens"]


def cpu_evaluation(recipe: dict, work: Path, name: str, media: Media, text_model: str) -> tuple[dict, list[str]]:
    r = copy.deepcopy(recipe)
    ev = r["evaluation"]
    task = ev["task"]
    if task == "mmlu":
        cols = {"question": "question", "choices": "choices", "answer": "letter"}
    elif task == "gsm8k":
        cols = {"question": "question", "answer": "gsm8k_gold"}
    else:
        cols = {ev.get("prompt_column", "prompt"): "question", ev.get("answer_column", "answer"): "gold"}
    rows = [row_values(cols, p, media) for p in problems(4)]
    if task == "mmlu":
        for row in rows:
            row["choices"] = json.loads(row["choices"])
    local = write_rows(work / f"{name}-eval.jsonl", rows)
    ev.update({"data": str(local), "n": 4, "max_new_tokens": 4, "out": str(work / f"{name}-eval")})
    for key in ("base_url", "api_key_env", "concurrency", "timeout", "retries", "on_error"):
        ev.pop(key, None)
    if "arms" in ev:
        ev["arms"] = {"qwen2": text_model, "llama": "tiny:llama-1m"}
        swaps = ["arms -> two tiny models"]
    else:
        ev["model"] = text_model
        swaps = [f"model -> {text_model}"]
    return r, swaps + ["data -> 4 generated items in the task's columns", "4 new tokens"]


def check_run(kind: str, recipe: dict) -> str | None:
    """None when the run did what it should, else what is missing."""
    if kind == "training":
        out = Path(recipe["training"]["output_dir"])
        summary = out / "run_summary.json"
        if not summary.is_file():
            return "no run_summary.json"
        metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()] if (out / "metrics.jsonl").is_file() else []
        losses = [m["loss"] for m in metrics if isinstance(m.get("loss"), (int, float))]
        steps = json.loads(summary.read_text()).get("global_step")
        if steps != 2 or not losses or not all(math.isfinite(x) for x in losses):
            return f"steps {steps}, losses {losses}"
        return None
    if kind == "generation":
        path = Path(recipe["inference"]["out"])
        rows = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
        return None if len(rows) == 2 and all(r["error"] is None for r in rows) else f"{len(rows)} rows"
    out = Path(recipe["evaluation"]["out"])
    return None if (out / "summary.json").is_file() or (out / "report.json").is_file() else "no summary/report"


# ---------------------------------------------------------------------------------------------- main
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("recipes", type=Path, help="FAI-RL's recipes/ folder (or the checkout holding it)")
    p.add_argument("--run", action="store_true", help="also run every converted recipe on this CPU (minutes)")
    p.add_argument("--model", choices=("tiny", "smollm2"), default="tiny", help="text model of the runs (default tiny:qwen2-1m)")
    p.add_argument("--only", help="only recipes whose path contains this")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/fairl_recipes.json")
    args = p.parse_args(argv)
    folder = args.recipes / "recipes" if (args.recipes / "recipes").is_dir() else args.recipes
    paths = sorted(q for q in folder.rglob("*.yaml") if not args.only or args.only in str(q))
    if not paths:
        print(f"no recipes under {folder}", file=sys.stderr)
        return 2
    text_model = TEXT_MODEL
    if args.model == "smollm2":
        from posttrain.models.gguf import packaged_gguf

        text_model = str(packaged_gguf())
    import yaml

    results = []
    with tempfile.TemporaryDirectory(prefix="fairl-recipes-") as tmp:
        work = Path(tmp)
        media = Media(work)
        for path in paths:
            rel = str(path.relative_to(folder))
            name = rel.removesuffix(".yaml").replace("/", "__")
            row = {"recipe": rel, "converted": False, "valid": False, "ran": None, "note": ""}
            results.append(row)
            converted = work / f"{name}.yaml"
            conv = posttrain("convert", "-q", path, "-o", converted, cwd=folder.parent)
            if conv.returncode != 0:
                row["note"] = last_line(conv.stderr)
                continue
            row["converted"] = True
            valid = posttrain("validate", converted, "--schema-only", cwd=folder.parent)
            row["valid"] = valid.returncode == 0
            if not row["valid"]:
                row["note"] = last_line(valid.stderr)
                continue
            if not args.run:
                continue
            recipe = yaml.safe_load(converted.read_text())
            kind = "training" if "training" in recipe else "generation" if "inference" in recipe else "evaluation"
            command = {"training": "train", "generation": "generate"}.get(kind) or ("compare" if "arms" in recipe["evaluation"] else "eval")
            try:
                swapped, swaps = {"training": cpu_training, "generation": cpu_inference, "evaluation": cpu_evaluation}[kind](
                    recipe, work, name, media, text_model)
            except RuntimeError as e:
                row.update(ran=False, note=str(e))
                continue
            run_recipe = work / f"{name}.cpu.yaml"
            run_recipe.write_text(yaml.safe_dump(swapped, sort_keys=False))
            start = time.perf_counter()
            result = posttrain(command, "--recipe", run_recipe, cwd=work)
            row["seconds"] = round(time.perf_counter() - start, 1)
            row["swaps"] = swaps
            problem = f"exit {result.returncode}: {last_line(result.stderr)}" if result.returncode else check_run(kind, swapped)
            row.update(ran=problem is None, note=problem or "")
            print(f"{rel}: {'ran' if problem is None else 'FAILED ' + problem} ({row['seconds']} s)", file=sys.stderr)
    report(results, args)
    return 0


def report(results: list[dict], args) -> None:
    print("| recipe | converts | validates | runs on CPU | note |")
    print("|---|---|---|---|---|")
    mark = {True: "yes", False: "NO", None: "-"}
    for r in results:
        print(f"| {r['recipe']} | {mark[r['converted']]} | {mark[r['valid']]} | {mark[r['ran']]} | {r['note'][:90]} |")
    print()
    for group, prefix in (("training", "training/"), ("inference and evaluation", ("inference/", "evaluation/"))):
        rows = [r for r in results if r["recipe"].startswith(prefix)]
        if rows:
            line = (f"{group}: {sum(r['converted'] for r in rows)} of {len(rows)} convert, "
                    f"{sum(r['valid'] for r in rows)} validate (--schema-only)")
            if args.run:
                line += f", {sum(r['ran'] is True for r in rows)} run on this CPU"
            print(line)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"recipes": str(args.recipes), "model": args.model, "run": args.run, "results": results}, indent=1))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
