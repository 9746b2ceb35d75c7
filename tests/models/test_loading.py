"""Model sources: tiny specs, local directories, and adapter directories that continue training."""

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

from posttrain.models.loading import DeviceInfo, adapter_base, cpu_bf16_flag, load_model, lora_config
from posttrain.recipe.schema import ModelSection

CPU = DeviceInfo("cpu", bf16=False)


def test_tiny_spec_loads_in_float32_on_cpu():
    loaded = load_model(ModelSection(base_model_name="tiny:qwen2-1m"), CPU)
    assert loaded.model.dtype == torch.float32 and loaded.adapter_dir is None
    assert loaded.tokenizer.pad_token == "<|pad|>"
    # a CPU with native bf16 trains with bf16 autocast over float32 weights, so the weights stay float32
    assert load_model(ModelSection(base_model_name="tiny:qwen2-1m"), DeviceInfo("cpu", bf16=True)).model.dtype == torch.float32


CPUINFO = "processor\t: 0\nvendor_id\t: {vendor}\nflags\t\t: fpu sse2 avx2 avx512f {extra}\nbugs\t\t: spectre_v1\n\nprocessor\t: 1\n"


def test_native_bf16_cpus_are_told_by_their_instruction_flags():
    assert cpu_bf16_flag(CPUINFO.format(vendor="AuthenticAMD", extra="avx512_bf16 avx512vl")) == "avx512_bf16"  # Zen 4
    assert cpu_bf16_flag(CPUINFO.format(vendor="GenuineIntel", extra="amx_bf16 amx_tile")) == "amx_bf16"  # Sapphire Rapids
    assert cpu_bf16_flag(CPUINFO.format(vendor="GenuineIntel", extra="avx512_vnni")) is None  # AVX-512 alone emulates bf16
    assert cpu_bf16_flag(CPUINFO.format(vendor="x", extra="avx512_bf16x")) is None  # whole flags only
    assert cpu_bf16_flag("") is None  # no /proc/cpuinfo flags line (another OS, a container without it)


def test_adapter_directory_loads_its_base_and_stays_trainable(tmp_path, tiny_dir):
    peft_model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_dir), LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.fill_(0.01)  # non-zero so the adapter changes outputs
    peft_model.save_pretrained(tmp_path / "adapter")
    assert adapter_base(str(tmp_path / "adapter")) == str(tiny_dir)

    loaded = load_model(ModelSection(base_model_name=str(tmp_path / "adapter")), CPU)
    assert isinstance(loaded.model, PeftModel) and loaded.adapter_dir == str(tmp_path / "adapter")
    trainable = [n for n, p in loaded.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    b = dict(loaded.model.named_parameters())
    assert any(torch.all(v == 0.01) for k, v in b.items() if "lora_B" in k)


def test_lora_config_follows_the_recipe():
    section = ModelSection(base_model_name="x", use_lora=True, lora_r=4, lora_alpha=8, lora_target_modules=["q_proj", "v_proj"])
    config = lora_config(section)
    assert (config.r, config.lora_alpha, set(config.target_modules), config.modules_to_save) == (4, 8, {"q_proj", "v_proj"}, None)
    assert lora_config(ModelSection(base_model_name="x")) is None
