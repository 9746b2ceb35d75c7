"""The vision data step: images placed where the text says, bad rows dropped by reason with their
row index, clear errors for a missing column or an empty dataset; and the label mask."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from posttrain.data.vision import DropRow, content_parts, place_media, prepare_vision_dataset
from posttrain.errors import UserError
from posttrain.recipe.schema import DataSection, DatasetSpec


def _png(path: Path, colour) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (40, 30), colour).save(path)
    return path.name


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_placeholders_decide_where_images_go():
    red, blue = Image.new("RGB", (2, 2), "red"), Image.new("RGB", (2, 2), "blue")
    user = {"role": "user", "content": content_parts("Compare <image> with <image>.")}
    out, ordered = place_media([user, {"role": "assistant", "content": content_parts("same")}], [red, blue], [])
    assert [p["type"] for p in out[0]["content"]] == ["text", "image", "text", "image", "text"]
    assert ordered == [red, blue]
    # no placeholder: images first in the first user turn, then video frames
    plain = [{"role": "user", "content": content_parts("What is it?")}]
    out, ordered = place_media(plain, [red], [[blue, blue]])
    assert [p["type"] for p in out[0]["content"]] == ["image", "image", "image", "text"] and ordered == [red, blue, blue]
    # a video placeholder expands into its frames where it stands
    out, ordered = place_media([{"role": "user", "content": content_parts("<image> then <video>")}], [red], [[blue, blue]])
    assert [p["type"] for p in out[0]["content"]] == ["image", "text", "image", "image"] and ordered == [red, blue, blue]
    for text, images in (("<image><image>", [red]), ("<image>", [red, blue])):  # more, then fewer placeholders
        with pytest.raises(DropRow) as e:
            place_media([{"role": "user", "content": content_parts(text)}], images, [])
        assert e.value.reason == "image_placeholders_mismatch"


def test_bad_rows_dropped_by_reason_with_row_indices(tmp_path):
    good = _png(tmp_path / "a.png", "red")
    (tmp_path / "broken.png").write_bytes(Image.new("RGB", (30, 30)).tobytes()[:50])  # not a PNG at all
    (tmp_path / "truncated.png").write_bytes((tmp_path / "a.png").read_bytes()[:60])
    (tmp_path / "notes.txt").write_text("hello")
    rows = [
        {"image": good, "prompt": "colour?", "completion": "red"},
        {"image": "missing.png", "prompt": "colour?", "completion": "red"},
        {"image": "truncated.png", "prompt": "colour?", "completion": "red"},
        {"image": "notes.txt", "prompt": "colour?", "completion": "red"},
        {"image": good, "prompt": "<image> and <image>?", "completion": "red"},
        {"image": [good, good], "prompt": "<image> and <image>?", "completion": "red, red"},
        {"image": "missing.png", "prompt": "colour?", "completion": "red"},
    ]
    spec = DatasetSpec(name=str(_write(tmp_path / "d.jsonl", rows)), image_columns=["image"])
    data = DataSection(datasets=[spec], max_image_pixels=300)
    ds, report = prepare_vision_dataset(spec, "data.datasets[0]", data, seed=0)
    assert len(ds) == 2 and report.rows_in == 7
    assert dict(report.dropped) == {"missing_file": 2, "corrupt": 1, "not_an_image": 1, "image_placeholders_mismatch": 1}
    line = report.render()
    assert "2 missing_file (rows 1, 6)" in line and "1 image_placeholders_mismatch (row 4)" in line
    first, second = ds[0], ds[1]
    assert [m["role"] for m in first["prompt"]] == ["user"] and first["completion"][0]["role"] == "assistant"
    assert len(first["images"]) == 1 and len(second["images"]) == 2
    w, h = first["images"][0].size
    assert w * h <= 300 and abs(w / h - 40 / 30) < 0.15  # max_image_pixels: downscaled, aspect kept


def test_missing_column_and_empty_dataset_are_errors_naming_them(tmp_path):
    rows = [{"picture": "x.png", "prompt": "p", "completion": "c"}]
    spec = DatasetSpec(name=str(_write(tmp_path / "d.jsonl", rows)), image_columns=["image"])
    with pytest.raises(UserError, match=r"data.datasets\[0\].image_columns: column 'image' not found .*picture"):
        prepare_vision_dataset(spec, "data.datasets[0]", DataSection(datasets=[spec]), seed=0)
    spec = DatasetSpec(name=str(_write(tmp_path / "e.jsonl", [{**rows[0], "image": "x.png"}])), image_columns=["image"])
    with pytest.raises(UserError, match=r"e.jsonl\): no usable rows.*1 missing_file \(row 0\)"):
        prepare_vision_dataset(spec, "data.datasets[0]", DataSection(datasets=[spec]), seed=0)


def test_messages_with_content_parts_and_parquet_embedded_images(tmp_path):
    import datasets

    img = tmp_path / "p.png"
    _png(img, "green")
    chat = [{"role": "user", "content": [{"type": "text", "text": "Which colour?"}, {"type": "image"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "green"}]}]
    ds = datasets.Dataset.from_dict({"messages": [json.dumps(chat)], "photo": [str(img)]})
    ds = ds.map(lambda r: {"messages": json.loads(r["messages"])}).cast_column("photo", datasets.Image())
    path = tmp_path / "d.parquet"
    ds.to_parquet(str(path))
    spec = DatasetSpec(name=str(path), image_columns=["photo"])
    out, report = prepare_vision_dataset(spec, "data.datasets[0]", DataSection(datasets=[spec]), seed=0)
    assert report.rows_kept == 1 and report.format == "messages+images"
    assert [p["type"] for p in out[0]["messages"][0]["content"]] == ["text", "image"]
    assert out[0]["images"][0].getpixel((0, 0)) == (0, 128, 0)


def test_video_column_becomes_sampled_frames_where_the_video_stands(tmp_path):
    pytest.importorskip("av")
    import av
    import numpy as np

    with av.open(str(tmp_path / "clip.mp4"), mode="w") as container:  # frame i: a flat grey of 10 * i + 20
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for i in range(20):
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.full((32, 32, 3), 10 * i + 20, np.uint8), format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    _png(tmp_path / "a.png", "red")
    rows = [{"image": "a.png", "clip": "clip.mp4", "prompt": "Before: <image> then <video> What changed?", "completion": "it got lighter"}]
    spec = DatasetSpec(name=str(_write(tmp_path / "v.jsonl", rows)), image_columns=["image"], video_columns=["clip"])
    ds, report = prepare_vision_dataset(spec, "data.datasets[0]", DataSection(datasets=[spec], video_max_frames=3), seed=0)
    assert report.rows_kept == 1
    parts = [p["type"] for p in ds[0]["prompt"][0]["content"]]
    assert parts == ["text", "image", "text", "image", "image", "image", "text"]
    images = ds[0]["images"]
    assert images[0].getpixel((0, 0)) == (255, 0, 0)
    greys = [im.getpixel((16, 16))[0] for im in images[1:]]
    assert greys == sorted(greys) and greys[0] < 60 < 150 < greys[-1]  # 3 frames spread over the clip, in order


def test_video_sampling_keys_without_video_columns_are_dead(repo):
    from posttrain.recipe.errors import RecipeError
    from posttrain.recipe.load import load_recipe

    with pytest.raises(RecipeError, match="no dataset has video_columns"):
        load_recipe(repo / "recipes/sft_vlm/tiny-cpu.yaml", ["data.video_fps=2"])


def test_row_templates_build_vision_rows(tmp_path):
    """sft_vlm reads str.format row templates (FAI-RL's dataset_columns + .format() prompts): prompt/completion
    templates make a user turn with the images and an assistant turn; a text_template makes one user turn
    (trained on whole, FAI-RL's flat mode); a template naming a missing column is an error naming it."""
    image = _png(tmp_path / "a.png", "red")
    data = _write(tmp_path / "d.jsonl", [{"photo": image, "question": "Which colour?", "answer": "red"}])
    spec = DatasetSpec(name=str(data), image_columns=["photo"], system_template="Answer in one word.",
                       prompt_template="Q: {question}", completion_template="{answer}")
    ds, report = prepare_vision_dataset(spec, "data.datasets[0]", DataSection(datasets=[spec]), seed=0)
    assert report.format == "prompt_completion+images"
    system, user = ds[0]["prompt"]
    assert system["content"] == [{"type": "text", "text": "Answer in one word."}]
    assert [p["type"] for p in user["content"]] == ["image", "text"] and user["content"][1]["text"] == "Q: {question}".format(question="Which colour?")
    assert ds[0]["completion"] == [{"role": "assistant", "content": [{"type": "text", "text": "red"}]}]
    flat = DatasetSpec(name=str(data), image_columns=["photo"], text_template="Q: {question}\nA: {answer}")
    ds, report = prepare_vision_dataset(flat, "data.datasets[0]", DataSection(datasets=[flat]), seed=0)
    assert report.format == "text+images"
    assert ds[0]["messages"] == [{"role": "user", "content": [{"type": "image", "text": None},
                                                              {"type": "text", "text": "Q: Which colour?\nA: red"}]}]
    bad = DatasetSpec(name=str(data), image_columns=["photo"], text_template="{question} {response}")
    with pytest.raises(UserError, match=r"data.datasets\[0\].text_template: column 'response' not found"):
        prepare_vision_dataset(bad, "data.datasets[0]", DataSection(datasets=[bad]), seed=0)


def test_media_timeout_and_retries_reach_the_media_loader_and_need_images(repo):
    from posttrain.data.vision import media_settings
    from posttrain.recipe.errors import RecipeError
    from posttrain.recipe.load import load_recipe

    spec = DatasetSpec(name="d.jsonl", image_columns=["image"])
    settings = media_settings(DataSection(datasets=[spec], media_timeout=4.5, media_retries=0))
    assert (settings.timeout_s, settings.retries) == (4.5, 0)
    assert media_settings(DataSection(datasets=[spec])).timeout_s == 30.0  # the loader's default
    with pytest.raises(RecipeError, match=r"data.media_timeout only apply to runs with images"):
        load_recipe(repo / "recipes/sft/tiny-cpu.yaml", ["data.media_timeout=5"])


def _counting_decodes(monkeypatch) -> list:
    """Spy on the one function that decodes a row's media: each call is one row decoded."""
    import posttrain.data.vision as vision

    calls, original = [], vision.row_media
    monkeypatch.setattr(vision, "row_media", lambda record, *a, **k: calls.append(record) or original(record, *a, **k))
    return calls


def test_max_samples_limits_decoding(tmp_path, monkeypatch):
    """30 rows, max_samples 4: four rows are read and decoded (in a seeded order), not thirty."""
    rows = [{"image": _png(tmp_path / f"i{i}.png", (i * 8, 0, 0)), "prompt": f"row {i}?", "completion": "red"} for i in range(30)]
    spec = DatasetSpec(name=str(_write(tmp_path / "d.jsonl", rows)), image_columns=["image"], max_samples=4)
    calls = _counting_decodes(monkeypatch)
    ds, report = prepare_vision_dataset(spec, "data.datasets[0]", DataSection(datasets=[spec]), seed=3)
    assert len(ds) == 4 and len(calls) == 4
    assert report.render().endswith("kept 4 of 4 rows (max_samples reached: 4 of 30 rows read)")
    again, _ = prepare_vision_dataset(spec, "data.datasets[0]", DataSection(datasets=[spec]), seed=3)
    assert again.with_format(None)["images"] == ds.with_format(None)["images"]  # the same rows for the same seed


def test_pictures_are_decoded_per_access_and_the_table_holds_references(tmp_path, monkeypatch):
    """The dataset stores where each picture comes from, not its pixels: the table does not grow with the images,
    and each row read (a batch) decodes that row, and only it."""
    sizes = {}
    for side in (8, 512):
        folder = tmp_path / str(side)
        folder.mkdir()
        rows = []
        for i in range(6):
            Image.new("RGB", (side, side), (i * 40, 0, 0)).save(folder / f"i{i}.png")
            rows.append({"image": f"i{i}.png", "prompt": "<image> colour?", "completion": "red"})
        spec = DatasetSpec(name=str(_write(folder / "d.jsonl", rows)), image_columns=["image"])
        ds, _ = prepare_vision_dataset(spec, "data.datasets[0]", DataSection(datasets=[spec]), seed=0)
        sizes[side] = ds.data.nbytes
    assert sizes[512] == sizes[8] < 5_000  # 6 x 512 x 512 RGB would be 4.7 MB of pixels
    calls = _counting_decodes(monkeypatch)
    first = ds[2]
    assert len(calls) == 1 and calls[0]["image"] == "i2.png"
    assert first["images"][0].size == (512, 512) and first["images"][0].getpixel((0, 0)) == (80, 0, 0)
    batch = ds[3:5]
    assert len(calls) == 3 and [images[0].getpixel((0, 0)) for images in batch["images"]] == [(120, 0, 0), (160, 0, 0)]
