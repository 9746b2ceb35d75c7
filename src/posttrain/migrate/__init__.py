"""Recipes of other tools -> posttrain recipes (today: FAI-RL 0.2.x training, inference, evaluation).

`convert(raw)` picks the converter by the recipe's shape and returns a `Conversion`: the posttrain
recipe plus one table row per source key. No torch: `posttrain convert` answers in about a second.
"""

from __future__ import annotations

from .table import Conversion, Row, render


def convert(raw: dict, source: str = "recipe") -> Conversion:
    if "inference" in raw or "evaluation" in raw:
        from .fairl_inference import convert_inference

        return convert_inference(raw, source)
    from .fairl_training import convert_training

    return convert_training(raw, source)


__all__ = ["Conversion", "Row", "convert", "render"]
