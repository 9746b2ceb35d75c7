"""Imported at start-up by a posttrain run whose PYTHONPATH names this folder (defaults_race.py
--trl-head, grpo_step.py's `trl_head`): TRL's fused head keeps its own 32,768-row tiles on a CPU
instead of posttrain's blocks (models/cpu_lm_head.py), everything else equal, so a race measures
what the blocks gain."""

from posttrain.models import cpu_lm_head

cpu_lm_head.use_on_cpu = lambda: None
