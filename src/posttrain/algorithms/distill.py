"""On-policy distillation through TRL's DistillationTrainer.

    posttrain train --recipe recipes/distill/tiny-cpu.yaml

On-policy distillation (Agarwal et al. 2024, "On-Policy Distillation of Language Models: Learning
from Self-Generated Mistakes", arXiv:2306.13649; TRL's GKD without its off-policy mix): the
student samples a completion for each of the recipe's prompts, and on those tokens it is trained to
match the teacher's next-token distribution under the generalized Jensen-Shannon divergence
(`beta`: 0 forward KL, 0.5 JSD, 1 reverse KL, TRL's default). The logged `loss` is that divergence
per completion token, so a run that learns shows it falling: the distance to the teacher.

The teacher (`training.teacher_model_name_or_path`) is any model spec, loaded by posttrain's loader
like the student (a hub id, a model folder, a posttrain run's output_dir with a LoRA adapter, which
is merged, a .gguf file, `tiny:...`, s3://), in the student's dtype, frozen.

The divergence compares the two distributions id by id, so both models must use one tokenizer. TRL
1.16 compares only `vocab_size`; two tokenizers of the same size can still number their tokens
differently (`tiny:qwen2-1m` built with another seed has the same 2,048 tokens in another order),
and the student would then learn the teacher's beliefs about other tokens. posttrain checks, before
the teacher's weights load, that both tokenizers give the same ids for the same texts (a fixed
sentence and the run's first prompts as the student renders them) and that the vocabularies agree
id by id: exit 2 naming what differs, otherwise.
"""

from __future__ import annotations

from pathlib import Path

KEY = "training.teacher_model_name_or_path"
SAMPLE = "Ken has 142 cards and gets 271 more. How many cards does Ken have now? 142 + 271 = 413. The answer is 413."


def sample_texts(tokenizer, prompts, n: int = 4) -> list[str]:
    """The texts both tokenizers must split alike: a fixed sentence and the first `n` prompts as the student sees them
    (chats through its chat template, so the template's special tokens are compared too)."""
    texts = [SAMPLE]
    for prompt in list(prompts)[:n]:
        if isinstance(prompt, str):
            texts.append(prompt)
        elif getattr(tokenizer, "chat_template", None):
            texts.append(tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True))
    return texts


def tokenizer_mismatch(student, teacher, texts: list[str]) -> str | None:
    """What differs between the student's and the teacher's tokenizers, or None when they agree: the first text
    they split into other ids (with the first differing token), and how many vocabulary entries have another id."""
    lines = []
    for text in texts:
        s_ids = student(text, add_special_tokens=False).input_ids
        t_ids = teacher(text, add_special_tokens=False).input_ids
        if s_ids != t_ids:
            at = next((i for i, (a, b) in enumerate(zip(s_ids, t_ids)) if a != b), min(len(s_ids), len(t_ids)))
            s_tok = f"{student.convert_ids_to_tokens(s_ids[at])!r} (id {s_ids[at]})" if at < len(s_ids) else "the end"
            t_tok = f"{teacher.convert_ids_to_tokens(t_ids[at])!r} (id {t_ids[at]})" if at < len(t_ids) else "the end"
            shown = text if len(text) <= 80 else text[:77] + "..."
            lines.append(f"the text {shown!r} is {len(s_ids)} tokens for the student and {len(t_ids)} for the teacher; "
                         f"token {at} is {s_tok} for the student and {t_tok} for the teacher")
            break
    s_vocab, t_vocab = student.get_vocab(), teacher.get_vocab()
    other = sorted((i, tok) for tok, i in s_vocab.items() if t_vocab.get(tok) != i)
    if other:
        i, tok = other[0]
        where = f"id {t_vocab[tok]} in the teacher" if tok in t_vocab else "not in the teacher's vocabulary"
        lines.append(f"{len(other):,} of the student's {len(s_vocab):,} tokens have another id in the teacher "
                     f"(e.g. {tok!r}: id {i} in the student, {where})")
    return "; ".join(lines) or None


def mismatch_message(student_spec: str, teacher_spec: str, what: str) -> str:
    return (f"{KEY}: the teacher {teacher_spec!r} does not share the student's tokenizer (model.base_model_name={student_spec!r}): "
            f"{what}. On-policy distillation matches the teacher's next-token distribution id by id, so with another tokenizer "
            "the student would learn the teacher's probabilities for other tokens (TRL only compares vocab_size, which can agree). "
            "Use a teacher of the student's family, with its tokenizer (e.g. Qwen/Qwen2.5-1.5B-Instruct for a Qwen2.5-0.5B student), "
            "or a student built on the teacher's tokenizer.")


def load_teacher(run):
    """The teacher from the recipe's spec through posttrain's loader: tokenizer checked first (cheap), then
    vocab_size, then the weights: frozen, eval mode, a LoRA adapter merged. Exit 2 naming the key otherwise."""
    from transformers import AutoConfig, AutoTokenizer

    from posttrain.errors import UserError
    from posttrain.models.loading import DeviceInfo, adapter_base, load_model, resolve_source

    from .common import log

    args, recipe = run.trl_config, run.loaded_recipe.recipe
    spec, revision = args.teacher_model_name_or_path, args.teacher_model_revision
    source = resolve_source(spec)  # tiny: builds, s3:// downloads, GGUF converts (once per machine)
    adapter = None
    base = adapter_base(source) if Path(source).is_dir() else None
    if base is not None:
        adapter, source = source, resolve_source(base)
    tok_source = adapter if adapter and (Path(adapter) / "tokenizer_config.json").is_file() else source
    pinned = {"revision": revision} if revision and tok_source == source else {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(tok_source, trust_remote_code=recipe.model.trust_remote_code, **pinned)
        config = AutoConfig.from_pretrained(source, trust_remote_code=recipe.model.trust_remote_code,
                                            **({"revision": revision} if revision else {}))
    except (OSError, ValueError, KeyError) as e:
        raise UserError(f"{KEY}: cannot load {spec!r}: {e}") from None
    what = tokenizer_mismatch(run.loaded.tokenizer, tokenizer, sample_texts(run.loaded.tokenizer, run.train_dataset["prompt"]))
    if what:
        raise UserError(mismatch_message(recipe.model.base_model_name, spec, what))
    architectures = getattr(config, "architectures", None) or []
    if any(not a.endswith("ForCausalLM") and "ForConditionalGeneration" not in a for a in architectures):
        raise UserError(f"{KEY}: {spec!r} is a {', '.join(architectures)}, not a causal language model; a teacher must predict "
                        "the next token (a reward model scores whole sequences: give it to GRPO/RLOO as training.rewards[i].model).")
    student_size = run.loaded.model.config.get_text_config().vocab_size
    teacher_size = config.get_text_config().vocab_size
    if student_size != teacher_size:
        raise UserError(f"{KEY}: the teacher {spec!r} has vocab_size {teacher_size:,} (rows of its output layer) and the student "
                        f"{student_size:,}; the tokenizers agree, but the two distributions must have the same length. Use a "
                        "teacher whose config.json has the student's vocab_size (within a family sizes can differ: Qwen2.5 0.5B-3B "
                        "have 151,936, 7B and up 152,064).")
    model_cfg = recipe.model.model_copy(update={"base_model_name": spec, "revision": revision, "tokenizer_name": None, "use_lora": False,
                                                "load_in_4bit": False, "load_in_8bit": False})
    loaded = load_model(model_cfg, DeviceInfo.detect(), trainable_adapter=False, key=KEY)
    teacher = loaded.model
    if loaded.adapter_dir is not None:
        teacher = teacher.merge_and_unload()
    teacher.eval()
    teacher.requires_grad_(False)
    params = sum(p.numel() for p in teacher.parameters())
    log(f"teacher: {loaded.source}{f' + adapter {adapter} (merged)' if adapter else ''} ({params:,} parameters, {teacher.dtype}); "
        f"tokenizer checked against the student's: same ids, vocab_size {teacher_size:,}")
    return teacher


def build_trainer(run):
    from trl import DistillationTrainer

    return DistillationTrainer(teacher_model=load_teacher(run), **run.trainer_kwargs())
