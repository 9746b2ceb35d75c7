"""GRPO rollouts through posttrain's decoding loop keep packed and merged weight copies only while
they are of use: made for a step's rollouts, kept through its no-gradient log-prob passes, dropped
when the training pass begins (they would sit beside its activations, and the next rollout makes
them again anyway). A real tiny model under LoRA; the trainer around it is a shell of the fields
`route_generate` reads."""

from types import SimpleNamespace

import torch

from posttrain.algorithms.grpo import route_generate


def copies(model) -> tuple[int, int]:
    """(copies on trainable layers, copies on frozen ones)."""
    trained = frozen = 0
    for module in model.modules():
        owners = [module] if "_posttrain_packed" in module.__dict__ or "_posttrain_merged" in module.__dict__ else []
        owners += [p for p in module.parameters(recurse=False) if "_posttrain_packed" in p.__dict__]
        for owner in owners:
            params = list(owner.parameters()) if hasattr(owner, "parameters") else [owner]
            trained, frozen = (trained + 1, frozen) if any(p.requires_grad for p in params) else (trained, frozen + 1)
    return trained, frozen


def test_copies_of_trained_weights_are_dropped_when_training_begins(tiny_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32),
                           LoraConfig(r=4, target_modules="all-linear", lora_dropout=0.0))
    trainer = SimpleNamespace(model=model, is_fsdp_enabled=False, is_deepspeed_enabled=False,
                              args=SimpleNamespace(bf16=False, use_cpu=True), state=SimpleNamespace(global_step=0))
    assert route_generate(trainer, "posttrain").startswith("rollouts: posttrain's decoding loop")
    ids = tokenizer(["What is 2 + 3?"] * 4, return_tensors="pt")
    config = GenerationConfig(max_new_tokens=4, do_sample=True, pad_token_id=tokenizer.pad_token_id, eos_token_id=None)

    model.generate(input_ids=ids.input_ids, attention_mask=ids.attention_mask, generation_config=config)
    made = copies(model)
    assert made[0] > 0 and made[1] > 0  # the adapted layers' merged copies; the frozen lm_head's
    with torch.no_grad():
        model(**ids)  # a log-prob pass
    assert copies(model) == made
    model.generate(input_ids=ids.input_ids, attention_mask=ids.attention_mask, generation_config=config)  # a tool turn
    assert copies(model) == made
    model(**ids).logits.sum().backward()  # the training pass
    assert copies(model) == (0, made[1])  # frozen weights keep theirs for the run
    trainer.state.global_step = 1
    model.generate(input_ids=ids.input_ids, attention_mask=ids.attention_mask, generation_config=config)
    assert copies(model) == made  # the next step's rollout makes them again


def test_unset_the_engine_is_posttrains_loop_on_a_cpu_and_generate_on_a_gpu(tiny_dir):
    """posttrain's loop is the default only where it was measured (CPUs); on a GPU, until
    benchmarks/gpu_check.sh has measured it there, TRL's generate is, and the start-up line says so."""
    from transformers import AutoModelForCausalLM

    for device, line in (("cpu", "rollouts: posttrain's decoding loop (cpu's default: training.rollout_engine=posttrain)"),
                         ("cuda", "rollouts: transformers' generate (cuda's default: training.rollout_engine=transformers)")):
        model = AutoModelForCausalLM.from_pretrained(tiny_dir)
        original = model.generate
        trainer = SimpleNamespace(model=model, is_fsdp_enabled=False, is_deepspeed_enabled=False,
                                  accelerator=SimpleNamespace(device=torch.device(device)),
                                  args=SimpleNamespace(bf16=False, use_cpu=device == "cpu"), state=SimpleNamespace(global_step=0))
        assert route_generate(trainer, None) == line
        assert model.generate is not original  # routed either way: rollouts are timed
