"""Media cells to PIL images: every accepted form, every bad input as a MediaError with its reason,
remote media through a real HTTP server on 127.0.0.1 (retries, 404, timeout, cache), parquet-embedded
images, and video frames sampled from a video made here with PyAV."""

from __future__ import annotations

import base64
import io
import subprocess
import sys
import time

import pytest
from PIL import Image

from posttrain.data.media import (MediaError, MediaSettings, cache_path, collect_media, load_images, load_video_frames, prefetch,
                                  shrunk_size)
from posttrain.errors import UserError


def png(color=(200, 30, 40), size=(8, 6), mode="RGB") -> bytes:
    buf = io.BytesIO()
    Image.new(mode, size, color).save(buf, format="PNG")
    return buf.getvalue()


def pixels(image) -> tuple:
    return image.size, image.getpixel((0, 0))


@pytest.fixture
def settings(tmp_path):
    return MediaSettings(timeout_s=2, retries=2, backoff_s=0.01, cache_dir=tmp_path / "media-cache")


def reason(cell, **kw) -> str:
    with pytest.raises(MediaError) as e:
        load_images(cell, **kw)
    return e.value.reason


def test_every_local_form_gives_the_same_image(tmp_path, settings):
    data = png()
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.png").write_bytes(data)
    b64 = base64.b64encode(data).decode()
    import numpy as np

    cell = ["imgs/a.png", str(tmp_path / "imgs" / "a.png"), data, bytearray(data), b64,
            f"data:image/png;base64,{b64}", {"bytes": data, "path": "ignored.png"}, {"bytes": None, "path": "imgs/a.png"},
            Image.open(io.BytesIO(data)), np.asarray(Image.open(io.BytesIO(data))), [["imgs/a.png"]],
            (tmp_path / "imgs" / "a.png").as_uri()]
    images = load_images(cell, base_dir=tmp_path, settings=settings)
    assert len(images) == 12
    assert {pixels(im) for im in images} == {((8, 6), (200, 30, 40))} and {im.mode for im in images} == {"RGB"}
    assert load_images(None, base_dir=tmp_path) == [] and load_images([], base_dir=tmp_path) == []


def test_transparency_is_composited_on_white_and_grey_becomes_rgb(settings):
    assert load_images(png((0, 0, 0, 0), mode="RGBA"), settings=settings)[0].getpixel((0, 0)) == (255, 255, 255)
    assert load_images(png(77, mode="L"), settings=settings)[0].getpixel((0, 0)) == (77, 77, 77)


def test_bad_local_inputs_have_reasons(tmp_path, settings):
    (tmp_path / "notes.txt").write_text("not an image at all\n" * 10)
    good = png(size=(64, 64))
    (tmp_path / "half.png").write_bytes(good[: len(good) // 2])
    jpeg = io.BytesIO()
    Image.new("RGB", (64, 64), (1, 2, 3)).save(jpeg, format="JPEG")
    broken_jpeg = jpeg.getvalue()[:200] + b"\x00" * 50 + jpeg.getvalue()[250:300]
    kw = dict(base_dir=tmp_path, settings=settings)
    assert reason("missing/a.png", **kw) == "missing_file"
    assert reason(str(tmp_path), **kw) == "missing_file"  # a folder
    (tmp_path / ("folder" * 12)).mkdir()  # a long name without dots looks like base64 too (pytest-xdist's paths did)
    assert reason("folder" * 12, **kw) == "missing_file"
    assert reason("notes.txt", **kw) == "not_an_image"
    assert reason("half.png", **kw) == "corrupt"
    assert reason(good[:40], **kw) == "corrupt"
    assert reason(broken_jpeg, **kw) == "corrupt"
    assert reason("data:image/png;base64,@@@@", **kw) == "corrupt"
    assert reason(Image.open(io.BytesIO(good[: len(good) // 2])), **kw) == "corrupt"  # a lazily decoded PIL image
    assert reason(42, **kw) == "bad_cell" and reason({"bytes": None, "path": None}, **kw) == "bad_cell"
    assert reason("A" * 5000, **kw) in ("corrupt", "not_an_image")  # long base64 that is no image
    assert reason("x" * 300 + ".png", **kw) == "missing_file"  # a name longer than the OS allows
    with pytest.raises(MediaError) as e:
        load_images(["imgs/ok.png", "missing/b.png"], **kw)
    assert "missing/b.png" in e.value.detail or "ok.png" in e.value.detail


def test_max_image_pixels_shrinks_keeping_the_aspect_ratio(settings):
    big = png(size=(400, 100))
    small = MediaSettings(max_image_pixels=10_000)
    (image,) = load_images(big, settings=small)
    assert image.size == (200, 50)
    assert load_images(png(size=(50, 50)), settings=small)[0].size == (50, 50)  # under the limit: untouched
    jpeg = io.BytesIO()
    Image.new("RGB", (1600, 1200), (10, 200, 10)).save(jpeg, format="JPEG")
    (photo,) = load_images(jpeg.getvalue(), settings=MediaSettings(max_image_pixels=40_000))
    assert photo.size == (230, 173) and photo.width * photo.height <= 40_000
    for w, h, limit in [(4000, 3000, 1_000_000), (1, 10_000, 50), (10_000, 1, 50), (3, 3, 8), (7919, 13, 1000)]:
        sw, sh = shrunk_size(w, h, limit)
        assert sw * sh <= limit and sw >= 1 and sh >= 1
        assert abs(sw / sh - w / h) / (w / h) < 0.35 or min(sw, sh) == 1


def test_http_images_404_retries_and_the_cache(http_server, settings):
    server = http_server({"/a.png": png(), "/b.png": png((1, 2, 3))})
    server.script["/a.png"] = [("status", 503, {}), ("status", 503, {})]
    (image,) = load_images(server.url + "/a.png", settings=settings)
    assert pixels(image) == ((8, 6), (200, 30, 40)) and server.count("/a.png") == 3
    assert cache_path(server.url + "/a.png", settings).read_bytes() == png()
    load_images([server.url + "/a.png"] * 3, settings=settings)
    assert server.count("/a.png") == 3  # cached: no new request
    assert reason(server.url + "/missing.png", settings=settings) == "http_404"
    assert server.count("/missing.png") == 1  # a 404 is not retried
    server.script["/b.png"] = [("status", 500, {})] * 3
    assert reason(server.url + "/b.png", settings=settings) == "http_error"
    assert server.count("/b.png") == 3 and not cache_path(server.url + "/b.png", settings).exists()
    assert pixels(load_images(server.url + "/b.png", settings=settings)[0])[1] == (1, 2, 3)  # a later run gets it


def test_http_truncated_transfers_and_bad_bodies(http_server, settings):
    data = png(size=(64, 64))
    server = http_server({"/a.png": data, "/page.png": b"<html>rate limited</html>"})
    server.script["/a.png"] = [("truncate", data), ("truncate", data)]
    assert load_images(server.url + "/a.png", settings=settings)[0].size == (64, 64)
    assert server.count("/a.png") == 3
    server.script["/c.png"] = [("truncate", data)] * 3
    assert reason(server.url + "/c.png", settings=settings) == "connection"
    server.files["/half.png"] = data[:100]  # a complete answer holding a broken image
    assert reason(server.url + "/half.png", settings=settings) == "corrupt"
    assert reason(server.url + "/page.png", settings=settings) == "not_an_image"
    assert not cache_path(server.url + "/page.png", settings).exists()  # an error page is never cached
    server.files["/big.png"] = data
    assert reason(server.url + "/big.png", settings=MediaSettings(max_bytes=100, cache_dir=settings.cache_dir)) == "too_large"


def test_a_url_that_never_answers_times_out(http_server, tmp_path):
    server = http_server({"/a.png": png()})
    server.script["/a.png"] = ["hang", "hang"]
    start = time.perf_counter()
    quick = MediaSettings(timeout_s=0.4, retries=1, backoff_s=0.01, cache_dir=tmp_path)
    assert reason(server.url + "/a.png", settings=quick) == "timeout"
    assert time.perf_counter() - start < 3 and server.count("/a.png") == 2
    assert reason("http://127.0.0.1:9/a.png", settings=quick) == "connection"


def test_processes_share_the_cache_and_download_once(http_server, tmp_path):
    server = http_server(handler=lambda m, p, h, b: (time.sleep(0.5), (200, {}, png()))[1])
    code = ("import sys; from posttrain.data.media import MediaSettings, load_images; "
            "im = load_images(sys.argv[1], settings=MediaSettings(cache_dir=sys.argv[2]))[0]; print(im.size)")
    procs = [subprocess.Popen([sys.executable, "-c", code, server.url + "/a.png", str(tmp_path)], stdout=subprocess.PIPE,
                              text=True) for _ in range(2)]
    assert [p.communicate(timeout=60)[0].strip() for p in procs] == ["(8, 6)", "(8, 6)"]
    assert server.count("/a.png") == 1
    assert [p.name for p in tmp_path.iterdir() if p.name != ".locks"] == [cache_path(server.url + "/a.png", MediaSettings(cache_dir=tmp_path)).name]


def test_parquet_embedded_images(tmp_path, settings):
    import datasets

    images = [Image.open(io.BytesIO(png((9, 9, 9)))), Image.open(io.BytesIO(png((250, 250, 250), size=(3, 5))))]
    features = datasets.Features({"image": datasets.Image(), "text": datasets.Value("string")})
    datasets.Dataset.from_dict({"image": images, "text": ["x", "y"]}, features=features).to_parquet(str(tmp_path / "train.parquet"))
    raw = datasets.load_dataset("parquet", data_files=str(tmp_path / "train.parquet"), split="train")
    undecoded = raw.cast_column("image", datasets.Image(decode=False))
    assert isinstance(undecoded[0]["image"], dict) and undecoded[0]["image"]["bytes"]
    for rows in (undecoded, raw):  # as dicts {"bytes", "path"} and as datasets' own PIL images
        got = [pixels(load_images(r["image"], base_dir=tmp_path, settings=settings)[0]) for r in rows]
        assert got == [((8, 6), (9, 9, 9)), ((3, 5), (250, 250, 250))]


# ---- videos -------------------------------------------------------------------------------------

def make_video(path, n_frames=20, rate=10, size=(32, 32)) -> None:
    """An mp4 whose frame i is a flat grey of level 10 * i + 20, so a test can tell frames apart."""
    import av
    import numpy as np

    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("mpeg4", rate=rate)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        for i in range(n_frames):
            frame = av.VideoFrame.from_ndarray(np.full((size[1], size[0], 3), 10 * i + 20, np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def frame_ids(frames) -> list[int]:
    return [round((f.getpixel((16, 16))[0] - 20) / 10) for f in frames]


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    pytest.importorskip("av")
    path = tmp_path_factory.mktemp("video") / "clip.mp4"
    make_video(path)
    return path


def test_video_frames_by_fps_and_max_frames(video, settings):
    kw = dict(base_dir=video.parent, settings=settings)
    assert frame_ids(load_video_frames("clip.mp4", fps=2, **kw)) == [0, 5, 10, 15]
    assert frame_ids(load_video_frames("clip.mp4", max_frames=3, **kw)) == [0, 10, 19]
    assert frame_ids(load_video_frames("clip.mp4", fps=5, max_frames=4, **kw)) == [0, 6, 12, 18]
    assert frame_ids(load_video_frames("clip.mp4", **kw)) == [0, 10]  # default: 1 frame per second
    assert frame_ids(load_video_frames("clip.mp4", fps=100, **kw)) == list(range(20))
    assert frame_ids(load_video_frames(video.read_bytes(), max_frames=1, **kw)) == [0]
    assert len(load_video_frames(["clip.mp4", "clip.mp4"], max_frames=2, **kw)) == 4
    small = load_video_frames("clip.mp4", max_frames=1, base_dir=video.parent, settings=MediaSettings(max_image_pixels=256))
    assert small[0].size == (16, 16) and small[0].mode == "RGB"


def test_video_over_http_and_bad_videos(video, http_server, settings, tmp_path):
    data = video.read_bytes()
    server = http_server({"/v.mp4": data, "/notes.mp4": b"hello " * 100})
    server.script["/v.mp4"] = [("status", 503, {})]
    assert frame_ids(load_video_frames(server.url + "/v.mp4", fps=2, settings=settings)) == [0, 5, 10, 15]
    assert server.count("/v.mp4") == 2

    def video_reason(cell):
        with pytest.raises(MediaError) as e:
            load_video_frames(cell, base_dir=tmp_path, settings=settings, max_frames=2)
        return e.value.reason

    (tmp_path / "image.png").write_bytes(png())
    assert video_reason("missing.mp4") == "missing_file"
    assert video_reason(b"hello " * 100) == "not_a_video"
    assert video_reason(server.url + "/notes.mp4") == "not_a_video"
    assert video_reason(data[:600]) in ("corrupt", "not_a_video")
    assert video_reason(server.url + "/gone.mp4") == "http_404"
    with pytest.raises(ValueError):
        load_video_frames(data, fps=0)


def test_videos_without_pyav_name_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "av", None)  # what `import av` does when it is not installed
    with pytest.raises(UserError, match=r"pip install 'posttrain\[video\]'"):
        load_video_frames(b"...", max_frames=1)


def test_collect_media_drops_bad_rows_by_reason_and_names_them(tmp_path, http_server, settings, caplog):
    (tmp_path / "a.png").write_bytes(png())
    server = http_server({"/b.png": png((1, 1, 1))})
    rows = [{"image": "a.png", "extra": ["a.png", server.url + "/b.png"]},
            {"image": "missing.png", "extra": []},
            {"image": server.url + "/gone.png", "extra": None},
            {"image": ["a.png", "a.png"], "extra": "notes"}]
    kept, media, drops = collect_media(rows, source="data/train.jsonl", image_columns=["image", "extra"],
                                       base_dir=tmp_path, settings=settings)
    assert kept == [0] and len(media[0]["images"]) == 3 and media[0]["videos"] == []
    assert drops.by_reason == {"missing_file": 2, "http_404": 1} and drops.total == 4
    assert drops.summary() == "dropped 3 of 4 rows of data/train.jsonl whose media failed: 2 missing_file, 1 http_404"
    assert "data/train.jsonl row 1 dropped: image: missing_file" in caplog.text
    assert "row 3 dropped: extra: missing_file" in caplog.text
    with pytest.raises(UserError, match=r"data/train.jsonl: no column 'imgae'.*Did you mean 'image'"):
        collect_media(rows, source="data/train.jsonl", image_columns=["imgae"], base_dir=tmp_path)
    with pytest.raises(UserError, match=r"data/train.jsonl: no row left with usable media \(dropped 2 of 2 rows"):
        collect_media(rows[1:3], source="data/train.jsonl", image_columns=["image"], base_dir=tmp_path, settings=settings)


def test_prefetch_overlaps_downloads_and_reports_failures_once(http_server, settings):
    slow = {f"/{i}.png": png((i, i, i)) for i in range(8)}
    server = http_server(handler=lambda m, p, h, b: (time.sleep(0.4), (200, {}, slow[p]) if p in slow else None)[1])
    cells = [server.url + f"/{i}.png" for i in range(8)] + [[server.url + "/0.png", {"bytes": None, "path": server.url + "/gone.png"}]]
    start = time.perf_counter()
    failures = prefetch(cells, settings=settings, max_workers=8)
    assert time.perf_counter() - start < 2.0  # 8 waits of 0.4 s overlapped (3.2 s one at a time)
    assert list(failures) == [server.url + "/gone.png"] and failures[server.url + "/gone.png"].reason == "http_404"
    assert len(server.requests) == 9  # each URL once
    images = load_images(cells[:8], settings=settings)
    assert [im.getpixel((0, 0)) for im in images] == [(i, i, i) for i in range(8)] and len(server.requests) == 9
    assert reason(server.url + "/gone.png", settings=settings) == "http_404" and len(server.requests) == 9  # told at once
    assert reason(server.url + "/gone.png", settings=settings) == "http_404" and len(server.requests) == 10  # then asks again
    assert prefetch(cells[:8], settings=settings) == {} and len(server.requests) == 10  # all cached: nothing to do
