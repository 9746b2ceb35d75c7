"""Vision-language rows: text (prompt/completion, messages, a question/response pair mapped with
prompt_column/completion_column, or rows rendered from the dataset's str.format templates) plus the
images and video frames of `image_columns` / `video_columns`.

Each row becomes TRL's vision format: chat messages whose content is a list of parts
(`{"type": "text", "text": ...}` or `{"type": "image"}`) and an `images` column with the images in
the order their parts appear, which is how TRL's vision collator pairs them. Videos become their
sampled frames, one image part per frame: every processor takes images, while video processors
differ per family (and need torchvision), so frames are the one form all models read.

Where the images go: at the image placeholders of the text ('<image>' inside a string, or
`{"type": "image"}` parts), else before the text of the first user turn. '<video>' / `{"type":
"video"}` mark where a video's frames go, else they follow the images. A row whose placeholders do
not match its media (more or fewer), or whose media cannot be read, is dropped and counted by
reason, with its row index named in the report; a dataset left empty is an error naming the file.

Decoding: each row kept is decoded once here, so a bad file is found (and the row dropped and
counted) before training starts, then let go. What the dataset stores is a reference per row (the
dataset and row index, and where each image part's picture comes from), not pixels; the pictures
are decoded again for each batch that reads the row (`MediaDecoder`, a `datasets` transform), so
memory does not grow with the dataset. With `max_samples`, rows are read in a seeded random order
and reading stops once that many are kept: the rest are never decoded.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

from posttrain.errors import UserError

from .formats import ROLES, DataReport, _columns_for, check_template_columns, detect_format, hold_out, mix, render_row
from .sources import load_split
from .token_audit import ROW_COLUMN, SOURCE_COLUMN

IMAGE_MARK, VIDEO_MARK = "<image>", "<video>"
_MARKS = re.compile(f"({re.escape(IMAGE_MARK)}|{re.escape(VIDEO_MARK)})")


class DropRow(Exception):
    """A row that cannot train; `reason` is a short stable word for the counts."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason, detail)
        self.reason, self.detail = reason, detail


# --------------------------------------------------------------------------------- media access
def media_settings(data_cfg):
    """The media loader's settings for this recipe's data section."""
    from .media import MediaSettings

    given = {"timeout_s": data_cfg.media_timeout, "retries": data_cfg.media_retries}
    return MediaSettings(max_image_pixels=data_cfg.max_image_pixels, **{k: v for k, v in given.items() if v is not None})


def prefetch_urls(raw, spec, settings) -> None:
    """Download the columns' http(s) media 8 at a time before the rows are read one by one (each
    failure is then reported by its row as usual). Columns of the `datasets` Image feature hold
    bytes or local paths, and reading them whole would decode every image: they are skipped."""
    from .media import prefetch

    for kind, columns in (("image", spec.image_columns), ("video", spec.video_columns)):
        for column in columns:
            if "Image(" not in repr(raw.features[column]):
                prefetch(raw[column], kind=kind, settings=settings)


def row_media(record: dict, spec, base_dir: Path, data_cfg, settings) -> tuple[list, list[list]]:
    """(images, videos as frame lists) of one row, in column order; raises DropRow when one fails."""
    from .media import MediaError, load_images, load_video_frames

    images, videos = [], []
    try:
        for column in spec.image_columns:
            if record[column] is not None:
                images += load_images(record[column], base_dir=base_dir, settings=settings)
        for column in spec.video_columns:
            cell = record[column]
            for one in (cell if isinstance(cell, list) else [cell] if cell is not None else []):
                videos.append(load_video_frames(one, base_dir=base_dir, settings=settings, fps=data_cfg.video_fps,
                                                max_frames=data_cfg.video_max_frames))
    except MediaError as e:
        raise DropRow(e.reason, e.detail) from None
    return images, videos


# ------------------------------------------------------------------------------------ placement
def content_parts(content) -> list[dict]:
    """A message's content as a list of parts; '<image>'/'<video>' inside strings become parts."""
    if content is None:
        return []
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise DropRow("malformed_content", f"content of type {type(content).__name__}")
    parts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            for piece in _MARKS.split(part["text"]):
                if piece in (IMAGE_MARK, VIDEO_MARK):
                    parts.append({"type": piece[1:-1], "text": None})
                elif piece:
                    parts.append({"type": "text", "text": piece})
        elif kind in ("image", "video"):
            parts.append({"type": kind, "text": None})
        else:
            raise DropRow("malformed_content", f"content part {part!r}")
    return parts


def place_media(messages: list[dict], images: list, videos: list[list]) -> tuple[list[dict], list]:
    """Messages with one image part per image/frame, and the images in the order of those parts."""
    out, refs = place_media_refs(messages, images, videos)
    return out, pictures(refs, images, videos)


def pictures(refs: list, images: list, videos: list[list]) -> list:
    """The images `refs` names: [i] is images[i], [v, f] frame f of videos[v]."""
    return [images[r[0]] if len(r) == 1 else videos[r[0]][r[1]] for r in refs]


def place_media_refs(messages: list[dict], images: list, videos: list[list]) -> tuple[list[dict], list]:
    """Messages with one image part per image/frame, and for each part which picture it shows:
    [i] (images[i]) or [v, f] (frame f of videos[v]), in the order of the parts."""
    n_img = sum(p["type"] == "image" for m in messages for p in m["content"])
    n_vid = sum(p["type"] == "video" for m in messages for p in m["content"])
    if n_img and n_img != len(images):
        raise DropRow("image_placeholders_mismatch", f"{n_img} image placeholder(s) for {len(images)} image(s)")
    if n_vid and n_vid != len(videos):
        raise DropRow("video_placeholders_mismatch", f"{n_vid} video placeholder(s) for {len(videos)} video(s)")
    if not images and not videos:
        raise DropRow("no_media", "no image or video in the row")
    image = {"type": "image", "text": None}
    lead = ([image] * len(images) if not n_img else []) + ([image] * sum(map(len, videos)) if not n_vid else [])
    lead_media = ([[i] for i in range(len(images))] if not n_img else []) + (
        [[v, f] for v, frames in enumerate(videos) for f in range(len(frames))] if not n_vid else [])
    out, ordered, next_img, next_vid, placed_lead = [], [], 0, 0, False
    for m in messages:
        parts = []
        if m["role"] == "user" and not placed_lead:
            parts, placed_lead = list(lead), True
            ordered += lead_media
        for p in m["content"]:
            if p["type"] == "image":
                parts.append(image)
                ordered.append([next_img])
                next_img += 1
            elif p["type"] == "video":
                parts += [image] * len(videos[next_vid])
                ordered += [[next_vid, f] for f in range(len(videos[next_vid]))]
                next_vid += 1
            else:
                parts.append(p)
        out.append({"role": m["role"], "content": parts})
    if not placed_lead and lead:
        raise DropRow("no_user_turn", "no user turn to put the images in")
    if any(p["type"] == "image" for m in out if m["role"] != "user" for p in m["content"]):
        raise DropRow("image_outside_user_turn", "images are only read from user turns")
    return out, ordered


def chat_messages(row: dict, fmt: str) -> list[dict]:
    """The row (in TRL columns) as chat messages with content parts."""
    if fmt == "messages":
        msgs = row["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise DropRow("empty_messages")
        out = []
        for m in msgs:
            if not isinstance(m, dict) or m.get("role") not in ROLES:
                raise DropRow("invalid_role")
            out.append({"role": m["role"], "content": content_parts(m.get("content"))})
        if not any(m["role"] == "assistant" and _text(m) for m in out):
            raise DropRow("no_assistant_text")
        return out
    prompt, completion = row["prompt"], row["completion"]
    if not isinstance(prompt, str) or not isinstance(completion, str) or not completion.strip():
        raise DropRow("empty_or_non_text_prompt_completion")
    return [{"role": "user", "content": content_parts(prompt)}, {"role": "assistant", "content": content_parts(completion)}]


def template_messages(rendered: dict) -> list[dict]:
    """A row rendered from the dataset's str.format templates (`formats.render_row`) as chat messages
    with content parts. A text_template's text is one user turn, trained on whole (FAI-RL's flat
    mode: the model learns the rendered text, response included); prompt/completion templates make
    a user turn (after an optional system turn) and an assistant turn, trained on the assistant's."""
    if "text" in rendered:
        if not rendered["text"].strip():
            raise DropRow("empty_text_after_template")
        return [{"role": "user", "content": content_parts(rendered["text"])}]
    messages = [{"role": m["role"], "content": content_parts(m["content"])} for m in rendered["prompt"] + rendered["completion"]]
    if not _text(messages[-1]):
        raise DropRow("empty_completion_after_template")
    return messages


def _text(message: dict) -> str:
    return "".join(p["text"] for p in message["content"] if p["type"] == "text").strip()


# ----------------------------------------------------------------------------------- datasets
def prepare_vision_dataset(spec, key: str, data_cfg, seed: int, *, prompt_only: bool = False, decoder: "MediaDecoder | None" = None):
    """One dataset in TRL's vision format (its pictures decoded per access by `decoder`, a new
    MediaDecoder unless one is given), and its report.

    SFT rows: {messages, images} or {prompt, completion, images} (conversational). With
    `prompt_only` (GRPO), rows are {prompt (chat, after data.system_prompt if set), images, answer
    (from answer_column, for the rewards), every other column}.
    """
    import datasets

    raw = load_split(spec, key)
    decoder = decoder or MediaDecoder(data_cfg)
    decoder.add(key, raw, spec)
    missing = [c for c in spec.image_columns + spec.video_columns if c not in raw.column_names]
    if missing:
        which = "image_columns" if missing[0] in spec.image_columns else "video_columns"
        raise UserError(f"{key}.{which}: column {missing[0]!r} not found in {spec.name}; the data has columns {raw.column_names}.")
    if prompt_only and spec.answer_column not in raw.column_names:
        raise UserError(f"{key} ({spec.name}): column {spec.answer_column!r} not found; the data has columns {raw.column_names}. "
                        f"Map yours with {key}.answer_column=<column>.")
    templates = {} if prompt_only else spec.row_templates
    if templates:
        check_template_columns(templates, raw.column_names, key)
        fmt = "text" if "text_template" in templates else "prompt_completion"
    else:
        fmt = "prompt_completion" if prompt_only else detect_format(spec, raw.column_names)
    if not templates and fmt not in ("messages", "prompt_completion"):
        raise UserError(f"{key} ({spec.name}): vision-language rows need a chat ('{spec.messages_column}') or "
                        f"'{spec.prompt_column}'/'{spec.completion_column}' columns; found {raw.column_names}. "
                        f"Map yours with {key}.prompt_column / completion_column / messages_column.")
    mapping = {} if templates else _columns_for(spec, fmt)
    if prompt_only:
        mapping = {"prompt": spec.prompt_column}
    missing = [src for src in mapping.values() if src not in raw.column_names]
    if missing:
        raise UserError(f"{key} ({spec.name}): column {missing[0]!r} not found; the data has columns {raw.column_names}.")
    base_dir = media_base_dir(spec.name)
    settings = media_settings(data_cfg)
    reasons: Counter = Counter()
    rows_by_reason: dict[str, list[int]] = defaultdict(list)
    rows = []
    examined = 0
    for index, record in _candidates(raw, spec, seed, settings):
        if spec.max_samples is not None and len(rows) >= spec.max_samples:
            break
        examined += 1
        try:
            row = {trl: record[src] for trl, src in mapping.items()}
            if templates:
                messages = template_messages(render_row(templates, record))
            elif prompt_only:
                if not isinstance(row["prompt"], str) or not row["prompt"].strip():
                    raise DropRow("empty_prompt")
                messages = [{"role": "user", "content": content_parts(row["prompt"])}]
                if data_cfg.system_prompt:
                    messages.insert(0, {"role": "system", "content": content_parts(data_cfg.system_prompt)})
                if record[spec.answer_column] in (None, ""):
                    raise DropRow("empty_answer")
            else:
                messages = chat_messages(row, fmt)
            images, videos = row_media(record, spec, base_dir, data_cfg, settings)  # decoded once to find bad files
            messages, refs = place_media_refs(messages, images, videos)
            del images, videos  # the batches decode them again (MediaDecoder): nothing is kept
        except DropRow as e:
            reasons[e.reason] += 1
            rows_by_reason[e.reason].append(index)
            continue
        if prompt_only:
            media_cols = set(spec.image_columns + spec.video_columns + [spec.prompt_column])
            # TRL reads these names as the conversation: never pass them through as extra columns
            taken = ("prompt", "images", "image", "completion", "messages", "chosen", "rejected", "answer")
            extra = {k: v for k, v in record.items() if k not in media_cols and k not in taken}
        ref = json.dumps({"source": key, "row": index, "pictures": refs})
        if prompt_only:
            rows.append({**extra, "prompt": messages, "images": ref, "answer": str(record[spec.answer_column])})
        elif fmt in ("messages", "text"):
            rows.append({"messages": messages, "images": ref, SOURCE_COLUMN: key, ROW_COLUMN: index})
        else:
            rows.append({"prompt": messages[:-1], "completion": messages[-1:], "images": ref, SOURCE_COLUMN: key, ROW_COLUMN: index})
    report = DataReport(key, spec.name, f"{fmt}+images", examined, len(rows), reasons, dict(rows_by_reason),
                        rows_total=len(raw))
    if not rows:
        raise UserError(f"{key} ({spec.name}): no usable rows; {report.render().split(': ', 1)[1]}")
    return datasets.Dataset.from_list(rows).with_transform(decoder), report


def _candidates(raw, spec, seed: int, settings, chunk: int = 64):
    """(index, record) in the order rows are read: the file's, or with max_samples a seeded random
    one (reading stops once max_samples rows are kept). URLs are downloaded a chunk at a time, just
    ahead of the rows that need them."""
    import random

    order = list(range(len(raw)))
    if spec.max_samples is not None:
        random.Random(seed).shuffle(order)
    for start in range(0, len(order), chunk):
        part = order[start:start + chunk]
        prefetch_urls(raw.select(part), spec, settings)
        for index in part:
            yield index, raw[index]


class MediaDecoder:
    """A `datasets` transform: each batch's `images` column (references written by
    prepare_vision_dataset) becomes the decoded pictures, read again from the dataset row they came
    from. Deterministic: a video gives the frames it gave when its row was checked."""

    def __init__(self, data_cfg):
        self.data_cfg = data_cfg
        self.sources: dict[str, tuple] = {}  # dataset key -> (raw rows, spec, base_dir)

    def add(self, key: str, raw, spec) -> None:
        self.sources[key] = (raw, spec, media_base_dir(spec.name))

    def __call__(self, batch: dict) -> dict:
        if "images" in batch:
            batch = dict(batch)
            batch["images"] = [self.decode(ref) for ref in batch["images"]]
        return batch

    def decode(self, ref: str) -> list:
        found = json.loads(ref)
        raw, spec, base_dir = self.sources[found["source"]]
        try:
            images, videos = row_media(raw[found["row"]], spec, base_dir, self.data_cfg, media_settings(self.data_cfg))
        except DropRow as e:  # it decoded when the data was checked: the file changed since
            raise UserError(f"{found['source']} ({spec.name}) row {found['row']}: its media no longer reads ({e.reason}: "
                            f"{e.detail}); it did when training started. Restore the file, or restart the run.") from None
        return pictures(found["pictures"], images, videos)


def media_base_dir(name: str) -> Path:
    """Relative media paths are read from the data file's folder (the cache copy's for s3:// data)."""
    from posttrain.storage.location import is_s3_uri

    if is_s3_uri(name):
        from .sources import _local_copy

        return _local_copy(name).parent
    return Path(name).expanduser().resolve().parent


def prepare_vision_datasets(data_cfg, specs, key: str, seed: int, *, prompt_only: bool = False, decoder: MediaDecoder | None = None):
    parts, reports = [], []
    for i, spec in enumerate(specs):
        ds, report = prepare_vision_dataset(spec, f"{key}[{i}]", data_cfg, seed, prompt_only=prompt_only, decoder=decoder)
        parts.append(ds.with_format(None))  # mixed and split as references; decoded again at the end
        reports.append(report)
    formats = {r.format for r in reports}
    if len(formats) > 1:
        raise UserError(f"{key} mix formats ({', '.join(f'{r.key}: {r.format}' for r in reports)}); one run trains on one format.")
    if prompt_only:
        shared = sorted(set.intersection(*(set(p.column_names) for p in parts)))
        parts = [p.select_columns(shared) for p in parts]
    return mix(parts, specs, seed), reports[0].format, reports


def prepare_vision_data(data_cfg, seed: int, *, prompt_only: bool = False):
    """(train, format, reports, evaluation or None) for a vision-language run; the datasets decode
    their pictures per batch (MediaDecoder)."""
    decoder = MediaDecoder(data_cfg)
    train, fmt, reports = prepare_vision_datasets(data_cfg, data_cfg.datasets, "data.datasets", seed, prompt_only=prompt_only,
                                                  decoder=decoder)
    evaluation = None
    if data_cfg.eval_datasets:
        evaluation, eval_fmt, eval_reports = prepare_vision_datasets(data_cfg, data_cfg.eval_datasets, "data.eval_datasets", seed,
                                                                     prompt_only=prompt_only, decoder=decoder)
        if eval_fmt != fmt:
            raise UserError(f"data.eval_datasets are {eval_fmt!r} but the training data is {fmt!r}; evaluation data must have the training format.")
        reports += eval_reports
    train, evaluation = hold_out(train, evaluation, data_cfg.eval_fraction, seed)
    train = train.with_transform(decoder)
    evaluation = evaluation.with_transform(decoder) if evaluation is not None else None
    return train, fmt.split("+")[0], reports, evaluation
