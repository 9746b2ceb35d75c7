"""The vision data step reads media through posttrain.data.media: images by URL from a real HTTP
server on 127.0.0.1 (one failing twice first, one missing) train like local ones or are dropped
with their reason and row index."""

from __future__ import annotations

import io
import json

from PIL import Image

from posttrain.data.vision import prepare_vision_dataset
from posttrain.recipe.schema import DataSection, DatasetSpec


def png(colour) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), colour).save(buf, format="PNG")
    return buf.getvalue()


def test_images_by_url_are_fetched_retried_and_dropped_by_reason(tmp_path, http_server):
    server = http_server({"/red.png": png("red"), "/blue.png": png("blue")})
    server.script["/blue.png"] = [("status", 503, {}), ("status", 503, {})]
    rows = [{"image": server.url + "/red.png", "prompt": "colour?", "completion": "red"},
            {"image": server.url + "/gone.png", "prompt": "colour?", "completion": "?"},
            {"image": [server.url + "/blue.png", server.url + "/red.png"], "prompt": "<image> or <image>?", "completion": "blue"}]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = DatasetSpec(name=str(path), image_columns=["image"])
    ds, report = prepare_vision_dataset(spec, "data.datasets[0]", DataSection(datasets=[spec]), seed=0)
    assert len(ds) == 2 and dict(report.dropped) == {"http_404": 1}
    assert "1 http_404 (row 1)" in report.render()
    colours = sorted(tuple(im.getpixel((0, 0)) for im in row["images"]) for row in ds)
    assert colours == [((0, 0, 255), (255, 0, 0)), ((255, 0, 0),)]
    assert server.count("/blue.png") == 3 and server.count("/red.png") == 1  # retried; then cached
    assert server.count("/gone.png") == 1  # asked once: prefetched, then its row is told the same 404


def test_urls_are_downloaded_concurrently_before_the_rows_are_read(tmp_path, http_server):
    import threading
    import time

    state = {"now": 0, "max": 0}
    lock = threading.Lock()

    def slow(method, path, headers, body):
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.3)
        with lock:
            state["now"] -= 1
        return 200, {}, png((int(path[2:-4]), 0, 0))

    server = http_server(handler=slow)
    rows = [{"image": f"{server.url}/c{i}.png", "prompt": "colour?", "completion": str(i)} for i in range(6)]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = DatasetSpec(name=str(path), image_columns=["image"])
    ds, report = prepare_vision_dataset(spec, "data.datasets[0]", DataSection(datasets=[spec]), seed=0)
    assert len(ds) == 6 and len(server.requests) == 6
    assert state["max"] >= 2  # several downloads were in flight at once
