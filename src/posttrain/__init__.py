"""posttrain: post-train language models from validated YAML recipes, then measure whether it helped."""

__version__ = "0.1.0"
