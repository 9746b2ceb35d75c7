"""Imported at start-up by a posttrain run whose PYTHONPATH names this folder (eval_speed.py's
`--without-shared-prefix` setting): the decoding loop prefills every row's whole prompt, the prefix all
rows share included, as before `decoding.shared_prefix`, everything else equal."""

from posttrain.generation import decoding

decoding.shared_prefix = lambda *args, **kwargs: 0
