"""The one place the vision data step reads media from.

Interim: until `posttrain.data.media` (remote media, cache, retries, videos) lands, this reads local
paths (relative to the data file), raw bytes, base64 / data URIs and `datasets` image cells with
pillow, with the same API and drop reasons, so the data step does not change when it switches.
"""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass
from pathlib import Path


@dataclass
class MediaSettings:
    max_image_pixels: int | None = None


class MediaError(Exception):
    """A media cell that cannot be read; `reason` is a short stable word (missing_file, corrupt, ...)."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


def _downscale(image, max_pixels: int | None):
    w, h = image.size
    if max_pixels is None or w * h <= max_pixels:
        return image
    scale = math.sqrt(max_pixels / (w * h))
    return image.resize((max(1, int(w * scale)), max(1, int(h * scale))))


def _open(data: bytes, what: str):
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except UnidentifiedImageError:
        raise MediaError("not_an_image", what) from None
    except (OSError, ValueError, SyntaxError) as e:
        raise MediaError("corrupt", f"{what}: {e}") from None
    return image.convert("RGB")


def load_images(cell, *, base_dir: Path, settings: MediaSettings) -> list:
    """One cell (an item or a list of items) -> RGB PIL images."""
    from PIL import Image

    items = cell if isinstance(cell, list) else [cell]
    out = []
    for item in items:
        if isinstance(item, Image.Image):
            image = item.convert("RGB")
        elif isinstance(item, dict) and ("bytes" in item or "path" in item):  # a datasets Image cell
            image = _open(item["bytes"], "embedded image") if item.get("bytes") else load_images(item["path"], base_dir=base_dir, settings=settings)[0]
        elif isinstance(item, bytes):
            image = _open(item, "image bytes")
        elif isinstance(item, str) and item.startswith("data:"):
            image = _open(base64.b64decode(item.split(",", 1)[1]), "data URI")
        elif isinstance(item, str) and item.startswith(("http://", "https://", "s3://")):
            raise MediaError("unsupported", f"{item}: remote images need posttrain.data.media")
        elif isinstance(item, str):
            path = Path(item).expanduser()
            path = path if path.is_absolute() else base_dir / path
            if not path.is_file():
                raise MediaError("missing_file", str(path))
            image = _open(path.read_bytes(), str(path))
        else:
            raise MediaError("not_an_image", f"a cell of type {type(item).__name__}")
        out.append(_downscale(image, settings.max_image_pixels))
    return out


def load_video_frames(cell, *, base_dir: Path, settings: MediaSettings, fps=None, max_frames=None) -> list:
    """Videos need posttrain.data.media's decoder; a list of image cells stands for a video's frames meanwhile."""
    if isinstance(cell, list):
        frames = load_images(cell, base_dir=base_dir, settings=settings)
        return frames[:max_frames] if max_frames else frames
    raise MediaError("unsupported", "video decoding needs posttrain.data.media")
