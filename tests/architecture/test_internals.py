"""Every private internal posttrain touches (posttrain/internals.py) exists in the installed library and is
still used by it; a missing one refuses the run, naming it, its library's installed version and the one
posttrain was tested with."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from importlib.metadata import version
from pathlib import Path

import pytest

from posttrain.errors import UserError
from posttrain.internals import INTERNALS, TESTED_WITH, check, require, returned

SRC = Path(__file__).resolve().parents[2] / "src" / "posttrain"


def _lora_linear():
    import torch
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(torch.nn.Sequential(torch.nn.Linear(4, 4)), LoraConfig(r=2, lora_alpha=4, target_modules=["0"]))
    return model.base_model.model[0]


def _lambda_scheduler():
    import torch

    return torch.optim.lr_scheduler.LambdaLR(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), lambda step: 1.0)


# Instance attributes are set in __init__, not on the class: a cheap real instance shows they still are.
# (Trainers and accelerate's model wrapping are too heavy to build here: their `called_as` text stands in.)
EXAMPLES = {
    "transformers.cache_utils:DynamicLayer": lambda: importlib.import_module("transformers.cache_utils").DynamicLayer(),
    "transformers.cache_utils:DynamicCache": lambda: importlib.import_module("transformers.cache_utils").DynamicCache(),
    "transformers.configuration_utils:PreTrainedConfig":
        lambda: importlib.import_module("transformers.configuration_utils").PreTrainedConfig(),
    "peft.tuners.lora.layer:Linear": _lora_linear,
    "peft.tuners.lora.layer:LoraLayer": _lora_linear,
    "torch.optim.lr_scheduler:LRScheduler": _lambda_scheduler,
}


def _class(path: str):
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("internal", INTERNALS, ids=lambda i: i.where)
def test_each_internal_exists_and_its_library_still_uses_it(internal):
    owner = internal.resolve()
    example = EXAMPLES.get(f"{internal.module}:{internal.owner}")
    if internal.instance:
        assert example or internal.called_as, f"{internal.where}: an instance attribute needs an example or called_as"
        if example:
            assert hasattr(example(), internal.name), f"{internal.where} is no longer set: {internal.purpose}"
    else:
        assert hasattr(owner, internal.name), f"{internal.library} no longer has {internal.where}: {internal.purpose}"
    if internal.called_as:
        caller = internal.caller or f"{internal.module}:{internal.owner}"
        assert internal.called_as in inspect.getsource(_class(caller)), f"{caller} no longer contains {internal.called_as!r}"


@pytest.mark.parametrize("internal", [i for i in INTERNALS if i.read_only_in], ids=lambda i: i.where)
def test_what_posttrain_changes_late_is_read_only_where_it_ran_already(internal):
    """posttrain sets these after the caller's `read_only_in` methods ran (sft.py): no other method may read them."""
    caller = internal.caller or f"{internal.module}:{internal.owner}"
    readers = []
    for name, function in inspect.getmembers(_class(caller), inspect.isfunction):
        try:
            source = inspect.getsource(function)
        except (OSError, TypeError):
            continue
        if internal.name in source and name not in internal.read_only_in:
            readers.append(name)
    assert not readers, f"{caller} now reads {internal.name} in {readers}: posttrain's late change would reach them"


@pytest.mark.parametrize("internal", [i for i in INTERNALS if i.returns], ids=lambda i: i.where)
def test_tuple_results_have_the_fields_posttrain_reads(internal):
    """Every place the library unpacks the result takes as many values, and its main caller names them as listed."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(_class(f"{internal.module}:{internal.owner}"))))
    unpacked = [tuple(getattr(e, "id", "?") for e in node.targets[0].elts) for node in ast.walk(tree)
                if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == internal.name]
    assert unpacked and all(len(names) == len(internal.returns) for names in unpacked), unpacked
    assert internal.returns in unpacked, f"no caller unpacks {internal.returns}: {unpacked}"


def test_every_private_name_posttrain_reaches_is_listed():
    """A name posttrain reaches through require/returned, or replaces on a trainer, must be in the table."""
    listed = {i.name for i in INTERNALS}
    used = set()
    for path in [*(SRC / "algorithms").glob("*.py"), *(SRC / "generation").glob("*.py"), *(SRC / "models").glob("*.py")]:
        text = path.read_text()
        used |= set(re.findall(r"(?:require|returned)\([\w.]+, \"(\w+)\"", text))
        used |= set(re.findall(r"trainer\.(_\w+) = ", text))  # a replaced method
    assert {"_original_forward", "_reorder_linear_weight", "lora_variant", "layers", "_tool_call_loop", "eager_attention_forward"} <= used
    assert used <= listed, f"not in posttrain/internals.py: {sorted(used - listed)}"


def test_every_library_has_its_tested_version_and_names_are_not_shared_across_libraries():
    assert {i.library for i in INTERNALS} == set(TESTED_WITH)
    for name in {i.name for i in INTERNALS}:
        rows = [i for i in INTERNALS if i.name == name]
        assert len({i.library for i in rows}) == 1 and len({i.returns for i in rows}) == 1, name
    assert version("trl") == TESTED_WITH["trl"]  # pyproject.toml pins it


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


@pytest.mark.parametrize("library, obj, name", [
    ("torch", lambda: object(), "_version"),
    ("peft", _lora_linear, "lora_variant"),
    ("accelerate", lambda: __import__("torch").nn.Linear(2, 2), "_original_forward"),
    ("transformers", lambda: importlib.import_module("transformers.cache_utils").DynamicCache(), "layers"),
])
def test_the_refusal_names_the_library_attribute_and_both_versions(monkeypatch, library, obj, name):
    """Each library's own version, not TRL's: the message says which install to change, and to what."""
    target = obj()
    if hasattr(target, name):
        monkeypatch.delattr(target, name)
    with pytest.raises(UserError) as e:
        require(target, name)
    message = str(e.value)
    display = {"peft": "PEFT"}.get(library, library)
    assert f"{display} {version(library)} has no " in message and f".{name}, which posttrain uses for " in message
    assert f"tested with {library}=={TESTED_WITH[library]}" in message
    assert require(target, name, missing_ok=True) is None


def test_a_tuple_of_another_shape_is_refused():
    import trl
    from trl.trainer.grpo_trainer import GRPOTrainer

    trainer = GRPOTrainer.__new__(GRPOTrainer)
    fields = returned(trainer, "_tool_call_loop", ([1], [["m"]], [[2]], None, 3, 0, []), tool_call_count=int)
    assert (fields["completions"], fields["tool_call_count"], fields["tool_failure_count"]) == ([["m"]], 3, 0)
    for wrong in (([1], [["m"]], [[2]], None, 3, 0), ([1], [["m"]], [[2]], None, "3", 0, []), [1, 2]):
        with pytest.raises(UserError) as e:
            returned(trainer, "_tool_call_loop", wrong, tool_call_count=int)
        assert f"TRL {trl.__version__} returned " in str(e.value) and "GRPOTrainer._tool_call_loop where posttrain reads " \
            "(tool_mask, completions, completion_ids, logprobs, tool_call_count: int" in str(e.value)


def test_without_autocast_refuses_a_wrapped_model_without_its_float32_forward():
    import torch

    from posttrain.algorithms.common import without_autocast

    model = torch.nn.Linear(2, 2)
    with without_autocast(model, wrapped=False):  # not prepared yet (held-out scoring at step 0): nothing to undo
        pass
    with pytest.raises(UserError, match=r"accelerate .* has no accelerate\.accelerator\.Accelerator\._original_forward"):
        with without_autocast(model, wrapped=True):
            pass
    autocast_forward = model.forward
    model._original_forward = float32_forward = lambda x: x
    with without_autocast(model, wrapped=True):
        assert model.forward is float32_forward
    assert model.forward == autocast_forward


def test_soft_capped_attention_without_eager_is_refused_not_computed_without_its_cap(monkeypatch):
    """sdpa has no soft-capping: posttrain's CPU attention takes the family's eager attention for Gemma 2's
    layers, and refuses (exit 2, naming it) rather than falling back to sdpa if transformers drops it."""
    import torch
    from transformers.models.gemma2 import modeling_gemma2
    from transformers.models.gemma2.configuration_gemma2 import Gemma2Config

    from posttrain.models.cpu_attention import short_eager_else_sdpa

    config = Gemma2Config(hidden_size=16, num_attention_heads=2, num_key_value_heads=1, head_dim=8, num_hidden_layers=1)
    layer = modeling_gemma2.Gemma2Attention(config, layer_idx=0)
    q = k = v = torch.randn(1, 2, 4, 8)
    capped, _ = short_eager_else_sdpa(layer, q, k[:, :1], v[:, :1], None, softcap=5.0, scaling=0.35, dropout=0.0)
    reference, _ = modeling_gemma2.eager_attention_forward(layer, q, k[:, :1], v[:, :1], torch.triu(torch.full((4, 4), torch.finfo(q.dtype).min), 1),
                                                           softcap=5.0, scaling=0.35, dropout=0.0)
    assert torch.allclose(capped, reference, atol=1e-6)
    monkeypatch.delattr(modeling_gemma2, "eager_attention_forward")
    with pytest.raises(UserError, match=r"has no transformers\.models\.gemma2\.modeling_gemma2\.eager_attention_forward, which posttrain uses for soft-capped attention"):
        short_eager_else_sdpa(layer, q, k[:, :1], v[:, :1], None, softcap=5.0, scaling=0.35, dropout=0.0)
