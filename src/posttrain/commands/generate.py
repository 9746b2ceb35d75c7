"""`posttrain generate`: completions from one or more models for the same prompts.

    posttrain generate --model tiny:qwen2-1m --prompts prompts.jsonl
    posttrain generate --model runs/sft/final --model openai:gpt-4o-mini --dataset data/eval.jsonl --n 100 --csv

Prompts come from `--prompts` (.jsonl with a `prompt` or `messages` column, or .txt with one prompt
per line) or `--dataset` (a hub dataset or a local .jsonl/.json/.csv/.parquet file, read like a
recipe's datasets). A `prompt` value is a string or a list of chat messages. Every model gets the
same prompts and sampling parameters; rows are written model by model and flushed, so the
completions of the models that finished are kept if a later one fails.

Output: one JSON line per (model, prompt) in --out, with the fields in OUTPUT_FIELDS; --csv writes
the same rows to a .csv beside it (prompt and params as JSON text). Engine flags apply to the models
they fit (see posttrain.commands.engine_flags, shared with eval and compare); a flag that fits none of the models given is an error, not a no-op.

Only argparse is imported here; engines (and torch, for local models) load when the command runs.
"""

from __future__ import annotations

import argparse

from posttrain.commands.engine_flags import add_engine_arguments, engine_options_per_model
from posttrain.commands.task_recipe import add_recipe_arguments, apply_recipe
from posttrain.commands.tool_flags import add_tool_arguments, make_toolbox, with_tools
from posttrain.flag_types import COUNT, NONNEGATIVE, SECONDS, TEMPERATURE, TOP_P

OUTPUT_FIELDS = ["model", "index", "prompt", "completion", "prompt_tokens", "completion_tokens", "finish_reason", "error", "params"]
TOOL_OUTPUT_FIELDS = ["turns", "tools", "environment_reward"]  # with --tools/--environment: every call and result
PROMPT_COLUMNS = ("prompt", "messages")  # tried in this order when --prompt-column is not given

EPILOG = """\
model specs: a hub id, a local model or adapter dir, a .gguf file, tiny:ARCH-SIZE, s3://BUCKET/PATH, vllm:MODEL_OR_PATH,
openai:MODEL, anthropic:MODEL, gemini:MODEL, vertex:MODEL (needs --base-url). API keys are read from OPENAI_API_KEY,
ANTHROPIC_API_KEY, GEMINI_API_KEY, VERTEX_ACCESS_TOKEN (or the variable named by --api-key-env) and never written out.

examples:
  posttrain generate --model tiny:qwen2-1m --prompts examples/data/sft.jsonl --n 5 --max-new-tokens 32
  posttrain generate --model runs/sft-tiny --model tiny:qwen2-1m --dataset examples/data/sft.jsonl --n 50 --csv
      (runs/sft-tiny: the output_dir of posttrain train --recipe recipes/sft/tiny-cpu.yaml; a checkpoint-N inside it works too)
  posttrain generate --model openai:my-model --base-url http://localhost:8000/v1 --prompts examples/data/sft.jsonl
"""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "generate", help="generate completions from one or more models (local, vLLM or API)",
        description="Generate one completion per prompt from each --model, with the same sampling parameters, into a JSONL file (and CSV with --csv).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", "-m", action="append", metavar="SPEC", help="model spec; repeat for several models")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--prompts", metavar="FILE", help=".jsonl with a 'prompt' or 'messages' column, or .txt with one prompt per line")
    source.add_argument("--dataset", metavar="NAME_OR_FILE", help="hub dataset or local .jsonl/.json/.csv/.parquet file")
    p.add_argument("--prompt-column", metavar="C", help="column holding the prompt (default: 'prompt', else 'messages')")
    p.add_argument("--prompt-template", metavar="T", help="build each prompt from the row's columns with str.format, e.g. 'Persona: {persona}\\n{prompt}'")
    p.add_argument("--system-prompt", metavar="T", help="a system turn before every prompt (a str.format template over the row's columns too)")
    p.add_argument("--split", help="dataset split, slices allowed: test, train[:100] (default: train)")
    p.add_argument("--subset", help="dataset configuration name (e.g. 'main' for gsm8k)")
    p.add_argument("--n", type=COUNT, metavar="N", help="use only the first N prompts (default: all)")

    s = p.add_argument_group("sampling")
    s.add_argument("--max-new-tokens", type=COUNT, default=256, help="tokens to generate at most per prompt (default: 256)")
    s.add_argument("--temperature", type=TEMPERATURE, default=0.0, help="0 = greedy, deterministic (default: 0)")
    s.add_argument("--top-p", type=TOP_P, default=1.0, help="nucleus sampling mass in (0, 1]; ignored when greedy (default: 1)")
    s.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")

    m = p.add_argument_group("images and video (vision-language models; read and placed as sft_vlm training does)")
    m.add_argument("--image-column", action="append", metavar="C", help="column with each row's image(s) (path, URL, s3://, data URI); repeat for several")
    m.add_argument("--video-column", action="append", metavar="C", help="column with each row's video; it is given to the model as sampled frames")
    m.add_argument("--max-image-pixels", type=COUNT, metavar="N", help="downscale larger images (and frames) to N pixels, keeping the aspect ratio")
    m.add_argument("--video-fps", type=SECONDS, metavar="F", help="frames sampled per second of video (default: the media loader's)")
    m.add_argument("--video-max-frames", type=COUNT, metavar="N", help="at most N frames per video, evenly spaced")
    m.add_argument("--media-timeout", type=SECONDS, metavar="S", help="seconds to connect to / between reads of a media download (default 30)")
    m.add_argument("--media-retries", type=NONNEGATIVE, metavar="N", help="extra attempts for a media download worth retrying (default 3)")

    add_engine_arguments(p)
    add_tool_arguments(p)

    p.add_argument("--out", metavar="FILE.jsonl", help="output file (default: generations.jsonl)")
    p.add_argument("--csv", action="store_true", help="also write the rows as CSV beside --out (same name, .csv)")
    add_recipe_arguments(p, "inference")
    p.set_defaults(func=run)


def run(args) -> int:
    import contextlib
    import csv
    import gc
    import json
    import sys
    import time
    from pathlib import Path

    from posttrain.errors import UserError
    from posttrain.generation.base import SamplingParams, check_params
    from posttrain.generation.engines import engine_kind, make_engine

    apply_recipe(args, "inference", "generate", {"model": "--model"}, exclusive=("prompts", "dataset"))
    if args.prompts is None and args.dataset is None:
        raise UserError("posttrain generate: --prompts or --dataset required (as a flag, or inference.prompts / inference.dataset in a recipe)")
    if args.out is None:
        args.out = "generations.jsonl"
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.seed)
    check_params(params)
    options = engine_options_per_model(args, {spec: engine_kind(spec) for spec in args.model})
    prompts, shown = load_prompts(args)
    out = Path(args.out)
    if args.csv and out.suffix == ".csv":
        raise UserError(f"--out {args.out}: with --csv the CSV goes beside the JSONL output; give --out a .jsonl name")
    csv_path = out.with_suffix(".csv") if args.csv else None
    toolbox = make_toolbox(args)
    fields = OUTPUT_FIELDS + (TOOL_OUTPUT_FIELDS if toolbox is not None else [])
    with contextlib.ExitStack() as files:
        if toolbox is not None:
            files.callback(toolbox.close)
        jsonl = csv_file = writer = None
        for spec in args.model:
            engine = with_tools(make_engine(spec, **options[spec]), toolbox, args)
            if jsonl is None:  # opened once the first model has loaded: a bad model spec writes nothing
                out.parent.mkdir(parents=True, exist_ok=True)
                jsonl = files.enter_context(out.open("w"))
                csv_file = files.enter_context(csv_path.open("w", newline="")) if csv_path else None
                writer = csv.DictWriter(csv_file, fields) if csv_file else None
                if writer:
                    writer.writeheader()
            for note in getattr(engine, "notes", []):
                print(f"{spec}: {note}", file=sys.stderr)
            start = time.perf_counter()
            completions = engine.generate(prompts, params)
            seconds = time.perf_counter() - start
            for i, (prompt, completion) in enumerate(zip(shown, completions)):
                row = output_row(engine.name, i, prompt, completion, params, tools=toolbox is not None)
                jsonl.write(json.dumps(row, ensure_ascii=False) + "\n")
                if writer:
                    writer.writerow({k: json.dumps(v, ensure_ascii=False) if isinstance(v, (list, dict)) else v for k, v in row.items()})
            for f in (jsonl, csv_file):
                if f:
                    f.flush()
            print(summary_line(engine.name, completions, seconds))
            del engine, completions  # free this model before the next one loads
            gc.collect()
    print(f"wrote {len(prompts) * len(args.model)} rows to {out}" + (f" and {csv_path}" if csv_path else ""))
    return 0


def load_prompts(args) -> tuple[list, list]:
    """(the prompts for the engines, the prompts as the output shows them), checked: each a non-empty string
    or a list of {role, content} messages. They are the same unless the rows' images and videos go in
    (--image-column / --video-column): then the engines get the decoded images and the output placeholders."""
    from pathlib import Path

    from posttrain.errors import UserError

    if args.n is not None and args.n < 1:
        raise UserError(f"--n must be at least 1, got {args.n}")
    if args.prompts is not None:
        path = Path(args.prompts).expanduser()
        if not path.is_file():
            raise UserError(f"--prompts: file {args.prompts!r} does not exist")
        if path.suffix == ".txt":
            where, values = f"--prompts {args.prompts}", [line for line in path.read_text().splitlines() if line.strip()]
            if args.prompt_column or getattr(args, "prompt_template", None) or getattr(args, "system_prompt", None):
                raise UserError(f"--prompt-column/--prompt-template/--system-prompt do not apply to a .txt prompts file ({args.prompts}): every line is a prompt")
        elif path.suffix == ".jsonl":
            where, rows = f"--prompts {args.prompts}", read_jsonl(path)
            values = templated_prompts(rows, args, where)
        else:
            raise UserError(f"--prompts {args.prompts}: expected a .jsonl or .txt file; for .json/.csv/.parquet use --dataset {args.prompts}")
    else:
        where, rows = f"--dataset {args.dataset}", dataset_rows(args)
        values = templated_prompts(rows, args, where)
    values = values[: args.n] if args.n else values
    if not values:
        raise UserError(f"{where}: no prompts found")
    for i, value in enumerate(values):
        if not is_prompt(value):
            raise UserError(f"{where}: prompt {i} is neither a non-empty string nor a list of {{'role', 'content'}} messages: {str(value)[:120]!r}")
    media = media_options(args)
    if media.any:
        if path_is_txt(args):
            raise UserError(f"--image-column/--video-column need rows with columns; {args.prompts} is a .txt file of prompts")
        from posttrain.data.vision import media_base_dir
        from posttrain.generation.media_prompts import attach_media

        return attach_media(rows, values, media, media_base_dir(args.prompts or args.dataset), where)
    unused = [flag for flag, value in media_flags(args).items() if value is not None]
    if unused:
        raise UserError(f"{', '.join(unused)} apply to images and videos: give --image-column or --video-column (or remove them)")
    return values, values


MEDIA_FLAGS = {"--max-image-pixels": "max_image_pixels", "--video-fps": "video_fps", "--video-max-frames": "video_max_frames",
               "--media-timeout": "media_timeout", "--media-retries": "media_retries"}


def media_flags(args) -> dict:
    return {flag: getattr(args, dest, None) for flag, dest in MEDIA_FLAGS.items()}


def path_is_txt(args) -> bool:
    return args.prompts is not None and str(args.prompts).endswith(".txt")


def media_options(args):
    from posttrain.errors import UserError
    from posttrain.generation.media_prompts import MediaOptions

    videos = getattr(args, "video_column", None) or []
    if not videos and (getattr(args, "video_fps", None) is not None or getattr(args, "video_max_frames", None) is not None):
        raise UserError("--video-fps/--video-max-frames sample videos: give --video-column (or remove them)")
    for flag, value, low in (("--max-image-pixels", getattr(args, "max_image_pixels", None), 1),
                             ("--video-max-frames", getattr(args, "video_max_frames", None), 1),
                             ("--media-retries", getattr(args, "media_retries", None), 0)):
        if value is not None and value < low:
            raise UserError(f"{flag} must be at least {low}, got {value}")
    for flag, value in (("--video-fps", getattr(args, "video_fps", None)), ("--media-timeout", getattr(args, "media_timeout", None))):
        if value is not None and value <= 0:
            raise UserError(f"{flag} must be above 0, got {value}")
    return MediaOptions(image_columns=list(getattr(args, "image_column", None) or []), video_columns=list(videos),
                        max_image_pixels=getattr(args, "max_image_pixels", None), video_fps=getattr(args, "video_fps", None),
                        video_max_frames=getattr(args, "video_max_frames", None), timeout_s=getattr(args, "media_timeout", None),
                        retries=getattr(args, "media_retries", None))


def templated_prompts(rows: list[dict], args, where: str) -> list:
    """Each row's prompt: its prompt column, or --prompt-template filled from its columns; --system-prompt adds a system turn."""
    from string import Formatter

    from posttrain.errors import UserError

    template, system = getattr(args, "prompt_template", None), getattr(args, "system_prompt", None)
    if template is not None and args.prompt_column:
        raise UserError("--prompt-template builds the prompt from columns and --prompt-column reads one column; give one")
    for flag, text in (("--prompt-template", template), ("--system-prompt", system)):
        if text is None:
            continue
        try:
            names = {f for _, f, _, _ in Formatter().parse(text) if f is not None}
        except ValueError as e:
            raise UserError(f"{flag}: not a valid str.format template ({e}); write literal braces as '{{{{' and '}}}}'") from None
        for i, row in enumerate(rows):
            absent = sorted(names - set(row))
            if absent:
                raise UserError(f"{where}: row {i} has no column {absent[0]!r} for {flag}; its columns are {sorted(row)}")
    prompts = [template.format(**row) for row in rows] if template is not None else column_values(rows, args.prompt_column, where)
    if system is None:
        return prompts
    turns = lambda p: p if isinstance(p, list) else [{"role": "user", "content": p}]  # noqa: E731
    return [[{"role": "system", "content": system.format(**row)}, *turns(p)] for row, p in zip(rows, prompts)]


def read_jsonl(path) -> list[dict]:
    import json

    from posttrain.errors import UserError

    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise UserError(f"--prompts {path}:{number}: not valid JSON ({e})") from None
        if not isinstance(row, dict):
            raise UserError(f"--prompts {path}:{number}: expected a JSON object per line, got {type(row).__name__}")
        rows.append(row)
    return rows


def dataset_rows(args) -> list[dict]:
    from posttrain.data.sources import read_rows

    rows = read_rows(args.dataset, "--dataset", subset=args.subset, split=args.split or "train")
    return rows[: args.n] if args.n else rows


def column_values(rows: list[dict], column: str | None, where: str) -> list:
    """The prompt column of every row; the error names the rows' columns when it is missing."""
    from posttrain.errors import UserError

    candidates = [column] if column else list(PROMPT_COLUMNS)
    for i, row in enumerate(rows):
        if not any(c in row for c in candidates):
            wanted = f"column {column!r}" if column else "a 'prompt' or 'messages' column"
            raise UserError(f"{where}: row {i} has no {wanted}; its columns are {sorted(row)} (choose one with --prompt-column)")
    return [next(row[c] for c in candidates if c in row) for row in rows]


def is_prompt(value) -> bool:
    if isinstance(value, str):
        return bool(value.strip())
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m and "content" in m for m in value)


def output_row(model: str, index: int, prompt, completion, params, tools: bool = False) -> dict:
    row = {
        "model": model, "index": index, "prompt": prompt, "completion": completion.text,
        "prompt_tokens": completion.prompt_tokens, "completion_tokens": completion.completion_tokens,
        "finish_reason": completion.finish_reason, "error": completion.error, "params": params.to_dict(),
    }
    if tools:  # every assistant turn, call and result after the prompt; the counts; an environment's reward
        row.update({k: completion.extra.get(k) for k in TOOL_OUTPUT_FIELDS})
    return row


def summary_line(model: str, completions, seconds: float) -> str:
    tokens = sum(c.completion_tokens or 0 for c in completions)
    errors = sum(c.error is not None for c in completions)
    return f"{model}: {len(completions)} completions, {tokens} tokens generated, {errors} errors, {seconds:.1f} s"

