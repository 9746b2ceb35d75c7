"""The bar a local engine shows while it generates: answers finished, tokens made, tokens per second.

    generate SmolLM2-135M-Instruct.Q4_1.gguf:  45%|████▌     | 9/20 [00:04<00:05, 2.10item/s, 1,204 tokens, 281 tokens/s]

It moves with every decoded token: posttrain's decoding loop reports each step (`decode(on_step=...)`),
and an item counts as soon as its answer ends. A bar over batches sat at "0/1 batch" for the whole of
a one-batch CPU evaluation, which looked hung. Under `generate` (transformers' decoder, vision-language
models) the counts move once per batch. At each batch's end they are set from its completions, so the
totals are exact whichever path ran.
"""

from __future__ import annotations

import time
from pathlib import Path


class GenerationBar:
    """A tqdm bar over items, with the tokens made and their rate after it (on stderr)."""

    def __init__(self, items: int, name: str, enabled: bool = True):
        from tqdm.auto import tqdm

        # miniters=0: redraw on any call once mininterval (0.1 s) has passed, even one that finished no item
        shown = Path(name).name if Path(name).expanduser().exists() else name  # a local path by its last part
        self.bar = tqdm(total=items, desc=f"generate {shown}", unit="item", disable=not enabled, miniters=0)
        self.start = time.monotonic()
        self.items = 0  # items of the batches finished before this one
        self.tokens = 0  # tokens of those batches
        self.batch_tokens = 0  # tokens the current batch's steps reported

    def step(self, tokens: int, finished: int) -> None:
        """One decoding step: `tokens` made, `finished` answers ended (`decode`'s on_step)."""
        self.batch_tokens += tokens
        self._show(self.bar.n + finished, self.tokens + self.batch_tokens)

    def batch_done(self, completion_tokens: list[int | None]) -> None:
        """A batch's answers are in: the counts become its exact totals."""
        self.items += len(completion_tokens)
        self.tokens += sum(t or 0 for t in completion_tokens)
        self.batch_tokens = 0
        self._show(self.items, self.tokens)

    def _show(self, items: int, tokens: int) -> None:
        rate = tokens / max(time.monotonic() - self.start, 1e-9)
        self.bar.set_postfix_str(f"{tokens:,} tokens, {rate:,.{1 if rate < 100 else 0}f} tokens/s", refresh=False)
        self.bar.update(items - self.bar.n)

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> GenerationBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
