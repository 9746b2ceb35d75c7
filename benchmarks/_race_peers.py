"""The two peers of defaults_race.py: plain TRL with its own defaults, and FAI-RL 0.2.x's defaults
reproduced in a plain TRL script (FAI-RL itself is not installed).

    python benchmarks/_race_peers.py {trl|fairl} {sft|dpo|grpo} MODEL_DIR TRAIN.jsonl OUT_DIR [--lora]

--lora (the race's --real): TRL as `trl sft --use_peft` configures it (trl.ModelConfig's defaults:
r 16, alpha 32, dropout 0.05, no target modules, so PEFT's defaults for the architecture: q_proj and
v_proj on Llama); FAI-RL as its shipped LoRA recipes (recipes/training/*/llama3_3B_lora.yaml: r 8,
alpha 16, dropout 0.05, q/k/v/o/gate/up/down_proj, bias none) through core/trainer_base.py
apply_lora_to_model, and its DPO then has no separate reference model (dpo_trainer.py setup_model).

Every contestant of the race gets the same forced settings and nothing else (defaults_race.py
lists them): `num_train_epochs=1` (the budget: one pass over the same data, hence the same real
tokens), `logging_steps=1` (so the last log holds the token count of the whole pass),
`save_steps=0.2` for SFT/DPO (checkpoints at 20/40/60/80 % for the eval-loss curve),
`report_to="none"` (no tracker: they would add start-up time and need a network). TRL on a CPU-only
machine also gets `use_cpu=True`: without it its bf16 default is an error. Prints one JSON
line: the trainer's summary and its log history.

TRL ("what `trl sft` would do"): the model is given as a path and loaded by TRL; SFTConfig /
DPOConfig / GRPOConfig defaults for everything else: bf16=True (even on a CPU), gradient
checkpointing on, batch 8, learning rate 2e-5 (SFT) / 1e-6 (DPO, GRPO), no packing, DPO's
reference model a second copy, GRPO's 8 generations of up to 512 tokens and beta=0.

FAI-RL 0.2.x (github.com/Roblox/FAI-RL, read at 0.2.19, which pins trl 1.2.0; run here on the
installed TRL). Its trainers build the TRL config from a fixed list of keys; everything else is
TRL's default. Effective settings for a recipe that sets only model, data, algorithm, output_dir:

| setting | FAI-RL value | source |
|---|---|---|
| per_device_train_batch_size / eval | 1 / 1 | core/config.py TrainingConfig |
| gradient_accumulation_steps | 16 | core/config.py TrainingConfig |
| learning_rate | 1e-6 | core/config.py TrainingConfig |
| warmup_steps | 50 | core/config.py TrainingConfig |
| num_train_epochs | 3 (the race forces 1) | core/config.py TrainingConfig |
| bf16 / model dtype | True / bfloat16 weights on CUDA; False / float32 on CPU | core/config.py (bf16=True, torch_dtype="bfloat16"); utils/device_utils.py adapt_config_for_device (CPU: bf16=fp16=False, torch_dtype float32) |
| gradient_checkpointing | True, use_reentrant=False; model.config.use_cache=False | core/config.py; trainers/*_trainer.py setup_training_args; core/trainer_base.py disable_cache_for_gradient_checkpointing |
| dataloader_drop_last / pin_memory / num_workers | True / False / 0 | core/config.py TrainingConfig |
| remove_unused_columns | False | core/config.py DataConfig |
| max_length | 512 (SFT, DPO) | core/config.py DataConfig; sft_trainer.py / dpo_trainer.py |
| max_completion_length (GRPO) | 512 - 256 = 256 | grpo_trainer.py: data.max_length - data.max_prompt_length |
| num_generations (GRPO) | 8 | core/config.py TrainingConfig |
| beta | DPO 0.1, GRPO 0.0 (TRL's: FAI-RL never forwards its beta) | dpo_trainer.py / grpo_trainer.py setup_training_args |
| save_only_model / prediction_loss_only | True / True (DPO, GRPO) | dpo_trainer.py / grpo_trainer.py |
| completion_only_loss (SFT) | True in split mode (user_prompt + assistant_prompt: chat prompt/completion rows) | sft_trainer.py setup_data / setup_training_args |
| tokenizer | padding_side="left"; adds a new "[PAD]" special token and resizes the embeddings | core/trainer_base.py setup_tokenizer_with_model |
| DPO reference | a second full model loaded from the same path (no LoRA) | dpo_trainer.py setup_model |
| GRPO prompts | chat template applied to a string before TRL; no processing_class passed | grpo_trainer.py setup_data / setup_trainer |
| attention | not set on CPU (transformers' default); sdpa on CUDA | utils/device_utils.py resolve_transformers_attn_implementation |

Not reproduced, on purpose: 0.2.19's 10 % eval hold-out with early stopping (it would train on
10 % fewer tokens than the other contestants; its eval every 500 steps never fires at race sizes),
wandb/S3 callbacks (off by default), the HTTP reward API (the race's reward is the same local
function for everyone: race_rewards.answer_reward).
"""

import json
import sys
from pathlib import Path

import datasets
import torch

HERE = Path(__file__).resolve().parent
peer, algorithm, model_dir, data_file, out_dir = sys.argv[1:6]
LORA = "--lora" in sys.argv[6:]
FORCED = dict(output_dir=out_dir, num_train_epochs=1, logging_steps=1, report_to="none")
# TRL's bf16=True on a machine without a GPU stops at once ("Your setup doesn't support bf16/gpu. You
# need to assign use_cpu"): the TRL contestant does what that message says and keeps bf16.
TRL_CPU = {} if torch.cuda.is_available() else {"use_cpu": True}
if algorithm in ("sft", "dpo"):
    FORCED["save_steps"] = 0.2
dataset = datasets.load_dataset("json", data_files=data_file, split="train")
sys.path.insert(0, str(HERE))
from race_rewards import answer_reward  # noqa: E402  (the reward every contestant uses)


def fairl_model_and_tokenizer():
    """FAI-RL's loading: dtype by device, then the tokenizer that always adds "[PAD]" and resizes."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cuda = torch.cuda.is_available()
    kwargs = dict(dtype=torch.bfloat16 if cuda else torch.float32, low_cpu_mem_usage=True)
    if cuda:
        kwargs["attn_implementation"] = "sdpa"
    model = AutoModelForCausalLM.from_pretrained(model_dir, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    tokenizer.add_special_tokens({"pad_token": "[PAD]"})
    model.resize_token_embeddings(len(tokenizer))
    model.config.use_cache = False  # disable_cache_for_gradient_checkpointing
    return model, tokenizer, kwargs


def trl_peft():
    """What `trl ... --use_peft` passes as peft_config: trl.get_peft_config(ModelConfig(use_peft=True))."""
    if not LORA:
        return {}
    from trl import ModelConfig, get_peft_config

    return {"peft_config": get_peft_config(ModelConfig(use_peft=True))}


def fairl_lora(model):
    if not LORA:
        return model
    from peft import LoraConfig, TaskType, get_peft_model

    return get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05, bias="none", task_type=TaskType.CAUSAL_LM,
                                            target_modules=["q_proj", "v_proj", "k_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))


def fairl_common() -> dict:
    cuda = torch.cuda.is_available()
    return dict(per_device_train_batch_size=1, gradient_accumulation_steps=16, learning_rate=1e-6, max_steps=-1,
                warmup_steps=50, bf16=cuda, fp16=False, remove_unused_columns=False, dataloader_num_workers=0,
                gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": False},
                dataloader_pin_memory=False, dataloader_drop_last=True, ddp_find_unused_parameters=False,
                eval_steps=500, **FORCED)


if algorithm == "sft":
    from trl import SFTConfig, SFTTrainer

    if peer == "trl":
        trainer = SFTTrainer(model=model_dir, args=SFTConfig(**FORCED, **TRL_CPU), train_dataset=dataset, **trl_peft())
    else:
        model, tokenizer, _ = fairl_model_and_tokenizer()
        model = fairl_lora(model)
        # FAI-RL's split mode builds each row as a chat prompt / completion pair from its columns.
        dataset = dataset.map(lambda row: {"prompt": row["messages"][:-1], "completion": row["messages"][-1:]},
                              remove_columns=["messages"])
        config = SFTConfig(per_device_eval_batch_size=1, max_length=512, dataset_num_proc=1, completion_only_loss=True,
                           **fairl_common())
        trainer = SFTTrainer(model=model, args=config, processing_class=tokenizer, train_dataset=dataset)
elif algorithm == "dpo":
    from trl import DPOConfig, DPOTrainer

    if peer == "trl":
        trainer = DPOTrainer(model=model_dir, args=DPOConfig(**FORCED, **TRL_CPU), train_dataset=dataset, **trl_peft())
    else:
        from transformers import AutoModelForCausalLM

        model, tokenizer, kwargs = fairl_model_and_tokenizer()
        ref_model = None
        if not LORA:
            ref_model = AutoModelForCausalLM.from_pretrained(model_dir, **kwargs)
            ref_model.resize_token_embeddings(len(tokenizer))
            ref_model.config.use_cache = False
        model = fairl_lora(model)
        config = DPOConfig(max_length=512, save_only_model=True, prediction_loss_only=True, **fairl_common())
        trainer = DPOTrainer(model=model, ref_model=ref_model, args=config, processing_class=tokenizer, train_dataset=dataset)
else:
    from trl import GRPOConfig, GRPOTrainer

    if peer == "trl":
        trainer = GRPOTrainer(model=model_dir, reward_funcs=[answer_reward], args=GRPOConfig(**FORCED, **TRL_CPU), train_dataset=dataset,
                              **trl_peft())
    else:
        model, tokenizer, _ = fairl_model_and_tokenizer()
        model = fairl_lora(model)
        dataset = dataset.map(lambda row: {"prompt": tokenizer.apply_chat_template(row["prompt"], tokenize=False,
                                                                                   add_generation_prompt=True)})
        config = GRPOConfig(save_only_model=True, prediction_loss_only=True, num_generations=8, max_completion_length=256,
                            **fairl_common())
        trainer = GRPOTrainer(model=model, reward_funcs=[answer_reward], args=config, train_dataset=dataset)

result = trainer.train()
trainer.save_model(out_dir)
print(json.dumps({"metrics": result.metrics, "log_history": trainer.state.log_history}))
