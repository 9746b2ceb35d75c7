"""Coloured shapes on a canvas: a visual question-answering task generated offline with a seed.

    python -m posttrain.data.shapes OUT_DIR [--n 600] [--n-test 200] [--seed 0] [--blank]

The proof that images reach a vision-language model: the answers are in the pixels only. Each
64x64 image holds 1-3 shapes (square, circle, triangle; each kind at most once) in distinct
colours out of four (red, green, blue, yellow). Questions, drawn uniformly:

* colour of a shape   "What colour is the square?"               -> red | green | blue | yellow
* colour by position  "What colour is the shape on the left?"    -> (images with 2-3 shapes)
* count               "How many shapes are there?"               -> 1 | 2 | 3

Answers are uniform over their options, so a model that cannot see scores chance: 1/4 on colour
questions, 1/3 on counts (`chance()` gives the expected accuracy of a set of items).

Writes OUT_DIR/images/*.png and
* train.jsonl  -- {image, prompt, completion: "<answer>red</answer>", answer, kind}: sft_vlm rows;
* test.jsonl   -- {id, image, prompt: [user message], answer, kind}: `posttrain eval --task custom
  --data test.jsonl --image-column image` items, from a disjoint seed.
`--blank` writes every training image as one flat colour (every pixel the same): the control
arm, which sees the same questions and answers without anything to look at.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SIZE = 64
COLOURS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (230, 200, 40)}
KINDS = ("square", "circle", "triangle")
BACKGROUND = (245, 245, 245)
SHAPE = 18  # side / diameter in pixels
TEST_SEED_OFFSET = 10_000  # test images come from seed + this offset: never the training images


def _layout(rng: random.Random, n: int) -> list[dict]:
    """n shapes with distinct kinds and colours at non-overlapping spots, left-to-right distinct."""
    while True:
        xs = [rng.randint(2, SIZE - SHAPE - 2) for _ in range(n)]
        ys = [rng.randint(2, SIZE - SHAPE - 2) for _ in range(n)]
        centres = sorted(xs)
        if all(b - a >= SHAPE + 2 for a, b in zip(centres, centres[1:])):  # separated horizontally: "left" is clear
            break
    kinds, colours = rng.sample(KINDS, n), rng.sample(list(COLOURS), n)
    return [{"kind": k, "colour": c, "x": x, "y": y} for k, c, x, y in zip(kinds, colours, xs, ys)]


def draw(shapes: list[dict], blank: bool = False):
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (SIZE, SIZE), BACKGROUND)
    if blank:
        return image
    pen = ImageDraw.Draw(image)
    for s in shapes:
        box = (s["x"], s["y"], s["x"] + SHAPE, s["y"] + SHAPE)
        fill = COLOURS[s["colour"]]
        if s["kind"] == "square":
            pen.rectangle(box, fill=fill)
        elif s["kind"] == "circle":
            pen.ellipse(box, fill=fill)
        else:
            pen.polygon([(s["x"] + SHAPE / 2, s["y"]), (s["x"], s["y"] + SHAPE), (s["x"] + SHAPE, s["y"] + SHAPE)], fill=fill)
    return image


def item(rng: random.Random) -> tuple[list[dict], dict]:
    """(shapes, {question, answer, kind}) with the answer uniform over the question's options."""
    kind = rng.choice(["colour_of_shape", "colour_by_position", "count"])
    if kind == "count":
        shapes = _layout(rng, rng.randint(1, 3))
        return shapes, {"question": "How many shapes are there?", "answer": str(len(shapes)), "kind": kind}
    if kind == "colour_of_shape":
        shapes = _layout(rng, rng.randint(1, 3))
        target = rng.choice(shapes)
        return shapes, {"question": f"What colour is the {target['kind']}?", "answer": target["colour"], "kind": kind}
    shapes = _layout(rng, rng.randint(2, 3))
    side = rng.choice(["left", "right"])
    ordered = sorted(shapes, key=lambda s: s["x"])
    target = ordered[0] if side == "left" else ordered[-1]
    return shapes, {"question": f"What colour is the shape on the {side}?", "answer": target["colour"], "kind": kind}


def options(kind: str) -> int:
    return 3 if kind == "count" else len(COLOURS)


def chance(items: list[dict]) -> float:
    """Expected accuracy of guessing uniformly among each item's options."""
    return sum(1 / options(i["kind"]) for i in items) / len(items)


def write_split(out_dir: Path, name: str, n: int, seed: int, *, blank: bool = False, test: bool = False) -> Path:
    rng = random.Random(seed)
    images = out_dir / "images"
    images.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        shapes, qa = item(rng)
        file = f"images/{name}-{i:05d}.png"
        draw(shapes, blank=blank).save(out_dir / file)
        if test:
            rows.append({"id": f"shapes-{i}", "image": file, "prompt": [{"role": "user", "content": qa["question"]}],
                         "answer": qa["answer"], "kind": qa["kind"]})
        else:
            rows.append({"image": file, "prompt": qa["question"], "completion": f"<answer>{qa['answer']}</answer>",
                         "answer": qa["answer"], "kind": qa["kind"]})
    path = out_dir / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_all(out_dir: Path, n: int = 600, n_test: int = 200, seed: int = 0, blank: bool = False) -> dict[str, Path]:
    """train.jsonl (blank images with `blank`) and test.jsonl (always real images, a disjoint seed)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return {"train": write_split(out_dir, "train", n, seed, blank=blank),
            "test": write_split(out_dir, "test", n_test, seed + TEST_SEED_OFFSET, test=True)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--n", type=int, default=600, help="training rows")
    parser.add_argument("--n-test", type=int, default=200, help="held-out test items")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--blank", action="store_true", help="training images blanked (one flat colour): the control arm")
    args = parser.parse_args()
    for name, path in write_all(args.out_dir, args.n, args.n_test, args.seed, args.blank).items():
        print(f"{name}: {path}")
