"""Images and video frames from dataset cells: local files, bytes, base64, parquet, URLs, s3://.

The API the data step, evaluation and generation use:

    from posttrain.data.media import (MediaError, MediaSettings, collect_media, load_images, load_video_frames,
                                      prefetch)

    settings = MediaSettings(max_image_pixels=512 * 512, timeout_s=30, retries=3)
    images = load_images(row["image"], base_dir=data_file.parent, settings=settings)  # list[PIL.Image]
    frames = load_video_frames(row["video"], base_dir=..., settings=settings, max_frames=8)

    try: ...
    except MediaError as e:        # one bad row: drop it, count e.reason, log e.detail with the row index
        drops[e.reason] += 1

    prefetch(dataset["image"], kind="image", settings=settings)   # URLs downloaded 8 at a time first

    # or all rows at once: bad rows dropped, logged with their index, counted by reason
    kept, media, drops = collect_media(dataset, source="data/train.jsonl", image_columns=["image"],
                                       base_dir=data_file.parent, settings=settings)
    print(drops.summary())         # "dropped 2 of 50 rows of data/train.jsonl whose media failed: 2 http_404"

A cell is one item or a list of items (nested lists are flattened, in order; None or [] gives no
images). An item may be:

- a `PIL.Image.Image` (what `datasets` gives for a decoded Image feature);
- raw bytes (`bytes`, `bytearray`, `memoryview`);
- a dict like the `datasets` Image feature stores it, ``{"bytes": b"..." | None, "path": "..." | None}``
  (how images embedded in parquet arrive); bytes win over the path;
- a string:
  - ``data:image/png;base64,...`` (a data URI);
  - ``http://...`` / ``https://...``: fetched through posttrain's shared HTTP client with retries,
    then kept in the per-machine cache (below);
  - ``s3://bucket/key``: through posttrain's s3:// cache (`posttrain.storage.cache`);
  - a local path, absolute or relative to ``base_dir`` (the data file's folder), ``~`` expanded,
    or a ``file://`` URI;
  - otherwise, a string of 64+ base64 characters is decoded as raw base64 (a short or dotted
    string is always a path, so a missing ``img/a.png`` says missing_file, not corrupt).

Images come back fully decoded in RGB (transparency composited on white: what processors expect),
shrunk to at most ``max_image_pixels`` pixels (width x height) keeping the aspect ratio.

Failures raise `MediaError(reason, detail)`; ``reason`` is a stable word to count drops by:
missing_file, http_404, http_error (other statuses, after retries for 408/429/5xx), timeout,
connection (refused, reset, an answer cut short, after retries), too_large (more than
``max_bytes`` to download, or beyond PIL's decompression-bomb limit), corrupt (truncated or
undecodable image/video bytes), not_an_image, not_a_video, s3_error, bad_cell (a value of a type
that cannot hold media, such as a number). Configuration problems (PyAV missing for videos) raise
`posttrain.errors.UserError` instead: they are not about one row.

Remote cache (http/https; s3:// has its own, same rules): ``<cache_dir>/<sha256 of URL>`` where
cache_dir defaults to ``$POSTTRAIN_CACHE/media``. A file appears only complete (written to a
temporary sibling, then renamed: atomic on one filesystem) and only after it decoded once, so an
error page served with status 200 is never cached. Processes share the cache; a striped flock
(256 lock files) makes concurrent processes wanting the same URL download it once. URLs are
assumed immutable, like s3:// URIs: delete the file to fetch again.

Videos are decoded with PyAV (``pip install 'posttrain[video]'``): maintained bindings to FFmpeg's
libraries shipped as self-contained wheels (no system ffmpeg), which read every container and codec
FFmpeg does, from a path or from memory, and give exact presentation timestamps. decord (what some
VLM scripts use) has had no release since 2022 and no wheels for current Pythons; torchvision's
video reader is deprecated in favour of torchcodec, which needs a matching system FFmpeg and torch
build. Frames are chosen from the presentation timestamps of the whole stream (one cheap demux pass,
no decoding), then decoded in a single sequential pass.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import io
import math
import os
import re
import tempfile
import threading
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posttrain.errors import UserError

REASONS = ("missing_file", "http_404", "http_error", "timeout", "connection", "too_large", "corrupt", "not_an_image",
           "not_a_video", "s3_error", "bad_cell")
_IMAGE_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"BM", b"II*\x00", b"MM\x00*")  # PNG JPEG GIF BMP TIFF
_BASE64 = re.compile(r"[A-Za-z0-9+/_\-\s]+={0,2}\s*")


class MediaError(Exception):
    """One media item could not be loaded; ``reason`` (one of REASONS) is for counting, ``detail``
    (naming the item) is for the log."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


@dataclass(frozen=True)
class MediaSettings:
    """max_image_pixels: width x height above which an image (or frame) is shrunk, keeping its
    aspect ratio (None: never). timeout_s: seconds to connect / between reads of a download.
    retries: extra attempts for a download that failed in a way worth retrying (timeouts,
    connection errors, 408/429/5xx). backoff_s: seconds, base of the exponential wait between them.
    cache_dir: where downloaded media are kept (None: $POSTTRAIN_CACHE/media). max_bytes: largest
    download accepted."""

    max_image_pixels: int | None = None
    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 0.5
    cache_dir: str | Path | None = None
    max_bytes: int = 512 * 1024 * 1024

    def __post_init__(self):
        if self.max_image_pixels is not None and self.max_image_pixels < 1:
            raise ValueError(f"max_image_pixels must be a positive number of pixels, got {self.max_image_pixels}")
        if self.timeout_s <= 0 or self.retries < 0 or self.backoff_s < 0:
            raise ValueError(f"MediaSettings needs timeout_s > 0, retries >= 0, backoff_s >= 0; got {self}")


DEFAULT_SETTINGS = MediaSettings()


# ---- public API -------------------------------------------------------------------------------

def load_images(cell: Any, *, base_dir: str | Path | None = None,
                settings: MediaSettings = DEFAULT_SETTINGS) -> list:
    """Every image in ``cell`` (one item or a list; see the module docstring) as RGB PIL images."""
    return [_image(item, base_dir, settings) for item in _items(cell)]


def load_video_frames(cell: Any, *, base_dir: str | Path | None = None, settings: MediaSettings = DEFAULT_SETTINGS,
                      fps: float | None = None, max_frames: int | None = None) -> list:
    """Frames sampled from the video(s) in ``cell``, in order, as RGB PIL images.

    fps: frames per second of video to keep (the first frame at or after each 1/fps step).
    max_frames: at most this many frames per video, evenly spread over the kept ones (or over the
    whole video when fps is None). Neither given: 1 frame per second.
    """
    if fps is not None and not fps > 0:
        raise ValueError(f"fps must be > 0, got {fps}")
    if max_frames is not None and max_frames < 1:
        raise ValueError(f"max_frames must be >= 1, got {max_frames}")
    if fps is None and max_frames is None:
        fps = 1.0
    frames = []
    for item in _items(cell):
        frames += _video_frames(item, base_dir, settings, fps, max_frames)
    return frames


@dataclass
class MediaDrops:
    """Rows dropped because their media failed, counted by reason, for the log and the summary."""

    source: str
    total: int = 0
    by_reason: dict = field(default_factory=dict)
    rows: list = field(default_factory=list)  # (row index, "column: reason: detail"), all of them

    def add(self, index: int, column: str, error: MediaError) -> None:
        self.by_reason[error.reason] = self.by_reason.get(error.reason, 0) + 1
        self.rows.append((index, f"{column}: {error}"))

    def summary(self) -> str:
        """e.g. "dropped 3 of 50 rows of data/train.jsonl: 2 http_404, 1 corrupt"."""
        if not self.rows:
            return f"all {self.total} rows of {self.source} have their media"
        reasons = ", ".join(f"{n} {r}" for r, n in sorted(self.by_reason.items(), key=lambda kv: (-kv[1], kv[0])))
        return f"dropped {len(self.rows)} of {self.total} rows of {self.source} whose media failed: {reasons}"


def collect_media(rows, *, source: str, image_columns=(), video_columns=(), base_dir: str | Path | None = None,
                  settings: MediaSettings = DEFAULT_SETTINGS, fps: float | None = None, max_frames: int | None = None,
                  logger=None) -> tuple[list[int], list[dict], MediaDrops]:
    """Load every row's media: (indices of the rows kept, their media, the drops).

    ``rows``: dicts (a `datasets.Dataset` iterates as such). Each kept row's media is
    ``{"images": [PIL, ...] (all image columns, in column order), "videos": [[frames of one video], ...]}``.
    A row whose media fail is dropped and logged (WARNING, with its index and reason) on ``logger``
    (default: posttrain.data). Raises UserError when a column is missing (naming the columns there
    are) and when no row is left (naming ``source``, with the reasons).
    """
    import difflib
    import logging

    log = logger or logging.getLogger("posttrain.data")
    drops = MediaDrops(source)
    kept, media = [], []
    for index, row in enumerate(rows):
        if index == 0:
            for column in [*image_columns, *video_columns]:
                if column not in row:
                    close = difflib.get_close_matches(column, list(row), n=1)
                    hint = f" Did you mean {close[0]!r}?" if close else ""
                    raise UserError(f"{source}: no column {column!r} for media.{hint} Its columns: {', '.join(row)}")
        drops.total += 1
        try:
            images, videos = [], []
            column = ""
            for column in image_columns:
                images += load_images(row[column], base_dir=base_dir, settings=settings)
            for column in video_columns:
                for item in _items(row[column]):
                    videos.append(load_video_frames(item, base_dir=base_dir, settings=settings, fps=fps,
                                                    max_frames=max_frames))
        except MediaError as e:
            drops.add(index, column, e)
            log.warning("%s row %d dropped: %s: %s", source, index, column, e)
            continue
        kept.append(index)
        media.append({"images": images, "videos": videos})
    if drops.rows:
        log.warning("%s", drops.summary())
    if not kept:
        why = f" ({drops.summary()}; first: row {drops.rows[0][0]}, {drops.rows[0][1]})" if drops.rows else ""
        raise UserError(f"{source}: no row left with usable media{why}; check the paths/URLs and base folder "
                        f"{base_dir}")
    return kept, media, drops


def prefetch(cells, *, kind: str = "image", settings: MediaSettings = DEFAULT_SETTINGS,
             max_workers: int = 8) -> dict[str, MediaError]:
    """Download the http(s) media among ``cells`` into the cache, ``max_workers`` at a time.

    Loading rows one by one waits for each URL in turn; calling this first over a whole column
    overlaps those waits. ``kind`` ("image" or "video") picks the check a download must pass before
    it is cached. Returns {url: MediaError} for the URLs that failed; the next load of such a URL in
    this process raises that same error at once instead of waiting through its retries again (once:
    a later load tries the network again).
    """
    if kind not in ("image", "video"):
        raise ValueError(f"kind must be 'image' or 'video', got {kind!r}")
    if kind == "video":
        av = _require_av()
        validate = lambda data: _video_times(av, data, "download")  # noqa: E731
    else:
        validate = lambda data: _decode(data, "download", settings)  # noqa: E731
    urls = []
    for cell in cells:
        for item in _items(cell):
            url = item.get("path") if isinstance(item, dict) and item.get("bytes") is None else item
            if isinstance(url, str) and url.strip()[:8].lower().startswith(("http://", "https://")):
                url = url.strip()
                if url not in urls and not cache_path(url, settings).is_file():
                    urls.append(url)
    failures: dict[str, MediaError] = {}
    if not urls:
        return failures
    from concurrent.futures import ThreadPoolExecutor

    def fetch(url: str) -> None:
        try:
            _remote(url, settings, validate)
        except MediaError as e:
            failures[url] = e
            with _failures_lock:
                _prefetch_failures[cache_path(url, settings)] = e

    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(urls)))) as pool:
        list(pool.map(fetch, urls))
    return failures


def cache_path(url: str, settings: MediaSettings = DEFAULT_SETTINGS) -> Path:
    """Where the download of ``url`` is (or will be) cached."""
    return _cache_root(settings) / hashlib.sha256(url.encode()).hexdigest()


# ---- cells to bytes or paths --------------------------------------------------------------------

def _items(cell: Any) -> list:
    if cell is None:
        return []
    if isinstance(cell, (list, tuple)):
        out = []
        for item in cell:
            out += _items(item)
        return out
    return [cell]


def _name(item: Any) -> str:
    """A short description of an item for messages (never dumps a whole base64 string or bytes)."""
    if isinstance(item, (bytes, bytearray, memoryview)):
        return f"<{len(item)} bytes>"
    if isinstance(item, dict):
        return f"<image dict path={item.get('path')!r}>"
    if isinstance(item, str):
        if item.startswith("data:"):
            return f"<data URI, {len(item)} characters>"
        return item if len(item) <= 200 else f"<string of {len(item)} characters>"
    return f"<{type(item).__name__}>"


def _source(item: Any, base_dir, settings: MediaSettings, validate) -> bytes | Path:
    """The bytes of ``item`` or a local path holding them (remote items are fetched and cached;
    ``validate(bytes)`` must pass before a download is cached)."""
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    if isinstance(item, dict) and ("bytes" in item or "path" in item):
        if item.get("bytes") is not None:
            return _source(item["bytes"], base_dir, settings, validate)
        if item.get("path"):
            return _source(item["path"], base_dir, settings, validate)
        raise MediaError("bad_cell", "an image dict with neither bytes nor path")
    if not isinstance(item, str):
        raise MediaError("bad_cell", f"a {type(item).__name__} cannot hold an image or video (expected a path, URL, "
                                     f"bytes, base64 or an Image dict)")
    text = item.strip()
    if text.startswith("data:"):
        header, _, payload = text.partition(",")
        if ";base64" not in header:
            raise MediaError("corrupt", f"{_name(item)}: only base64 data URIs are supported")
        return _b64(payload, item)
    lowered = text[:8].lower()
    if lowered.startswith(("http://", "https://")):
        return _remote(text, settings, validate)
    if lowered.startswith("s3://"):
        return _s3(text, settings)
    if lowered.startswith("file://"):
        text = urllib.parse.unquote(text[7:])
    path = Path(text).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    if _exists(path, "file"):
        return path
    if _exists(path, "any"):  # before the base64 test: a long folder path without dots matches its alphabet
        raise MediaError("missing_file", f"{path} is not a file")
    if len(text) >= 64 and "." not in text and _BASE64.fullmatch(text):
        return _b64(text, item)
    raise MediaError("missing_file", f"{path if len(text) < 1024 else _name(item)} does not exist")


def _exists(path: Path, kind: str) -> bool:
    """path.is_file() / exists() that says False for names the OS refuses (too long, NUL bytes)."""
    try:
        return path.is_file() if kind == "file" else path.exists()
    except (OSError, ValueError):
        return False


def _b64(payload: str, item) -> bytes:
    try:
        clean = "".join(payload.split())
        return base64.b64decode(clean + "=" * (-len(clean) % 4), altchars=b"-_" if ("-" in clean or "_" in clean) else None,
                                validate=True)
    except (binascii.Error, ValueError) as e:
        raise MediaError("corrupt", f"{_name(item)}: not valid base64 ({e})") from None


def _s3(uri: str, settings: MediaSettings) -> Path:
    from posttrain.storage.cache import cached_download
    from posttrain.storage.errors import describe

    try:
        path = cached_download(uri, retries=settings.retries, backoff=settings.backoff_s)
    except Exception as e:  # StorageError, botocore errors (described without secrets), a bad URI
        raise MediaError("s3_error", f"{uri}: {describe(e)}") from None
    if not path.is_file():
        raise MediaError("s3_error", f"{uri} is a folder of objects, not one image or video")
    return path


# ---- remote media: fetch with retries, cache atomically -------------------------------------------

def _cache_root(settings: MediaSettings) -> Path:
    if settings.cache_dir is not None:
        return Path(settings.cache_dir)
    return Path(os.environ.get("POSTTRAIN_CACHE") or "~/.cache/posttrain").expanduser() / "media"


_prefetch_failures: dict[Path, MediaError] = {}  # failures `prefetch` saw, reported once by the next load
_failures_lock = threading.Lock()


def _remote(url: str, settings: MediaSettings, validate) -> Path | bytes:
    entry = cache_path(url, settings)
    if entry.is_file():
        return entry
    with _failures_lock:
        known = _prefetch_failures.pop(entry, None)
    if known is not None:
        raise known
    entry.parent.mkdir(parents=True, exist_ok=True)
    with _striped_lock(entry):
        if entry.is_file():  # another process fetched it while we waited
            return entry
        data = _download(url, settings)
        validate(data)  # raises MediaError: an error page or a broken file is never cached
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=f".{entry.name}.partial-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)
            os.replace(tmp, entry)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    return entry


def _download(url: str, settings: MediaSettings) -> bytes:
    from posttrain.net.http import HTTPStatusError, TransportError, is_retryable, retry_after_of, send
    from posttrain.net.retry import RetryPolicy, call_with_retries

    policy = RetryPolicy(retries=settings.retries, backoff=settings.backoff_s)
    try:
        return call_with_retries(lambda: send("GET", url, timeout=settings.timeout_s, max_bytes=settings.max_bytes).content,
                                 policy=policy, retryable=is_retryable, retry_after=retry_after_of,
                                 what=f"download of {url}")
    except HTTPStatusError as e:
        reason = "http_404" if e.status in (404, 410) else "http_error"
        raise MediaError(reason, f"{url}: HTTP {e.status}") from None
    except TransportError as e:
        reason = {"timeout": "timeout", "too_large": "too_large"}.get(e.kind, "connection")
        raise MediaError(reason, f"{url}: {e.detail}") from None


@contextlib.contextmanager
def _striped_lock(entry: Path):
    """An exclusive flock shared by the URLs whose hash starts with the same two hex digits."""
    import fcntl

    locks = entry.parent / ".locks"
    locks.mkdir(exist_ok=True)
    with open(locks / f"{entry.name[:2]}.lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# ---- images -------------------------------------------------------------------------------------

def _image(item: Any, base_dir, settings: MediaSettings):
    from PIL import Image

    if isinstance(item, Image.Image):  # datasets may hand over a lazily decoded image: decode it now
        try:
            item.load()
        except (OSError, SyntaxError, ValueError, EOFError) as e:
            raise MediaError("corrupt", f"an image that cannot be decoded ({type(e).__name__}: {e})") from None
        return _finish(item, settings)
    if hasattr(item, "__array_interface__"):  # a numpy array (H, W[, C])
        try:
            return _finish(Image.fromarray(item), settings)
        except (TypeError, ValueError) as e:
            raise MediaError("bad_cell", f"an array of shape {getattr(item, 'shape', '?')} is not an image: {e}") from None
    source = _source(item, base_dir, settings, validate=lambda data: _decode(data, _name(item), settings))
    return _decode(source, _name(item), settings)


def _decode(source: bytes | Path, name: str, settings: MediaSettings):
    """A fully decoded RGB image from bytes or a file, shrunk to max_image_pixels."""
    from PIL import Image, UnidentifiedImageError

    try:
        with (open(source, "rb") if isinstance(source, Path) else contextlib.nullcontext(io.BytesIO(source))) as f:
            image = Image.open(f)
            if settings.max_image_pixels and image.width * image.height > settings.max_image_pixels:
                scale = math.sqrt(settings.max_image_pixels / (image.width * image.height))
                image.draft("RGB", (max(1, int(image.width * scale)), max(1, int(image.height * scale))))  # JPEG: decode small
            image.load()  # decode everything now: truncated data fails here, not in a training step
    except FileNotFoundError:
        raise MediaError("missing_file", f"{name} does not exist") from None
    except UnidentifiedImageError:
        head = source.read_bytes()[:16] if isinstance(source, Path) else source[:16]
        if head.startswith(_IMAGE_MAGIC) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP"):
            raise MediaError("corrupt", f"{name}: starts like an image but cannot be read (cut short?)") from None
        raise MediaError("not_an_image", f"{name}: not an image format PIL can read") from None
    except Image.DecompressionBombError as e:
        raise MediaError("too_large", f"{name}: {e}") from None
    except (OSError, SyntaxError, ValueError, EOFError) as e:  # PIL's "truncated", "broken data stream", ...
        raise MediaError("corrupt", f"{name}: cannot decode ({type(e).__name__}: {e})") from None
    return _finish(image, settings)


def _finish(image, settings: MediaSettings):
    """RGB (transparency on white), at most max_image_pixels pixels, aspect ratio kept."""
    from PIL import Image

    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        image = Image.alpha_composite(background, rgba).convert("RGB")
    elif image.mode != "RGB":
        image = image.convert("RGB")
    limit = settings.max_image_pixels
    if limit and image.width * image.height > limit:
        w, h = shrunk_size(image.width, image.height, limit)
        image = image.resize((w, h), Image.Resampling.BICUBIC, reducing_gap=3.0)
    return image


def shrunk_size(width: int, height: int, max_pixels: int) -> tuple[int, int]:
    """The largest (w, h) with w * h <= max_pixels and w / h as close to width / height as rounding
    allows (each side at least 1).

    >>> shrunk_size(4000, 3000, 1_000_000)
    (1154, 866)
    """
    scale = math.sqrt(max_pixels / (width * height))
    w, h = max(1, math.floor(width * scale)), max(1, math.floor(height * scale))
    while w * h > max_pixels and (w > 1 or h > 1):  # floating-point edge cases
        if w >= h:
            w -= 1
        else:
            h -= 1
    return w, h


# ---- videos -------------------------------------------------------------------------------------

def _require_av():
    try:
        import av
    except ImportError:
        raise UserError("video columns need PyAV, which is not installed: pip install 'posttrain[video]' "
                        "(or pip install av)") from None
    return av


def _video_frames(item: Any, base_dir, settings: MediaSettings, fps, max_frames) -> list:
    av = _require_av()
    name = _name(item)
    source = _source(item, base_dir, settings, validate=lambda data: _video_times(av, data, name))
    times = _video_times(av, source, name)
    wanted = _choose(times, fps, max_frames)
    frames = _decode_frames(av, source, name, {times[i][1] for i in wanted})
    return [_finish(f, settings) for f in frames]


def _open(av, source: bytes | Path, name: str):
    try:
        return av.open(str(source) if isinstance(source, Path) else io.BytesIO(source), mode="r")
    except FileNotFoundError:
        raise MediaError("missing_file", f"{name} does not exist") from None
    except av.error.InvalidDataError:
        raise MediaError("not_a_video", f"{name}: not a container FFmpeg can read") from None
    except (av.error.FFmpegError, OSError) as e:
        raise MediaError("corrupt", f"{name}: cannot open ({e})") from None


def _video_times(av, source: bytes | Path, name: str) -> list[tuple[float, int]]:
    """(seconds, pts) of every frame of the first video stream, in presentation order, from a
    demux pass (packets are read, not decoded)."""
    with _open(av, source, name) as container:
        if not container.streams.video:
            raise MediaError("not_a_video", f"{name} has no video stream")
        stream = container.streams.video[0]
        base = stream.time_base
        try:
            pts = sorted(p.pts for p in container.demux(stream) if p.pts is not None and p.size > 0)
        except av.error.FFmpegError as e:
            raise MediaError("corrupt", f"{name}: cannot read the video ({e})") from None
    if not pts:
        raise MediaError("corrupt", f"{name}: the video stream holds no frames")
    start = pts[0]
    return [(float((p - start) * base), p) for p in pts]


def _choose(times: list[tuple[float, int]], fps: float | None, max_frames: int | None) -> list[int]:
    """Indices into ``times``: the first frame at or after each 1/fps step, then at most max_frames
    of those spread evenly (first and last kept)."""
    candidates = list(range(len(times)))
    if fps is not None:
        chosen, step, target = [], 1.0 / fps, 0.0
        for i, (t, _) in enumerate(times):
            if t + 1e-9 >= target:
                chosen.append(i)
                target = (math.floor(t * fps + 1e-9) + 1) * step
        candidates = chosen
    if max_frames is not None and len(candidates) > max_frames:
        if max_frames == 1:
            candidates = [candidates[0]]
        else:
            n = len(candidates) - 1
            candidates = [candidates[round(k * n / (max_frames - 1))] for k in range(max_frames)]
    return candidates


def _decode_frames(av, source: bytes | Path, name: str, wanted_pts: set[int]) -> list:
    frames = []
    with _open(av, source, name) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        try:
            for frame in container.decode(stream):
                if frame.pts in wanted_pts:
                    frames.append(frame.to_image())
                    if len(frames) == len(wanted_pts):
                        break
        except av.error.FFmpegError as e:
            raise MediaError("corrupt", f"{name}: cannot decode the video ({e})") from None
    if len(frames) < len(wanted_pts):
        raise MediaError("corrupt", f"{name}: {len(wanted_pts) - len(frames)} of the chosen frames could not be decoded")
    return frames
