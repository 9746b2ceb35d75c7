"""Imported at start-up by a posttrain run whose PYTHONPATH names this folder (defaults_race.py
--without-cpu-dropout): the run keeps PEFT's nn.Dropout on a CPU (models/cpu_dropout.py off) and
everything else, posttrain's CPU attention included, so a race tells the dropout masks' gain from
the attention's (--without-cpu-passes turns both off)."""

from posttrain.models import cpu_dropout

cpu_dropout.cheaper_lora_dropout = lambda *args, **kwargs: None
