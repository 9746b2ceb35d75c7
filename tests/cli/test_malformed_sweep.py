"""A sweep of malformed input across every command: recipes, overrides, data files, model folders
and CLI flags. Each case must exit 2, name the key or file at fault, print no traceback, and write
nothing (the working directory and output_dir are compared before and after).

Cases run in-process through `posttrain.cli.main` (an unexpected exception fails the test, as a
traceback would fail a user); each gets a fresh working directory holding a valid recipe `r.yaml`,
valid data files and whatever broken files the case adds. Placeholders in argv and file contents:
`{tiny}` the tiny model directory, `{cwd}` the working directory.

Cases are grouped by what is malformed. Add a case by adding a line; give it the text the error
must contain (a key path or file name).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
import yaml

from posttrain.cli import main

SFT_ROWS = "".join(json.dumps({"prompt": f"{i} + 1 =", "completion": f" {i + 1}"}) + "\n" for i in range(8))
PAIRS = "".join(json.dumps({"prompt": f"{i} + 1 =", "chosen": f" {i + 1}", "rejected": " no"}) + "\n" for i in range(8))
PROBLEMS = "".join(json.dumps({"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1} #### {i + 1}"}) + "\n" for i in range(8))


def recipe(algorithm="sft", data="sft.jsonl", **training) -> str:
    raw = {"model": {"base_model_name": "tiny:qwen2-1m"}, "data": {"datasets": [{"name": data}]},
           "training": {"algorithm": algorithm, "output_dir": "out", "max_steps": 1, **training}}
    if algorithm in ("grpo", "gspo"):
        raw["data"]["datasets"][0]["template"] = "gsm8k"
        raw["training"].update(rewards=[{"name": "answer_match"}], num_generations=2, per_device_train_batch_size=2,
                               max_completion_length=4)
    return yaml.safe_dump(raw)


BASE_FILES = {"r.yaml": recipe(), "sft.jsonl": SFT_ROWS, "pairs.jsonl": PAIRS, "problems.jsonl": PROBLEMS,
              "grpo.yaml": recipe("grpo", "problems.jsonl"), "dpo.yaml": recipe("dpo", "pairs.jsonl")}


@dataclass
class Case:
    argv: list[str]
    expect: list[str]  # each must appear in stderr
    files: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


T, V = ["train", "r.yaml"], ["validate", "r.yaml"]

CASES: dict[str, Case] = {
    # ---------------------------------------------------------------- recipe files
    "recipe is a list": Case(["validate", "bad.yaml"], ["bad.yaml must hold a mapping"], {"bad.yaml": "- a\n- b\n"}),
    "recipe is empty": Case(["validate", "bad.yaml"], ["model", "is required"], {"bad.yaml": ""}),
    "recipe yaml syntax": Case(["train", "bad.yaml"], ["bad.yaml is not valid YAML"], {"bad.yaml": "model: [unclosed\n"}),
    "recipe is a directory": Case(["validate", "adir"], ["'adir' does not exist (it is a directory)"], {"adir/x": ""}),
    "recipe missing": Case(["train", "nope.yaml"], ["'nope.yaml' does not exist"]),
    "recipe tab indentation": Case(["validate", "bad.yaml"], ["bad.yaml is not valid YAML"], {"bad.yaml": "model:\n\tbase_model_name: x\n"}),
    "model section missing": Case(["validate", "bad.yaml"], ["model", "is required"], {"bad.yaml": "data: {datasets: [{name: sft.jsonl}]}\ntraining: {algorithm: sft}\n"}),
    "model section null": Case(V + ["model=null"], ["model"]),
    "training is a list": Case(V + ["training=[1, 2]"], ["training"]),
    "algorithm missing": Case(["validate", "bad.yaml"], ["training.algorithm is required"], {"bad.yaml": "model: {base_model_name: 'tiny:'}\ndata: {datasets: [{name: sft.jsonl}]}\ntraining: {output_dir: o}\n"}),
    "unknown section": Case(V + ["modle.x=1"], ["unknown key 'modle'"]),
    "base_model_name a number": Case(V + ["model.base_model_name=123"], ["model.base_model_name"]),
    # the held_out section: its items are read before the model loads, by train and validate alike
    "held_out file missing": Case(T + ["held_out={task: custom, data: nope.jsonl}"], ["held_out.data", "'nope.jsonl' does not exist"]),
    "held_out column missing": Case(V + ["held_out={task: custom, data: sft.jsonl}"], ["held_out.data", "no 'answer' column", "held_out.answer_column"]),
    "held_out more items than the file": Case(T + ["held_out={task: custom, data: problems.jsonl, prompt_column: question, n: 9}"],
                                              ["held_out.n", "the task has only 8 items"]),
    "held_out custom without data": Case(V + ["held_out={task: custom}"], ["held_out", "needs held_out.data"]),
    "held_out every zero": Case(T + ["held_out={task: arithmetic, every: 0}"], ["held_out.every"]),
    "held_out patience without a best model": Case(V + ["held_out={task: arithmetic, patience: 2, keep_best: none}"],
                                                   ["held_out", "patience", "needs held_out.keep_best strict or loose"]),
    "held_out flag without section": Case(V + ["training.stop_on=[held_out_regression]"], ["training.stop_on", "no held_out section"]),
    "datasets empty": Case(V + ["data.datasets=[]"], ["data.datasets", "is empty"]),
    "datasets a string": Case(V + ["data.datasets=sft.jsonl"], ["data.datasets"]),
    "dataset without name": Case(V + ["data.datasets=[{split: train}]"], ["data.datasets[0].name", "is required"]),
    "learning_rate a word": Case(V + ["training.learning_rate=fast"], ["training.learning_rate"]),
    "max_steps fractional": Case(V + ["training.max_steps=1.5"], ["training.max_steps"]),
    "epochs negative": Case(V + ["training.num_train_epochs=-1"], ["training.num_train_epochs", "out of range"]),
    "batch size zero": Case(T + ["training.per_device_train_batch_size=0"], ["training.per_device_train_batch_size", "must be >= 1"]),
    "accumulation zero": Case(T + ["training.gradient_accumulation_steps=0"], ["training.gradient_accumulation_steps"]),
    "negative learning rate": Case(T + ["training.learning_rate=-1e-4"], ["training.learning_rate", "must be >= 0"]),
    "warmup negative": Case(V + ["training.warmup_steps=-5"], ["training.warmup_steps"]),
    "max_grad_norm negative": Case(V + ["training.max_grad_norm=-1"], ["training.max_grad_norm"]),
    "eval_steps without strategy": Case(T + ["training.eval_steps=5"], ["training.eval_steps", "eval_strategy"]),
    "save_steps with epoch saving": Case(V + ["training.save_strategy=epoch", "training.save_steps=3"], ["training.save_steps"]),
    "lora keys without lora": Case(T + ["model.lora_r=8"], ["model.lora_r", "use_lora"]),
    "qlora without lora": Case(V + ["model.load_in_4bit=true"], ["model.use_lora"]),
    "lora rank zero": Case(V + ["model.use_lora=true", "model.lora_r=0"], ["model.lora_r"]),
    "lora dropout one": Case(V + ["model.use_lora=true", "model.lora_dropout=1.0"], ["model.lora_dropout"]),
    "torch_dtype unknown": Case(V + ["model.torch_dtype=fp8"], ["model.torch_dtype", "fp8"]),
    "cpt ignores format": Case(["validate", "c.yaml"], ["data.datasets[0].format", "always reads 'text'"],
                               {"c.yaml": recipe("cpt").replace("- name: sft.jsonl", "- format: messages\n    name: sft.jsonl")}),
    "dpo ignores format": Case(["validate", "dpo.yaml", "data.datasets[0].format=prompt_completion"], ["data.datasets[0].format"]),
    "dpo never reads completion_column": Case(["validate", "dpo.yaml", "data.datasets[0].completion_column=x"], ["data.datasets[0].completion_column"]),
    "sft with answer_column": Case(V + ["data.datasets[0].answer_column=gold"], ["data.datasets[0].answer_column"]),
    "sft with system_prompt": Case(V + ["data.system_prompt=hi"], ["data.system_prompt"]),
    "eval_fraction above 1": Case(V + ["data.eval_fraction=1.5"], ["data.eval_fraction"]),
    "eval data without strategy": Case(V + ["data.eval_fraction=0.2"], ["training.eval_strategy"]),
    "max_samples zero": Case(V + ["data.datasets[0].max_samples=0"], ["data.datasets[0].max_samples"]),
    "weight negative": Case(V + ["data.datasets[0].weight=-1"], ["data.datasets[0].weight"]),
    "format unknown": Case(V + ["data.datasets[0].format=chat"], ["data.datasets[0].format", "chat"]),
    "template on sft": Case(V + ["data.datasets[0].template=gsm8k"], ["data.datasets[0].template"]),
    "tracking key without service": Case(V + ["tracking.api_key=abc"], ["tracking"]),
    "tracking offline not wandb": Case(V + ["tracking.provider=tensorboard", "tracking.mode=offline"], ["tracking"]),
    "s3 empty bucket": Case(V + ["s3.bucket="], ["s3.bucket"]),
    "s3 delete without upload": Case(V + ["s3.bucket=b", "s3.upload_checkpoints=false", "s3.delete_local_after_upload=true"], ["s3"]),
    "fp16 and bf16": Case(V + ["training.fp16=true", "training.bf16=true"], ["training.fp16"]),
    "removed upstream key": Case(V + ["training.max_seq_length=64"], ["training.max_seq_length"]),
    "owned elsewhere": Case(V + ["training.report_to=wandb"], ["training.report_to", "tracking.provider"]),
    "early stopping without eval": Case(V + ["training.early_stopping_patience=2"], ["training.early_stopping_patience"]),
    "output_dir is a file": Case(T + ["training.output_dir=afile"], ["training.output_dir", "afile"], {"afile": "x"}),
    "resume from a missing checkpoint": Case(T + ["training.resume_from_checkpoint=ckpt/checkpoint-9"], ["training.resume_from_checkpoint", "checkpoint-9"]),
    # GRPO / GSPO / DPO recipes
    "grpo one generation": Case(["train", "grpo.yaml", "training.num_generations=1"], ["training.num_generations", "at least 2"]),
    "grpo no rewards": Case(["validate", "grpo.yaml", "training.rewards=[]"], ["training.rewards"]),
    "grpo unknown reward": Case(["validate", "grpo.yaml", "training.rewards=[{name: answer_mach}]"], ["training.rewards[0]", "answer_mach"]),
    "grpo reward bad option": Case(["validate", "grpo.yaml", "training.rewards=[{name: answer_match, colum: x}]"], ["training.rewards[0]", "colum"]),
    "grpo reward module missing": Case(["train", "grpo.yaml", "training.rewards=[{name: 'nosuchmod:fn'}]"], ["nosuchmod"]),
    "grpo batch not whole groups": Case(["validate", "grpo.yaml", "training.num_generations=3"], ["training.num_generations", "whole groups"]),
    "grpo temperature zero": Case(["validate", "grpo.yaml", "training.temperature=0"], ["training.temperature"]),
    "grpo top_p above 1": Case(["validate", "grpo.yaml", "training.top_p=1.5"], ["training.top_p"]),
    "grpo format ignored": Case(["validate", "grpo.yaml", "data.datasets[0].format=text"], ["data.datasets[0].format"]),
    "gspo on-policy": Case(["validate", "grpo.yaml", "training.algorithm=gspo", "training.steps_per_generation=1"], ["training.steps_per_generation"]),
    "gspo token level": Case(["validate", "grpo.yaml", "training.algorithm=gspo", "training.importance_sampling_level=token"], ["training.importance_sampling_level"]),
    "grpo tiny epsilon": Case(["validate", "grpo.yaml", "training.epsilon=3e-4"], ["training.epsilon"]),
    "dpo beta zero": Case(["validate", "dpo.yaml", "training.beta=0"], ["training.beta"]),
    # ---------------------------------------------------------------- overrides
    "override malformed path": Case(V + ["a..b=1"], ["malformed key path 'a..b'"]),
    "override empty key": Case(V + ["=5"], ["malformed key path"]),
    "override index out of range": Case(V + ["data.datasets[9].name=x.jsonl"], ["data.datasets[9]", "out of range"]),
    "override indexes a scalar": Case(V + ["model.base_model_name[0]=x"], ["model.base_model_name is not a list"]),
    "override into a scalar": Case(V + ["model.base_model_name.x=1"], ["model.base_model_name"]),
    "override unclosed list": Case(V + ["training.max_steps=[1,"], ["training.max_steps"]),
    "override 1:30 is text": Case(V + ["training.max_steps=1:30"], ["training.max_steps", "'1:30'"]),
    "override without value sign": Case(T + ["training.max_steps"], ["expected key.path=value"]),
    "override typo did you mean": Case(V + ["training.lerning_rate=1"], ["training.lerning_rate", "learning_rate"]),
    "override typo of a section": Case(V + ["modle.use_lora=true"], ["modle (from override)", "Did you mean 'model'?"]),
    "warmup_ratio removed upstream": Case(V + ["training.warmup_ratio=0.1"], ["training.warmup_ratio", "training.warmup_steps=0.1"]),
    # ---------------------------------------------------------------- data files
    "data file missing": Case(T + ["data.datasets[0].name=gone.jsonl"], ["gone.jsonl", "does not exist"]),
    "data file empty": Case(T + ["data.datasets[0].name=empty.jsonl"], ["empty.jsonl", "is empty"], {"empty.jsonl": ""}),
    "data file broken json": Case(T + ["data.datasets[0].name=bad.jsonl"], ["bad.jsonl"], {"bad.jsonl": '{"prompt": "a", "completion": \n'}),
    "data file wrong suffix": Case(T + ["data.datasets[0].name=./data.txt"], ["data.txt", "must be one of"], {"data.txt": "hello\n"}),
    "data folder typo taken for a hub id": Case(V + ["data.datasets[0].name=data/train"], ["data.datasets[0].name", "'data/train' does not exist",
                                                                                         "not a hub dataset id"], {"data/.keep": ""}),
    "data file is a directory": Case(T + ["data.datasets[0].name=dir.jsonl"], ["dir.jsonl", "is a directory"], {"dir.jsonl/x": ""}),
    "data local test split": Case(T + ["data.datasets[0].split=test[:10]"], ["data.datasets[0].split", "single split"]),
    "data local subset": Case(V + ["data.datasets[0].subset=main"], ["data.datasets[0].subset"]),
    "data csv without columns": Case(T + ["data.datasets[0].name=d.csv", "data.datasets[0].format=prompt_completion"], ["d.csv", "'prompt'"], {"d.csv": "a,b\n1,2\n"}),
    "data parquet that is text": Case(T + ["data.datasets[0].name=d.parquet"], ["d.parquet"], {"d.parquet": "not parquet at all\n"}),
    "data json not rows": Case(T + ["data.datasets[0].name=d.json"], ["d.json"], {"d.json": "42\n"}),
    "data all rows empty": Case(T + ["data.datasets[0].name=e.jsonl"], ["e.jsonl", "no usable rows"], {"e.jsonl": json.dumps({"prompt": "", "completion": "x"}) + "\n"}),
    "data messages malformed": Case(T + ["data.datasets[0].name=m.jsonl"], ["m.jsonl"], {"m.jsonl": json.dumps({"messages": "hello"}) + "\n"}),
    "dpo data without rejected": Case(["train", "dpo.yaml", "data.datasets[0].name=p.jsonl"], ["p.jsonl", "data.datasets[0].rejected_column=<column>"], {"p.jsonl": json.dumps({"prompt": "a", "chosen": "b"}) + "\n"}),
    "sft data question/response": Case(T + ["data.datasets[0].name=qr.jsonl"], ["qr.jsonl", "data.datasets[0].prompt_column=<column>", "data.datasets[0].completion_column=<column>"],
                                       {"qr.jsonl": json.dumps({"question": "1+1", "response": "2"}) + "\n"}),
    "grpo data without answer": Case(["train", "grpo.yaml", "data.datasets[0].name=q.jsonl"], ["q.jsonl", "answer"], {"q.jsonl": json.dumps({"question": "a"}) + "\n"}),
    "grpo gold answers all latex": Case(["train", "grpo.yaml", "data.datasets[0].name=q.jsonl"], ["q.jsonl", "not a number the rewards can compare"],
                                        {"q.jsonl": json.dumps({"question": "half?", "answer": "#### \\frac{1}{2}"}) + "\n"}),
    # ---------------------------------------------------------------- model folders
    "model dir empty": Case(T + ["model.base_model_name=./m"], ["model.base_model_name", "neither a model"], {"m/.keep": ""}),
    "model dir bad config": Case(T + ["model.base_model_name=./m"], ["model.base_model_name", "m"], {"m/config.json": "{not json"}),
    "model dir config without type": Case(T + ["model.base_model_name=./m"], ["model.base_model_name"], {"m/config.json": "{}"}),
    "model path is a file": Case(T + ["model.base_model_name=./weights.bin"], ["model.base_model_name", "not a directory"], {"weights.bin": "x"}),
    "adapter without base": Case(T + ["model.base_model_name=./a"], ["model.base_model_name", "base_model_name_or_path"], {"a/adapter_config.json": "{}"}),
    "adapter config not json": Case(T + ["model.base_model_name=./a"], ["adapter_config.json"], {"a/adapter_config.json": "{"}),
    "adapter base missing": Case(T + ["model.base_model_name=./a"], ["model.base_model_name"],
                                 {"a/adapter_config.json": json.dumps({"base_model_name_or_path": "{cwd}/no-such-base", "r": 4})}),
    "model path under a local folder": Case(T + ["model.base_model_name=runs/nope"], ["model.base_model_name", "runs/nope does not exist"], {"runs/.keep": ""}),
    "resume conflicts with output_dir": Case(T, ["training.resume_from_checkpoint", "resume_from_checkpoint=false", "training.learning_rate"], {
        "out/checkpoint-2/trainer_state.json": json.dumps({"global_step": 2}), "out/checkpoint-2/model.safetensors": "w",
        "out/checkpoint-2/posttrain_recipe.yaml": recipe().replace("max_steps: 1", "max_steps: 1\n  learning_rate: 0.5")}),
    "tiny spec unknown": Case(T + ["model.base_model_name=tiny:gpt9"], ["model.base_model_name"]),
    "s3 model uri without key": Case(V + ["model.base_model_name=s3://"], ["model.base_model_name"]),
    # ---------------------------------------------------------------- CLI flags, every command
    "train without recipe": Case(["train"], ["no recipe given"]),
    "train two recipes": Case(["train", "r.yaml", "r.yaml"], ["expected key.path=value", "r.yaml"]),
    "validate unknown flag": Case(V + ["--bogus"], ["--bogus"]),
    "no command": Case([], ["COMMAND"]),
    "unknown command": Case(["trian"], ["trian"]),
    "inspect missing path": Case(["inspect", "nowhere"], ["nowhere"]),
    "inspect folder without weights": Case(["inspect", "m"], ["m"], {"m/config.json": "{}"}),
    "inspect corrupt safetensors": Case(["inspect", "w.safetensors"], ["w.safetensors"], {"w.safetensors": "garbage"}),
    "make-tiny-model bad size": Case(["make-tiny-model", "t", "--size", "9m"], ["--size"]),
    "make-tiny-model onto a file": Case(["make-tiny-model", "afile"], ["afile"], {"afile": "x"}),
    "make-tiny-model onto a trained model": Case(["make-tiny-model", "m"], ["'m' is not empty", "--force"], {"m/model.safetensors": "trained"}),
    "eval n negative": Case(["eval", "--model", "tiny:qwen2-1m", "--task", "arithmetic", "--n", "-3"], ["--n", "out of range"]),
    "compare n negative": Case(["compare", "--arm", "a=tiny:qwen2-1m", "--task", "arithmetic", "--n", "-1"], ["--n", "out of range"]),
    "generate missing prompts": Case(["generate", "--model", "tiny:qwen2-1m", "--prompts", "gone.jsonl"], ["gone.jsonl"]),
    "generate prompts wrong suffix": Case(["generate", "--model", "tiny:qwen2-1m", "--prompts", "p.csv"], ["p.csv"], {"p.csv": "prompt\nhi\n"}),
    "generate n zero": Case(["generate", "--model", "tiny:qwen2-1m", "--prompts", "p.txt", "--n", "0"], ["--n"], {"p.txt": "hi\n"}),
    "generate bad json line": Case(["generate", "--model", "tiny:qwen2-1m", "--prompts", "p.jsonl"], ["p.jsonl:1"], {"p.jsonl": "{nope\n"}),
    "generate without prompts": Case(["generate", "--model", "tiny:qwen2-1m"], ["--prompts"]),
    "generate bad model dir": Case(["generate", "--model", "./m", "--prompts", "p.txt"], ["m"], {"p.txt": "hi\n", "m/config.json": "{}"}),
    "eval on an empty folder": Case(["eval", "--model", "empty", "--task", "arithmetic", "--n", "2"], ["--model empty", "neither a model"], {"empty/.keep": ""}),
    "eval unknown task": Case(["eval", "--model", "tiny:qwen2-1m", "--task", "nosuch"], ["nosuch"]),
    "eval custom without data": Case(["eval", "--model", "tiny:qwen2-1m", "--task", "custom"], ["--data"]),
    "eval missing data file": Case(["eval", "--model", "tiny:qwen2-1m", "--task", "gsm8k", "--data", "gone.jsonl"], ["gone.jsonl"]),
    "eval n zero": Case(["eval", "--model", "tiny:qwen2-1m", "--task", "arithmetic", "--n", "0"], ["--n"]),
    "eval engine flag that fits no model": Case(["eval", "--model", "tiny:qwen2-1m", "--task", "arithmetic", "--concurrency", "4"], ["--concurrency applies to api models only"]),
    "compare base-url with local arms only": Case(["compare", "--arm", "a=tiny:qwen2-1m", "--task", "arithmetic", "--base-url", "http://127.0.0.1:9/v1"], ["--base-url"]),
    "eval on-error not a choice": Case(["eval", "--model", "openai:m", "--task", "arithmetic", "--on-error", "skip"], ["--on-error"]),
    "eval api model without key": Case(["eval", "--model", "openai:m", "--task", "arithmetic", "--api-key-env", "NO_SUCH_KEY_VAR"], ["NO_SUCH_KEY_VAR"]),
    "eval api base-url not http": Case(["eval", "--model", "openai:m", "--task", "arithmetic", "--base-url", "localhost:8000"], ["localhost:8000", "not an http(s) URL"], env={"OPENAI_API_KEY": "k"}),
    "generate api model without key": Case(["generate", "--model", "openai:m", "--prompts", "p.txt", "--api-key-env", "NO_SUCH_KEY_VAR"], ["NO_SUCH_KEY_VAR"], {"p.txt": "hi\n"}),
    "eval malformed s3 model": Case(["eval", "--model", "s3:bucket/m", "--task", "arithmetic"], ["s3://BUCKET/PATH"]),
    "generate malformed s3 model": Case(["generate", "--model", "s3://", "--prompts", "p.txt"], ["s3://"], {"p.txt": "hi\n"}),
    "eval data broken jsonl": Case(["eval", "--model", "tiny:qwen2-1m", "--task", "custom", "--data", "q.jsonl"], ["q.jsonl", "line 2 is not valid JSON"],
                                   {"q.jsonl": json.dumps({"prompt": "a", "answer": 1}) + "\n{nope\n"}),
    "eval data without answer column": Case(["eval", "--model", "tiny:qwen2-1m", "--task", "custom", "--data", "q.jsonl"], ["q.jsonl", "'answer'"],
                                            {"q.jsonl": json.dumps({"prompt": "a"}) + "\n"}),
    "compare alpha out of range": Case(["compare", "--arm", "a=tiny:qwen2-1m", "--task", "arithmetic", "--alpha", "1"], ["--alpha"]),
    "log level unknown": Case(V, ["POSTTRAIN_LOG_LEVEL=LOUD"], env={"POSTTRAIN_LOG_LEVEL": "LOUD"}),
    "compare arm without name": Case(["compare", "--arm", "tiny:qwen2-1m", "--task", "arithmetic"], ["--arm"]),
    "compare arm under a local folder": Case(["compare", "--arm", "a=runs/nope", "--task", "arithmetic"], ["runs/nope does not exist"], {"runs/.keep": ""}),
    "validate eval recipe arm path": Case(["validate", "ev.yaml"], ["evaluation.arms.sft", "runs/nope does not exist"],
                                          {"ev.yaml": "evaluation: {task: arithmetic, arms: {sft: runs/nope, base: 'tiny:qwen2-1m'}}\n", "runs/.keep": ""}),
    "validate eval recipe model path": Case(["validate", "ev.yaml"], ["evaluation.model", "./gone does not exist"],
                                           {"ev.yaml": "evaluation: {task: arithmetic, model: ./gone}\n"}),
    "compare duplicate arm names": Case(["compare", "--arm", "a=tiny:qwen2-1m", "--arm", "a=tiny:qwen2-1m", "--task", "arithmetic"], ["a"]),
    "report missing run": Case(["report", "nowhere"], ["nowhere"]),
    "report bins zero": Case(["report", "run", "--bins", "0"], ["--bins"], {"run/metrics.jsonl": json.dumps({"step": 1, "loss": 1.0}) + "\n"}),
    "report torn metrics only": Case(["report", "run"], ["run"], {"run/metrics.jsonl": '{"step": 1, "lo'}),
    "convert missing file": Case(["convert", "gone.yaml"], ["gone.yaml"]),
    "convert not yaml": Case(["convert", "bad.yaml"], ["bad.yaml"], {"bad.yaml": "a: [unclosed\n"}),
}


def tree(root) -> dict[str, float]:
    return {str(p.relative_to(root)): p.stat().st_mtime for p in root.rglob("*")}


def set_up(case, tmp_path, monkeypatch, tiny_dir) -> None:
    """The case's files in tmp_path (the working directory) and its environment."""
    for rel, text in {**BASE_FILES, **case.files}.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("{cwd}", str(tmp_path)).replace("{tiny}", str(tiny_dir)))
    monkeypatch.chdir(tmp_path)
    for key, value in case.env.items():
        monkeypatch.setenv(key, value)


@pytest.mark.parametrize("name", CASES)
def test_malformed_input_exits_2_names_it_and_writes_nothing(name, tmp_path, monkeypatch, capsys, tiny_dir):
    case = CASES[name]
    set_up(case, tmp_path, monkeypatch, tiny_dir)
    before = tree(tmp_path)
    try:
        code = main(case.argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, f"exit {code}\n{err}"
    assert "Traceback" not in err
    for text in case.expect:
        assert text in err, f"{text!r} not in: {err}"
    after = tree(tmp_path)
    assert after == before, f"written: {sorted(set(after) - set(before))}, changed: {[k for k in before if after.get(k) != before[k]]}"


TRAIN_OR_VALIDATE = [name for name, case in CASES.items() if case.argv[:1] in (["train"], ["validate"])]


@pytest.mark.parametrize("name", TRAIN_OR_VALIDATE)
def test_validate_agrees_with_train(name, tmp_path, monkeypatch, capsys, tiny_dir):
    """Every malformed recipe, override, data file or model folder above that one of the two commands
    refuses, the other refuses too: validate checks what train checks (data read as train reads it,
    rewards imported, model paths and output_dir looked at), so a recipe that validates, trains."""
    case = CASES[name]
    other = ["validate" if case.argv[0] == "train" else "train", *case.argv[1:]]
    set_up(case, tmp_path, monkeypatch, tiny_dir)
    try:
        code = main(other)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, f"{other[0]} exit {code} where {case.argv[0]} exits 2\n{err}"
    assert "Traceback" not in err


def test_the_sweep_is_broad():
    assert len(CASES) >= 60
    commands = {c.argv[0] for c in CASES.values() if c.argv}
    assert commands >= {"train", "validate", "inspect", "make-tiny-model", "generate", "eval", "compare", "report", "convert"}
