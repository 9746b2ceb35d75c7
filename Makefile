# Two commands do everything on a fresh machine; each creates .venv when it is missing.
#   make demo   install, then the whole loop offline: SFT a tiny model, GRPO it, compare base/SFT/GRPO
#   make test   install, then run the whole test suite
#   make kl-ablation   install, then the KL experiment: 4 betas x 3 seeds, gameable rewards, dev then held-out
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

.PHONY: install install-base demo test benchmark kl-ablation clean

install: $(STAMP)
install-base: $(BASE_STAMP)

$(BASE_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(if $(TORCH),$(BIN)/python -m pip install -q "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)))
	$(BIN)/python -m pip install -q -e ".[plot]"
	touch $(BASE_STAMP)

$(STAMP): pyproject.toml $(BASE_STAMP)
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $(STAMP)

# The demo: every stage is a posttrain command (recipes/demo/); runs/demo is rebuilt each time.
DEMO := runs/demo
demo: install-base
	rm -rf $(DEMO)
	$(BIN)/posttrain train --recipe recipes/demo/sft.yaml
	$(BIN)/posttrain train --recipe recipes/demo/grpo.yaml
	$(BIN)/posttrain compare --arm base=tiny:qwen2-1m --arm sft=$(DEMO)/sft --arm grpo=$(DEMO)/grpo \
	    --task custom --data recipes/demo/data/eval.jsonl --max-new-tokens 8 --no-progress \
	    --out $(DEMO)/compare --plot $(DEMO)/accuracy.png
	$(BIN)/posttrain report $(DEMO)/sft $(DEMO)/grpo --bins 3 --plot $(DEMO)/telemetry.png --out $(DEMO)/telemetry.md
	@echo
	@echo "demo done. Accuracy and paired tests: $(DEMO)/compare/report.md (plot $(DEMO)/accuracy.png);"
	@echo "training telemetry, health and speed: $(DEMO)/telemetry.md (plot $(DEMO)/telemetry.png); models in $(DEMO)/sft, $(DEMO)/grpo"

test: install
	$(BIN)/python -m pytest -q

benchmark: install
	$(BIN)/python benchmarks/trl_overhead.py --algorithm sft
	$(BIN)/python benchmarks/trl_overhead.py --algorithm grpo

# The pre-registered KL experiment (benchmarks/results/kl_ablation/tuning.md section 4): train on
# the dev split's verdict once, then evaluate the same runs once on the held-out split.
KL_DESIGN := --betas 0 0.04 0.2 1.0 --seeds 0 1 2 --reward gameable --out runs/kl-ablation
kl-ablation: install
	$(BIN)/python benchmarks/kl_ablation.py $(KL_DESIGN) --split dev
	$(BIN)/python benchmarks/kl_ablation.py $(KL_DESIGN) --split heldout --reuse-arms

clean:
	rm -rf runs .pytest_cache
