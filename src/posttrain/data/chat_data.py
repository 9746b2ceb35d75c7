"""Chat data on a model without a chat template: stopped at start-up, with the fixes."""

from __future__ import annotations

from posttrain.errors import UserError


def require_chat_template(family: str, model_name: str, tokenizer, dataset) -> None:
    """Chat data need a chat template, which TRL applies inside the trainer (a traceback at the first
    step there, after the model has loaded). A pretrained base model has none: stop here with the fixes, which
    depend on the algorithm's TRL family (recipe.algorithms)."""
    from trl.data_utils import is_conversational

    if getattr(tokenizer, "chat_template", None) or dataset is None or len(dataset) == 0 or not is_conversational(dataset[0]):
        return
    template = "training.chat_template_path=<file.jinja> (a chat template for this tokenizer, saved with the model)"
    fixes = {"grpo": ["data.use_chat_template=false (the prompts are sent as plain text, as a base model reads them)", template],
             "rloo": ["data.use_chat_template=false (the prompts are sent as plain text, as a base model reads them)", template],
             "sft": [template], "reward": [template]}.get(family,
                                                         ["data as plain text (prompt, chosen/rejected or completion strings "
                                                          "instead of messages)", "a model whose tokenizer has a chat template"])
    raise UserError(f"{model_name} has no chat template, and this run's data are chats, which TRL renders "
                    "with one. Fix: " + "; or ".join(fixes) + ".")
