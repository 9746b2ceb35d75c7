"""Experiment tracking: the recipe's `tracking` section turned into what transformers' integrations read.

transformers' callbacks take their settings from TrainingArguments (report_to, run_name, project)
and from environment variables (WANDB_PROJECT, WANDB_MODE, ...). posttrain sets both from the
recipe, keeps every provider's local files inside output_dir, and passes API keys only through the
provider's own environment variable: they never reach a log line, a saved recipe or a summary.
"""

from __future__ import annotations

import os
from pathlib import Path

# provider -> the environment variable its client reads an API key from
KEY_ENV = {"wandb": "WANDB_API_KEY", "mlflow": "MLFLOW_TRACKING_TOKEN", "trackio": "HF_TOKEN"}


def configure(tracking, output_dir: Path) -> list[str]:
    """Set the provider's environment for this process; return notes for the start-up log."""
    provider = tracking.provider
    if provider == "none":
        return []
    notes = [f"tracking: {provider}" + (f", project {tracking.project}" if tracking.project else "")]
    if tracking.api_key is not None:
        os.environ[KEY_ENV[provider]] = tracking.api_key.get_secret_value()
        notes.append(f"tracking: API key from the recipe passed as ${KEY_ENV[provider]}")
    if provider == "wandb":
        os.environ.setdefault("WANDB_DIR", str(output_dir))
        if tracking.project:
            os.environ["WANDB_PROJECT"] = tracking.project
        if tracking.tags:
            os.environ["WANDB_TAGS"] = ",".join(tracking.tags)
        if tracking.mode == "offline":
            os.environ["WANDB_MODE"] = "offline"
            notes.append(f"tracking: wandb offline, files in {os.environ['WANDB_DIR']} (upload later with `wandb sync`)")
    elif provider == "mlflow":
        os.environ.setdefault("MLFLOW_TRACKING_URI", (output_dir / "mlruns").resolve().as_uri())
        if tracking.project:
            os.environ["MLFLOW_EXPERIMENT_NAME"] = tracking.project
    elif provider == "tensorboard":
        notes.append(f"tracking: tensorboard events in {output_dir / 'runs'}")
    return notes
