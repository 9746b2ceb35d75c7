"""Chat data on a model without a chat template (a pretrained base model): chat SFT and reward data
are rendered with posttrain's plain transcript (recipes/templates/plain-eos.jinja, whose end of turn is
the model's own eos, so the model learns to stop); other algorithms stop at start-up with the fixes."""

from __future__ import annotations

from posttrain import shipped
from posttrain.errors import UserError

PLAIN_TEMPLATE = "recipes/templates/plain-eos.jinja"
TRAINED_ON_CHATS = ("sft", "reward")  # their loss is on the rendered chats themselves, so a plain transcript serves


def settle_chat_template(family: str, model_name: str, tokenizer, dataset) -> str | None:
    """Give a template-less tokenizer the plain transcript where the algorithm trains on rendered chats
    and return the start-up line saying so; stop with the fixes where it cannot. Chat data need a
    template, which TRL applies inside the trainer (a traceback at the first step there, after the
    model has loaded). Nothing happens for a model with a template, or for data that are not chats."""
    from trl.data_utils import is_conversational

    if getattr(tokenizer, "chat_template", None) or dataset is None or len(dataset) == 0 or not is_conversational(dataset[0]):
        return None
    template = "training.chat_template_path=<file.jinja> (a chat template for this tokenizer, saved with the model)"
    if family in TRAINED_ON_CHATS and tokenizer.eos_token is not None:
        tokenizer.chat_template = (shipped.root() / PLAIN_TEMPLATE).read_text()
        return (f"chat template: {model_name} has none; chats are rendered as a plain transcript (User: / Assistant:, "
                f"each answer ended by the model's eos {tokenizer.eos_token}, which is trained), the form `posttrain eval` "
                f"asks a base model in; saved with the model ({PLAIN_TEMPLATE}; another: {template.split(' (')[0]})")
    fixes = {"grpo": ["data.use_chat_template=false (the prompts are sent as plain text, as a base model reads them)", template],
             "rloo": ["data.use_chat_template=false (the prompts are sent as plain text, as a base model reads them)", template],
             "sft": [template], "reward": [template]}.get(family,
                                                         ["data as plain text (prompt, chosen/rejected or completion strings "
                                                          "instead of messages)", "a model whose tokenizer has a chat template"])
    raise UserError(f"{model_name} has no chat template, and this run's data are chats, which TRL renders "
                    "with one. Fix: " + "; or ".join(fixes) + ".")
