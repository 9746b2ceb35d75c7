"""CpuDropout: nn.Dropout's distribution from a cheaper CPU mask, swapped in before every LoRA layer."""

import pytest
import torch
from peft import LoraConfig, get_peft_model
from scipy.stats import binomtest, chi2_contingency
from transformers import AutoModelForCausalLM

from posttrain.models.cpu_dropout import CpuDropout, cheaper_lora_dropout

N = 1_000_000


def dropped(p: float, x: torch.Tensor) -> torch.Tensor:
    layer = CpuDropout(p).train()
    return layer(x) == 0


@pytest.mark.parametrize("p", [0.05, 0.3])
def test_each_element_drops_with_probability_p_and_the_rest_scale_by_one_over_keep(p):
    torch.manual_seed(0)
    x = torch.rand(N) + 0.5  # no zeros of its own
    y = CpuDropout(p).train()(x)
    drops = int((y == 0).sum())
    assert binomtest(drops, N, p).pvalue > 1e-3, drops / N
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] / (1 - p), rtol=1e-6, atol=0)


def test_neighbouring_elements_drop_independently():
    # Two elements share each 64-bit draw; a shared or correlated half would show in their joint counts.
    torch.manual_seed(1)
    mask = dropped(0.3, torch.ones(N)).view(-1, 2)
    both = int((mask[:, 0] & mask[:, 1]).sum())
    first, second = int(mask[:, 0].sum()), int(mask[:, 1].sum())
    table = [[both, first - both], [second - both, N // 2 - first - second + both]]
    assert chi2_contingency(table).pvalue > 1e-3, table
    # and consecutive calls draw fresh masks
    assert not torch.equal(dropped(0.3, torch.ones(N)), dropped(0.3, torch.ones(N)))


def test_gradient_passes_kept_elements_scaled_and_stops_at_dropped_ones():
    torch.manual_seed(2)
    x = (torch.rand(3, 50, 64) + 0.5).requires_grad_()
    y = CpuDropout(0.2).train()(x)
    y.sum().backward()
    torch.testing.assert_close(x.grad, (y != 0).float() / 0.8)


def test_seeded_runs_repeat_and_eval_mode_passes_inputs_through():
    x = torch.randn(4, 7, 33)  # an odd element count: half of the last 64-bit draw is unused
    torch.manual_seed(5)
    first = CpuDropout(0.5).train()(x)
    torch.manual_seed(5)
    assert torch.equal(first, CpuDropout(0.5).train()(x))
    assert CpuDropout(0.5).eval()(x) is x
    assert CpuDropout(0.0).train()(x) is x


def test_every_lora_dropout_of_a_peft_model_is_swapped_with_its_p(tiny_dir):
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_dir),
                           LoraConfig(r=4, lora_dropout=0.1, target_modules="all-linear", task_type="CAUSAL_LM"))
    layers = [m for m in model.modules() if hasattr(m, "lora_A")]
    note = cheaper_lora_dropout(model)
    assert note.startswith(f"LoRA dropout: {len(layers)} layers ")
    assert all(type(m.lora_dropout["default"]) is CpuDropout and m.lora_dropout["default"].p == 0.1 for m in layers)
    assert model.training and all(m.lora_dropout["default"].training for m in layers)
    assert cheaper_lora_dropout(model) is None  # nothing left to swap: a second call changes nothing
    # a training step runs through them and reaches every adapter (lora_B starts at zero; its gradient does not)
    ids = torch.randint(0, model.config.vocab_size, (2, 9))
    model(input_ids=ids, labels=ids).loss.backward()
    assert all(p.grad.abs().sum() > 0 for n, p in model.named_parameters() if "lora_B" in n)


def test_without_lora_dropout_nothing_is_swapped(tiny_dir):
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_dir), LoraConfig(r=4, lora_dropout=0.0, task_type="CAUSAL_LM"))
    assert cheaper_lora_dropout(model) is None
    assert cheaper_lora_dropout(AutoModelForCausalLM.from_pretrained(tiny_dir)) is None


def test_activation_checkpointing_recomputes_the_same_masks(tiny_dir):
    # posttrain checkpoints by default: the backward pass reruns each layer's forward, dropout included.
    # A different mask there would give silently wrong gradients; they must equal those of a plain pass.
    def lora_grads(checkpointing: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_dir),
                               LoraConfig(r=4, lora_dropout=0.5, target_modules="all-linear", task_type="CAUSAL_LM", init_lora_weights=False))
        cheaper_lora_dropout(model)
        if checkpointing:
            model.base_model.model.activation_checkpointing_enable({"use_reentrant": False})
            model.enable_input_require_grads()
        model.train()
        torch.manual_seed(1)
        ids = torch.randint(0, model.config.vocab_size, (2, 9))
        torch.manual_seed(2)
        model(input_ids=ids, labels=ids).loss.backward()
        return [p.grad for n, p in model.named_parameters() if "lora_" in n]

    plain, checkpointed = lora_grads(False), lora_grads(True)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(plain, checkpointed, strict=True))
