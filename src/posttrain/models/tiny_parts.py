"""The tokenizer, chat template and sizes that the tiny text models (`posttrain.models.tiny`) and
the tiny vision-language models (`posttrain.models.tiny_vlm`) share; imported by both, importing
neither. Importing it is cheap: tokenizers and transformers load inside `build_tokenizer`.
"""

from __future__ import annotations

import random

# Names are parameter counts (qwen2: 0.98M, 2.02M, 5.90M; llama a few hundred fewer: no qkv bias),
# with untied embeddings taking 0.3M-0.6M of them. GQA (kv heads < heads) on purpose, so code that
# handles grouped KV heads (LoRA target shapes, KV cache) is exercised as on real models.
SIZES: dict[str, dict[str, int]] = {
    "1m": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
               intermediate_size=768),
    "2m": dict(hidden_size=192, num_hidden_layers=4, num_attention_heads=6, num_key_value_heads=2,
               intermediate_size=512),
    "6m": dict(hidden_size=256, num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=4,
               intermediate_size=896),
}

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [EOS_TOKEN, PAD_TOKEN, IM_START, IM_END]
# Ordinary (non-special) added tokens: single ids for the tags reward functions and parsers look
# for, yet kept by ``decode(skip_special_tokens=True)``.
TAG_TOKENS = ["<think>", "</think>", "<answer>", "</answer>", "<tool_call>", "</tool_call>"]
# Total vocabulary incl. special and tag tokens; a multiple of 64 and safely below the ~1220 merges
# the generated corpus supports for any seed, so every build has exactly this many tokens.
VOCAB_SIZE = 1152
MAX_POSITIONS = 2048

# ChatML. Why each piece is there:
# - `{% generation %}` wraps the assistant content *and* its closing <|im_end|>, so
#   `return_assistant_tokens_mask=True` (TRL's assistant_only_loss) trains the model to stop; the
#   trailing newline stays outside, as it is never generated (generation stops at <|im_end|>).
# - nothing rendered for a message depends on later messages, so the template is
#   prefix-preserving (TRL's multi-turn tool loop requires this).
# - tool calls use Qwen's `<tool_call>{json}</tool_call>` form, matching RESPONSE_TEMPLATE.
CHAT_TEMPLATE = (
    "{%- macro text(c) -%}"
    "{%- if c is string -%}{{ c }}"
    "{%- elif c -%}{%- for p in c -%}{%- if p.type == 'text' -%}{{ p.text }}{%- endif -%}{%- endfor -%}"
    "{%- endif -%}"
    "{%- endmacro -%}"
    "{%- set sys = messages[0].role == 'system' -%}"
    "{%- if sys or tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if sys -%}{{- text(messages[0].content) -}}{%- endif -%}"
    "{%- if tools -%}"
    "{%- if sys -%}{{- '\\n\\n' -}}{%- endif -%}"
    "{{- '# Tools\\nCall a tool with <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.' -}}"
    "{{- '\\n<tools>' -}}"
    "{%- for tool in tools -%}{{- '\\n' -}}{{- tool | tojson -}}{%- endfor -%}"
    "{{- '\\n</tools>' -}}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- generation -%}"
    "{{- text(m.content) -}}"
    "{%- for tc in m.tool_calls or [] -%}"
    "{%- set f = tc.function if tc.function is defined else tc -%}"
    "{%- if m.content or not loop.first -%}{{- '\\n' -}}{%- endif -%}"
    "{{- '<tool_call>\\n{\"name\": ' -}}{{- f.name | tojson -}}{{- ', \"arguments\": ' -}}"
    "{%- if f.arguments is string -%}{{- f.arguments -}}{%- else -%}{{- f.arguments | tojson -}}{%- endif -%}"
    "{{- '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>' -}}"
    "{%- endgeneration -%}"
    "{{- '\\n' -}}"
    "{%- elif not (loop.first and sys) -%}"
    "{{- '<|im_start|>' + m.role + '\\n' -}}{{- text(m.content) -}}{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


# Saved as the tokenizer's `response_template` (transformers >= 5.13 response parsing): TRL's GRPO
# needs one to parse tool calls and only knows the templates of published models. Same fields as
# TRL's Qwen3 template minus the reasoning split, so <think> stays in `content` for rewards to see.
RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


_NAMES = "Tom Anna Sam Maria Ben Lily Omar Zoe Ravi Emma Leo Mia Noah Aisha Jack Sofia Liam Chen Ivan Nora"
_NAMES = _NAMES.split()
_SHE = set("Anna Maria Lily Zoe Emma Mia Aisha Sofia Nora".split())
_ITEMS = ("apples books coins marbles pencils cookies cards stickers eggs flowers shells stamps balls toys "
          "candies cups oranges bananas pears cakes pies buttons ribbons rocks leaves seeds bottles boxes "
          "chairs tables plates spoons shirts socks hats kites boats cars trains birds fish cats dogs "
          "rabbits tickets letters photos songs games puzzles bricks blocks beads crayons").split()
_PLACES = "school park store market library garden kitchen farm beach museum zoo city village forest river"
_PLACES = _PLACES.split()
_ADJS = ("big small red blue green happy quick slow old new bright dark warm cold short long tall "
         "quiet loud kind clever funny strange simple useful careful").split()
_VERBS = ("found bought sold made painted cooked counted collected shared lost carried washed "
          "planted picked baked wrote read drew built fixed opened closed cleaned watched").split()
_CHAT = [
    "Hello! How can I help you today?", "Please solve the following problem step by step.",
    "You are a helpful assistant.", "Thanks, that is correct.", "Can you explain your answer?",
    "Sure, here is the solution.", "What is the capital of France? The capital of France is Paris.",
    "I am not sure, let me think about it.", "Let's check the result again to make sure it is right.",
    "Summarize the text in one sentence.", "Think step by step and put the final answer in the tags.",
    "Great question! Let me work through it.", "That's not quite right; try again.",
    "Could you give me another example, please?", "Of course. Here's a simpler way to see it.",
]
_WORDS = ("about after again always because before better between bring during early enough every "
          "family father mother friend garden great ground group house important inside large learn later "
          "little morning mountain nothing number often paper people picture problem question really "
          "remember second should something sometimes story student teacher thought together toward "
          "under until water weather window without world yellow answer travel summer winter spring autumn "
          "evening weekend holiday minute hours money price dollar cents meter kilometer pound weight "
          "height distance speed volume area half third quarter double triple twice equal total").split()
_TOOLS = ["add", "subtract", "multiply", "divide", "get_weather", "search", "calculator", "lookup"]


def _corpus(seed: int, n: int = 4000) -> list[str]:
    """Generate tokenizer training text resembling what the tiny models will see in tests.

    Word problems with worked arithmetic, reasoning in <think>/<answer> tags, small stories, chat
    turns and tool calls, so BPE merges cover the words, JSON punctuation and tags of test data.
    """
    rng = random.Random(seed)
    c = rng.choice
    out: list[str] = []
    for _ in range(n):
        name, item = c(_NAMES), c(_ITEMS)
        pron = "she" if name in _SHE else "he"
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        kind = rng.random()
        if kind < 0.25:
            q = f"{name} has {a} {item} and buys {b} more. How many {item} does {pron} have?"
            w, ans = f"{a} + {b} = {a + b}", a + b
        elif kind < 0.4:
            a, b = max(a, b), min(a, b)
            q = f"{name} had {a} {item} and gave {b} to a friend at the {c(_PLACES)}. "
            q += f"How many {item} are left?"
            w, ans = f"{a} - {b} = {a - b}", a - b
        elif kind < 0.55:
            a, b = a % 12 + 2, b % 12 + 2
            q = f"There are {a} boxes with {b} {c(_ADJS)} {item} in each box. "
            q += f"How many {item} are there in total?"
            w, ans = f"{a} * {b} = {a * b}", a * b
        elif kind < 0.65:
            words = " ".join(c(_WORDS) for _ in range(rng.randint(5, 12)))
            out.append(f"{name} said: {words}.")
            continue
        elif kind < 0.8:
            out.append(
                f"The {c(_ADJS)} {c(_ITEMS)[:-1]} was near the {c(_PLACES)}. {name} {c(_VERBS)} {a} {item} "
                f"and {c(_NAMES)} {c(_VERBS)} the {c(_ADJS)} ones. {c(_CHAT)}"
            )
            continue
        else:
            args = f'{{"a": {a}, "b": {b}}}' if rng.random() < 0.5 else f'{{"city": "{c(_PLACES)}"}}'
            call = f'{{"name": "{c(_TOOLS)}", "arguments": {args}}}'
            out.append(f"{c(_CHAT)}\n<tool_call>\n{call}\n</tool_call>")
            continue
        r = rng.random()
        if r < 0.4:
            out.append(f"{q} {w}. The answer is {ans}.")
        elif r < 0.8:
            out.append(f"{q}\n<think>\n{w}\n</think>\n<answer>{ans}</answer>")
        else:
            out.append(f"{IM_START}user\n{q}{IM_END}\n{IM_START}assistant\nThe answer is {ans}.{IM_END}")
    return out


def build_tokenizer(seed: int, extra_special: tuple[str, ...] = ()):
    """Train a byte-level BPE on the generated corpus and wrap it as a transformers tokenizer.

    Digits are split one by one (as in Qwen/Llama-3) so numbers tokenize uniformly, which
    arithmetic rewards and answer-extraction tests rely on. The pipeline (NFC + Qwen2's split regex,
    whose ``\\p{N}`` branch isolates every digit, + ByteLevel) is exactly the one transformers 5.x
    hard-codes in ``Qwen2Tokenizer``: ``AutoTokenizer`` on a ``qwen2`` checkpoint always rebuilds
    the tokenizer with that pipeline, ignoring tokenizer.json's pre-tokenizer and the
    ``tokenizer_class`` field. Any other pipeline (e.g. ``Digits`` + ``ByteLevel``) would tokenize
    differently after a reload for qwen2 than for llama and than at build time.

    ``extra_special`` (the VLMs' ``<image>``) become special tokens that take the place of the last
    BPE merges, so the vocabulary stays VOCAB_SIZE; without them the build is unchanged.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers import processors, trainers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(TAG_TOKENS),  # special tokens count inside the BPE vocabulary
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS + list(extra_special),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        response_template=RESPONSE_TEMPLATE,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        extra_special_tokens=[IM_START, IM_END, *extra_special],
        padding_side="right",
        model_max_length=MAX_POSITIONS,
        chat_template=CHAT_TEMPLATE,
    )
