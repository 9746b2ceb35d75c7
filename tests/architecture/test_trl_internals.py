"""Every private TRL internal posttrain touches (algorithms/trl_internals.py) exists in the installed
TRL and is still called by it; a missing one refuses the run, naming it and the TRL version."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

from posttrain.algorithms.trl_internals import INTERNALS, check, require
from posttrain.errors import UserError

SRC = Path(__file__).resolve().parents[2] / "src" / "posttrain"


@pytest.mark.parametrize("internal", INTERNALS, ids=lambda i: i.where)
def test_each_internal_exists_and_trl_still_calls_it(internal):
    owner = internal.resolve()
    if not internal.instance:
        assert hasattr(owner, internal.name), f"TRL no longer has {internal.where}: {internal.purpose}"
    module, _, cls = (internal.caller or f"{internal.module}:{internal.owner}").partition(":")
    source = inspect.getsource(getattr(importlib.import_module(module), cls))
    assert internal.called_as in source, f"{internal.caller or internal.owner} no longer contains {internal.called_as!r}"


def test_every_private_name_posttrain_reaches_is_listed():
    """A private attribute posttrain reads or replaces on a trainer must be in the table (read through require)."""
    listed = {i.name for i in INTERNALS}
    used = set()
    for path in (SRC / "algorithms").glob("*.py"):
        text = path.read_text()
        used |= set(re.findall(r"require\(\w+, \"(_\w+)\"\)", text))
        used |= set(re.findall(r"trainer\.(_\w+) = ", text))  # a replaced method
    used -= {"_signature_columns"}  # set through _set_signature_columns_if_needed (listed)
    assert used and used <= listed, f"not in algorithms/trl_internals.py: {sorted(used - listed)}"


def test_a_missing_internal_refuses_the_run(monkeypatch):
    import trl
    from trl.trainer import grpo_trainer

    monkeypatch.delattr(grpo_trainer.GRPOTrainer, "_calculate_rewards")
    with pytest.raises(UserError) as e:
        check("grpo")
    message = str(e.value)
    assert "GRPOTrainer._calculate_rewards" in message and f"TRL {trl.__version__}" in message and "trl==1.16.0" in message
    check("sft")  # another family's run does not need it

    class Trainer:
        pass

    with pytest.raises(UserError, match=r"Trainer\._generate, which posttrain uses for the generation/scoring time split"):
        require(Trainer(), "_generate")
