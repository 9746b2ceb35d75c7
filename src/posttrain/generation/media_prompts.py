"""Images and videos of a dataset's rows put into `posttrain generate`'s prompts, as training puts them.

    posttrain generate --model runs/sft-vlm --dataset clips.csv --prompt-template '{question}' --video-column clip

Each row's `image_columns` and `video_columns` are read by the media loader training uses
(`posttrain.data.media`: local paths relative to the data file, http(s) with the shared retry rule,
s3://, data URIs, bytes), with the same settings (largest image, frames per video, download timeout
and retries), and placed by the same rule (`posttrain.data.vision.place_media`: at '<image>' /
'<video>' in the text, else before the first user turn's text; a video becomes its sampled frames,
one image each). A row whose media cannot be read is an error naming the row: a generation without
its image would be an answer to another question.

The prompts the engine gets hold the decoded images; the ones written to the output hold
`{"type": "image"}` placeholders where each image or frame went (the row's `index` names the row).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class MediaOptions:
    image_columns: list[str] = field(default_factory=list)
    video_columns: list[str] = field(default_factory=list)
    max_image_pixels: int | None = None
    video_fps: float | None = None
    video_max_frames: int | None = None
    timeout_s: float | None = None
    retries: int | None = None

    @property
    def any(self) -> bool:
        return bool(self.image_columns or self.video_columns)

    def settings(self):
        from posttrain.data.media import MediaSettings

        given = {"timeout_s": self.timeout_s, "retries": self.retries}
        return MediaSettings(max_image_pixels=self.max_image_pixels, **{k: v for k, v in given.items() if v is not None})


def attach_media(rows: list[dict], prompts: list, options: MediaOptions, base_dir: Path, where: str) -> tuple[list, list]:
    """(prompts with their rows' images as PIL image parts, the same prompts with placeholders for the output)."""
    from types import SimpleNamespace

    from posttrain.data.vision import DropRow, content_parts, place_media, row_media
    from posttrain.errors import UserError

    spec = SimpleNamespace(image_columns=list(options.image_columns), video_columns=list(options.video_columns))
    sampling = SimpleNamespace(video_fps=options.video_fps, video_max_frames=options.video_max_frames)
    settings = options.settings()
    engine_prompts, shown = [], []
    for i, (row, prompt) in enumerate(zip(rows, prompts)):
        missing = [c for c in spec.image_columns + spec.video_columns if c not in row]
        if missing:
            flag = "--image-column" if missing[0] in spec.image_columns else "--video-column"
            raise UserError(f"{where}: row {i} has no column {missing[0]!r} ({flag}); its columns are {sorted(row)}")
        chat = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        try:
            chat = [{"role": m["role"], "content": content_parts(m["content"])} for m in chat]
            images, videos = row_media(row, spec, base_dir, sampling, settings)
            placed, ordered = place_media(chat, images, videos)
        except DropRow as e:
            raise UserError(f"{where}: row {i}: its media cannot be used ({e.reason}{': ' + e.detail if e.detail else ''})") from None
        media = iter(ordered)
        engine_prompts.append([{"role": m["role"], "content": [
            {"type": "image", "image": next(media)} if p["type"] == "image" else {"type": "text", "text": p["text"]}
            for p in m["content"]]} for m in placed])
        shown.append([{"role": m["role"], "content": [
            {"type": "image"} if p["type"] == "image" else {"type": "text", "text": p["text"]} for p in m["content"]]} for m in placed])
    return engine_prompts, shown
