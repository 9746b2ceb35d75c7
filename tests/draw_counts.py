"""Do sampled tokens fit the probabilities they were drawn from? One chi-square goodness-of-fit test
for the sampler tests (tests/generation/test_fast_decode.py, tests/e2e/test_real_model.py)."""

from __future__ import annotations


def fit_pvalue(counts, probs) -> tuple[float, int]:
    """(p-value, cells) of draw `counts` per token against `probs` (1-D tensors over the vocabulary).
    Tokens expected fewer than 5 times are pooled into one cell, as the test needs; tokens of
    probability 0 must never have been drawn (asserted)."""
    from scipy.stats import chisquare

    counts, probs = counts.double(), probs.double()
    assert counts[probs == 0].sum() == 0, "a token of probability 0 was drawn"
    expected = probs * counts.sum() / probs.sum()
    big = expected >= 5
    observed = [*counts[big].tolist(), counts[~big].sum().item()]
    wanted = [*expected[big].tolist(), expected[~big].sum().item()]
    if wanted[-1] == 0:  # nothing to pool
        observed, wanted = observed[:-1], wanted[:-1]
    return float(chisquare(observed, wanted).pvalue), len(observed)
