"""Write a tiny llama model as a GGUF file, the way llama.cpp's convert_hf_to_gguf.py lays one out.

Real GGUF files (SmolLM2's 92 MB one) take ~25 s to dequantize; this one takes about a second, so
the cache, concurrency and bad-input tests can convert as often as they need. Same layout as
llama.cpp: GGUF tensor names (`token_embd.weight`, `blk.N.attn_q.weight`, ...), q/k rows permuted
for its rotary kernels (transformers permutes them back), a gpt2-style BPE vocabulary with merges
and the chat template in the header.
"""

from __future__ import annotations

import json
from pathlib import Path


def _permute(weights, n_head: int):
    """llama.cpp's permutation of q/k rows (convert_hf_to_gguf.py LlamaModel.permute)."""
    return weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


def write_tiny_gguf(model_dir: str | Path, out: str | Path, qtype: str | None = "Q8_0", architecture: str = "llama") -> Path:
    """Write the llama model in ``model_dir`` to ``out``; 2-D weights in ``qtype`` (None: float32)."""
    import gguf
    import numpy as np
    from transformers import AutoConfig, AutoTokenizer
    from safetensors.numpy import load_file

    model_dir, out = Path(model_dir), Path(out)
    config = AutoConfig.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    weights = load_file(str(model_dir / "model.safetensors"))
    n_blocks, head_dim = config.num_hidden_layers, config.hidden_size // config.num_attention_heads
    writer = gguf.GGUFWriter(str(out), architecture)
    writer.add_name("tiny llama")
    writer.add_block_count(n_blocks)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(float((config.rope_parameters or {}).get("rope_theta", 10000.0)))
    writer.add_rope_dimension_count(head_dim)
    writer.add_vocab_size(config.vocab_size)

    spec = json.loads((model_dir / "tokenizer.json").read_text())
    vocab = dict(spec["model"]["vocab"])
    special = {t["content"]: t["id"] for t in spec["added_tokens"]}
    vocab.update(special)
    tokens = [None] * config.vocab_size
    for token, i in vocab.items():
        if i < len(tokens):
            tokens[i] = token
    tokens = [t if t is not None else f"[PAD{i}]" for i, t in enumerate(tokens)]
    types = [gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokenizer.eos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_chat_template(tokenizer.chat_template)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, n_blocks)
    quant = getattr(gguf.GGMLQuantizationType, qtype) if qtype else None
    for name, data in weights.items():
        data = data.astype(np.float32)
        if name.endswith("q_proj.weight"):
            data = _permute(data, config.num_attention_heads)
        elif name.endswith("k_proj.weight"):
            data = _permute(data, config.num_key_value_heads)
        target = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if target is None:
            raise ValueError(f"no GGUF name for {name}")
        if quant is not None and data.ndim == 2:
            writer.add_tensor(target, gguf.quants.quantize(data, quant), raw_shape=gguf.quant_shape_to_byte_shape(data.shape, quant), raw_dtype=quant)
        else:
            writer.add_tensor(target, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
