"""A pytest plugin for benchmarks/tolerance_review.py: records, for each float comparison a test makes, how much of its
bound it used (the largest |a - b| / (atol + rtol |b|)), and lets the comparison run as it would.

    TOLERANCE_METER_OUT=usage.jsonl PYTHONPATH=benchmarks python -m pytest -p _tolerance_meter tests/models/...

It wraps torch.testing.assert_close, torch.allclose and tests/tolerances.py's assert_within_bf16_rounding before the
test modules import them; a failure to measure never changes what a test does."""

from __future__ import annotations

import json
import os
import sys

import torch

_OUT = os.environ.get("TOLERANCE_METER_OUT", "tolerance_usage.jsonl")
_DEFAULTS = {torch.float32: (1.3e-6, 1e-5), torch.bfloat16: (1.6e-2, 1e-5), torch.float64: (1e-7, 1e-7)}  # assert_close's


def _record(kind: str, actual, expected, rtol: float, atol: float) -> None:
    try:
        a, b = torch.as_tensor(actual).detach().double(), torch.as_tensor(expected).detach().double()
        diff = (a - b).abs()
        used = float((diff / (atol + rtol * b.abs())).max()) if diff.numel() else 0.0
        row = {"test": os.environ.get("PYTEST_CURRENT_TEST", "?").split(" (")[0], "kind": kind, "rtol": rtol, "atol": atol,
               "max_abs": float(diff.max()) if diff.numel() else 0.0, "used": used}
        with open(_OUT, "a") as f:
            f.write(json.dumps(row) + "\n")
    except Exception:  # never change what the test does
        pass


_assert_close, _allclose = torch.testing.assert_close, torch.allclose


def _metered_assert_close(actual, expected, *args, rtol=None, atol=None, **kwargs):
    if rtol is None and atol is None:
        rtol, atol = _DEFAULTS.get(torch.as_tensor(actual).dtype, (1.3e-6, 1e-5))
    _record("assert_close", actual, expected, rtol, atol)
    return _assert_close(actual, expected, *args, rtol=rtol, atol=atol, **kwargs)


def _metered_allclose(a, b, rtol=1e-5, atol=1e-8, equal_nan=False):
    _record("allclose", a, b, rtol, atol)
    return _allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)


torch.testing.assert_close = _metered_assert_close
torch.allclose = _metered_allclose


def pytest_configure(config):
    sys.path.insert(0, str(config.rootpath / "tests"))
    import tolerances

    within = tolerances.assert_within_bf16_rounding

    def metered_within(ours, plain, plain_float32, msg=""):
        error = float((plain.float() - plain_float32.float()).abs().max())
        _record("within_bf16_rounding", ours.float(), plain.float(), 0.0, 2 * error)
        return within(ours, plain, plain_float32, msg)

    tolerances.assert_within_bf16_rounding = metered_within
