"""The SFT run of recipes/sft/tiny-cpu.yaml written directly against TRL (the baseline for sft_overhead.py).

    python benchmarks/_direct_trl_sft.py MODEL_DIR DATA.jsonl OUT_DIR MAX_STEPS
"""

import json
import sys

import datasets
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer

model_dir, data_file, out_dir, max_steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tokenizer = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
dataset = datasets.load_dataset("json", data_files=data_file, split="train")
config = SFTConfig(
    output_dir=out_dir, max_steps=max_steps, per_device_train_batch_size=16, learning_rate=3e-3, max_length=128,
    activation_checkpointing=False, logging_steps=5, save_steps=15, seed=0, bf16=False, dataloader_pin_memory=False,
    report_to="none",
)
trainer = SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer)
result = trainer.train()
trainer.save_model(out_dir)
print(json.dumps({"train_loss": result.training_loss}))
