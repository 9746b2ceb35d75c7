"""Imported at start-up by a posttrain run whose PYTHONPATH names this folder (grpo_step.py's
`unflattened` contestant): GRPO scores its batches padded, as TRL does, instead of flattened
(models/flat_batches.py), everything else equal, so a race measures what flattening gains."""

from posttrain.models import flat_batches

flat_batches.flatten_scored_passes = lambda trainer: None
