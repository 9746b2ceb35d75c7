"""Coloured shapes on a canvas: a visual question-answering task generated offline with a seed.

    python -m posttrain.data.shapes OUT_DIR [--n 600] [--n-test 200] [--seed 0] [--blank]

The proof that images reach a vision-language model: the answers are in the pixels only. Each
64x64 image holds shapes (square, circle, triangle) on a light background. Questions, drawn
uniformly, each with four possible answers drawn uniformly:

* colour    "What colour is the square?"  -> red | green | blue | yellow. The square (or circle,
            triangle) is the one coloured shape; 0-2 grey shapes of the other kinds are distractors.
* position  "Where is the circle?"        -> top left | top right | bottom left | bottom right
            (one shape, in that quadrant of the canvas).
* count     "How many shapes are there?"  -> 1 | 2 | 3 | 4 (coloured shapes, one per quadrant at most).

A model that cannot see scores chance, 1/4 (`chance()` gives the expected accuracy of a set of
items). The task is built so that a tiny model trained from random weights on a CPU for minutes can
learn it: each answer is a property of the whole image (which colour is present, where the
non-background pixels are, how many blobs), not of a relation between shapes.

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
GREY = (150, 150, 150)
KINDS = ("square", "circle", "triangle")
QUADRANTS = ("top left", "top right", "bottom left", "bottom right")
BACKGROUND = (245, 245, 245)
SHAPE = 24  # side / diameter in pixels: most of a quadrant
TEST_SEED_OFFSET = 10_000  # test images come from seed + this offset: never the training images


def _spots(rng: random.Random, n: int, quadrant: int | None = None) -> list[tuple[int, int]]:
    """Top-left corners of n shapes, each in its own quadrant of the canvas (in `quadrant` when
    given), jittered inside it: shapes never overlap, and a count is a count of quadrants in use."""
    half = SIZE // 2
    quadrants = [quadrant] if quadrant is not None else rng.sample(range(4), n)
    return [((q % 2) * half + rng.randint(1, half - SHAPE - 1), (q // 2) * half + rng.randint(1, half - SHAPE - 1)) for q in quadrants]


def draw(shapes: list[dict], blank: bool = False):
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (SIZE, SIZE), BACKGROUND)
    if blank:
        return image
    pen = ImageDraw.Draw(image)
    for s in shapes:
        box = (s["x"], s["y"], s["x"] + SHAPE, s["y"] + SHAPE)
        fill = COLOURS.get(s["colour"], GREY)
        if s["kind"] == "square":
            pen.rectangle(box, fill=fill)
        elif s["kind"] == "circle":
            pen.ellipse(box, fill=fill)
        else:
            pen.polygon([(s["x"] + SHAPE / 2, s["y"]), (s["x"], s["y"] + SHAPE), (s["x"] + SHAPE, s["y"] + SHAPE)], fill=fill)
    return image


def item(rng: random.Random) -> tuple[list[dict], dict]:
    """(shapes, {question, answer, kind}) with the answer uniform over the question's four options."""
    kind = rng.choice(["colour", "position", "count"])
    if kind == "colour":
        kinds = rng.sample(KINDS, rng.randint(1, 3))
        colour = rng.choice(list(COLOURS))
        colours = [colour] + ["grey"] * (len(kinds) - 1)
        shapes = [{"kind": k, "colour": c, "x": x, "y": y} for k, c, (x, y) in zip(kinds, colours, _spots(rng, len(kinds)))]
        return shapes, {"question": f"What colour is the {kinds[0]}?", "answer": colour, "kind": kind}
    if kind == "position":
        quadrant = rng.randrange(4)
        (x, y), = _spots(rng, 1, quadrant)
        shape = {"kind": rng.choice(KINDS), "colour": rng.choice(list(COLOURS)), "x": x, "y": y}
        return [shape], {"question": f"Where is the {shape['kind']}?", "answer": QUADRANTS[quadrant], "kind": kind}
    n = rng.randint(1, 4)
    shapes = [{"kind": rng.choice(KINDS), "colour": rng.choice(list(COLOURS)), "x": x, "y": y} for x, y in _spots(rng, n)]
    return shapes, {"question": "How many shapes are there?", "answer": str(n), "kind": kind}


def options(kind: str) -> int:
    return 4


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
