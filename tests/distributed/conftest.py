"""Fixtures of the multi-process tests (helpers live in mp_testing.py)."""

import pytest


@pytest.fixture(scope="session")
def sft_data(data_dir) -> str:
    return f"data.datasets[0].name={data_dir / 'sft.jsonl'}"
