"""Imported at start-up by a posttrain run whose PYTHONPATH names this folder (defaults_race.py
--without-cpu-passes): the run keeps PEFT's nn.Dropout and transformers' sdpa on a CPU, as posttrain
did before models/cpu_dropout.py and models/cpu_attention.py, so a race can measure what they gain
in the same run, everything else equal."""

from posttrain.models import cpu_attention, cpu_dropout

cpu_dropout.cheaper_lora_dropout = lambda *args, **kwargs: None
cpu_attention.use_on_cpu = lambda *args, **kwargs: None
