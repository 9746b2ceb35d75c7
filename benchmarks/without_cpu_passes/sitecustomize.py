"""Imported at start-up by a posttrain run whose PYTHONPATH names this folder (defaults_race.py
--without-cpu-passes, grpo_step.py plain): the run keeps transformers' sdpa attention on a CPU, as
posttrain did before models/cpu_attention.py, so a race can measure what it gains in the same run,
everything else equal. (It also turned a cheaper LoRA dropout mask off, until races showed that
gaining 1.02-1.05x end to end: benchmarks/results/speed_paths_dropout_avx512.txt; it was removed.)"""

from posttrain.models import cpu_attention

cpu_attention.use_on_cpu = lambda *args, **kwargs: None
