"""GPU kernel options (Liger, the attention implementation) are checked by `posttrain validate`: a
machine that cannot run them gets exit 2 naming the key, the package and the device, not a
traceback once the model loads."""

import importlib.util

import pytest

from posttrain.recipe import preflight as preflight_module
from posttrain.recipe.errors import RecipeError
from posttrain.recipe.load import load_recipe
from posttrain.recipe.preflight import has_cuda, kernel_problems

NO_CUDA = pytest.mark.skipif(has_cuda(), reason="checks what a machine without a CUDA GPU is told")


def recipe(*overrides: str):
    return load_recipe("recipes/grpo/tiny-cpu.yaml", list(overrides)).recipe


@pytest.fixture(autouse=True)
def at_repo_root(repo, monkeypatch):
    monkeypatch.chdir(repo)


@NO_CUDA
@pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is not None, reason="liger-kernel is installed here")
def test_liger_without_its_package_or_a_gpu_exits_2(cli):
    result = cli("validate", "recipes/grpo/tiny-cpu.yaml", "training.use_liger_kernel=true")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "training.use_liger_kernel: needs the liger-kernel package" in result.stderr and "pip install liger-kernel" in result.stderr
    assert "need a CUDA GPU and none is visible" in result.stderr


@NO_CUDA
@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash-attn is installed here")
def test_flash_attention_without_its_package_or_a_gpu_exits_2(cli):
    result = cli("validate", "recipes/grpo/tiny-cpu.yaml", "model.attn_implementation=flash_attention_2")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "model.attn_implementation: flash_attention_2 needs a CUDA GPU" in result.stderr
    assert "pip install flash-attn" in result.stderr


def test_a_gpu_too_old_for_flash_attention_3_is_named(monkeypatch):
    monkeypatch.setattr(preflight_module, "has_cuda", lambda: True)
    monkeypatch.setattr(preflight_module, "gpu_compute_capability", lambda: 7.5)
    messages = [p.message for p in kernel_problems(recipe("model.attn_implementation=flash_attention_3"))]
    assert any("compute capability 8.0 or newer; this one is 7.5" in m for m in messages)


@pytest.mark.parametrize("name", ["eager", "sdpa", None])
def test_portable_attention_needs_nothing(name):
    overrides = [f"model.attn_implementation={name}"] if name else []
    assert kernel_problems(recipe(*overrides)) == []


def test_an_unknown_attention_name_is_a_schema_error_with_a_suggestion():
    with pytest.raises(RecipeError) as e:
        recipe("model.attn_implementation=spda")
    assert "model.attn_implementation" in str(e.value) and "Did you mean 'sdpa'?" in str(e.value)


def test_a_hub_kernel_needs_the_kernels_package(monkeypatch):
    # transformers >= 5.25 installs kernels itself: the machine without it is simulated
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(preflight_module.importlib.util, "find_spec", lambda name, *a: None if name == "kernels" else find_spec(name, *a))
    messages = [p.message for p in kernel_problems(recipe("model.attn_implementation=kernels-community/flash-attn2"))]
    assert messages == ["the hub kernel 'kernels-community/flash-attn2' needs the kernels package: pip install kernels (or use sdpa)."]


def test_liger_config_without_liger_is_a_dead_key():
    with pytest.raises(RecipeError, match="training.liger_kernel_config.*only applies with training.use_liger_kernel=true"):
        recipe("training.liger_kernel_config={rope: true}")

