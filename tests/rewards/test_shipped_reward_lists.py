"""Every shipped recipe's reward list pays for the task, not its shape (DESIGN invariant 13).

Hand-written completions of one problem (3 + 4), right and wrong, in every format a policy can fall
into, are scored with each recipe's weighted built-in rewards, as TRL sums them. Checked:
- the seed's shortcut (an empty <think> block and a bare integer, right or wrong) never earns more than
  an honest, correct, tagged answer, and less whenever the recipe pays for the <think> format;
- no wrong answer earns more than a right one in the same format;
- an honest answer earns more when it is right than when it is wrong.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from posttrain.rewards.builtin import get_reward

REPO = Path(__file__).resolve().parents[2]
# Rewards a fixed completion cannot be scored with here: trained reward models, HTTP services, user code.
UNSCORABLE = ("http",)

FORMATS = {  # format -> (right, wrong)
    "worked, tagged": ("<think>3 + 4 = 7</think><answer>7</answer>", "<think>3 + 4 = 8</think><answer>8</answer>"),
    "shortcut": ("<think></think><answer>7</answer>", "<think></think><answer>8</answer>"),
    "answer tags only": ("<answer>7</answer>", "<answer>8</answer>"),
    "worked, untagged": ("3 + 4 = 7. The answer is 7.", "3 + 4 = 8. The answer is 8."),
    "bare number": ("7", "8"),
    "prose around the tags": ("Let me see. <think>3 + 4 = 7</think> so <answer>7</answer> done",
                              "Let me see. <think>3 + 4 = 8</think> so <answer>8</answer> done"),
}


def shipped_reward_lists() -> list[tuple[str, list[dict]]]:
    out = []
    for path in sorted((REPO / "recipes").rglob("*.yaml")):
        raw = yaml.safe_load(path.read_text()) or {}
        rewards = (raw.get("training") or {}).get("rewards") if isinstance(raw, dict) else None
        if rewards and all("name" in r and ":" not in r["name"] and r["name"] not in UNSCORABLE for r in rewards):
            out.append((str(path.relative_to(REPO)), rewards))
    return out


def total(rewards: list[dict], completion: str) -> float:
    score = 0.0
    for spec in rewards:
        options = {k: v for k, v in spec.items() if k not in ("name", "weight")}
        fn = get_reward(spec["name"], **options)
        column = options.get("answer_column", "answer")
        score += spec.get("weight", 1.0) * fn([completion], **{column: ["7"]})[0]
    return score


def test_the_shipped_lists_are_all_here():
    names = [name for name, _ in shipped_reward_lists()]
    assert "recipes/demo/grpo.yaml" in names and "recipes/demo-real/grpo.yaml" in names
    assert "recipes/grpo/qwen2.5-3b-gsm8k-lora.yaml" in names and len(names) >= 10


@pytest.mark.parametrize("name, rewards", shipped_reward_lists(), ids=[n for n, _ in shipped_reward_lists()])
def test_rewards_pay_for_the_task_not_the_shape(name, rewards):
    honest = total(rewards, FORMATS["worked, tagged"][0])
    right_shortcut, wrong_shortcut = (total(rewards, c) for c in FORMATS["shortcut"])
    assert wrong_shortcut < honest and right_shortcut <= honest
    if any(spec["name"] == "format" for spec in rewards):  # the recipe asks for <think> reasoning and pays for it
        assert right_shortcut < honest
    for form, (right, wrong) in FORMATS.items():
        assert total(rewards, wrong) <= total(rewards, right), form
    assert total(rewards, FORMATS["worked, tagged"][1]) < honest
