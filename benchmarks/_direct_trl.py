"""The tiny SFT and GRPO recipes' runs written directly against TRL: the baselines of trl_overhead.py.

    python benchmarks/_direct_trl.py sft  MODEL_DIR DATA.jsonl OUT_DIR MAX_STEPS
    python benchmarks/_direct_trl.py grpo MODEL_DIR DATA.jsonl OUT_DIR MAX_STEPS

Same model, data, hyper-parameters and seed as recipes/sft/tiny-cpu.yaml and
recipes/grpo/tiny-cpu.yaml (GRPO: learning rate 1e-3 and the digit-share reward of
overhead_rewards.py, as trl_overhead.py overrides for posttrain); the prompt is rebuilt here by hand.
"""

import json
import sys
from pathlib import Path

import datasets
from transformers import AutoModelForCausalLM, AutoTokenizer

algorithm, model_dir, data_file, out_dir, max_steps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
tokenizer = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
dataset = datasets.load_dataset("json", data_files=data_file, split="train")
common = dict(output_dir=out_dir, max_steps=max_steps, activation_checkpointing=False, seed=0, bf16=False,
              dataloader_pin_memory=False, report_to="none")

if algorithm == "sft":
    from trl import SFTConfig, SFTTrainer

    config = SFTConfig(per_device_train_batch_size=16, learning_rate=3e-3, max_length=128, logging_steps=5, save_steps=15, **common)
    trainer = SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer)
else:
    from trl import GRPOConfig, GRPOTrainer

    system = open(sys.argv[6]).read()  # the system prompt text, passed by the benchmark

    def to_prompt(row):
        return {"prompt": [{"role": "system", "content": system}, {"role": "user", "content": row["question"]}],
                "answer": row["answer"].split("####")[-1].strip()}

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from overhead_rewards import digit_share  # the reward posttrain's run uses too

    dataset = dataset.map(to_prompt)
    config = GRPOConfig(per_device_train_batch_size=8, num_generations=4, max_completion_length=32, learning_rate=1e-3,
                        temperature=1.0, beta=0.04, logging_steps=1, save_steps=5, **common)
    trainer = GRPOTrainer(model=model, reward_funcs=[digit_share], args=config, train_dataset=dataset, processing_class=tokenizer)

result = trainer.train()
trainer.save_model(out_dir)
last = [r for r in trainer.state.log_history if "loss" in r][-1]
print(json.dumps({"train_loss": result.training_loss, "last_log": last}))
