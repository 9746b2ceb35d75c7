"""The reward of docs/guides/own-model-data-reward.md (examples/rewards/my_reward.py), checked three ways:
called on completions in the shapes TRL 1.16's GRPOTrainer passes (chat prompts give one-message lists, text
prompts strings) against values worked out by hand; resolved by posttrain as a recipe names it (options bound,
the logged name); and trained with through the real CLI, from the guide's own recipe and data lines, with the
reward file beside the recipe and nowhere else on the import path."""

from __future__ import annotations

import doctest
import importlib
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from posttrain.rewards.builtin import get_reward

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "rewards" / "my_reward.py"
GUIDE = REPO / "docs" / "guides" / "own-model-data-reward.md"


@pytest.fixture
def my_reward(monkeypatch):
    """The example module, imported by name from its folder as posttrain would from a recipe's folder."""
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    monkeypatch.delitem(sys.modules, "my_reward", raising=False)
    yield importlib.import_module("my_reward")
    sys.modules.pop("my_reward", None)


def chat(content):
    """One completion as TRL 1.16 hands it to rewards when the prompt is a chat (grpo_trainer.py, _generate)."""
    return [{"role": "assistant", "content": content}]


# (id, completion text, gold as posttrain's data step passes it: text, expected reward)
CASES = [
    ("right", "<think>14 * 3 = 42</think>\n<answer>42</answer>", "42", 1.0),
    ("spaces_in_block", "<think>x</think><answer> 42 </answer>", "42", 1.0),
    ("thousands_comma", "<think>1250 + 150</think><answer>1,400</answer>", "1,400", 1.0),
    ("dollar_and_decimals", "<answer>$1400.00</answer>", "1400", 1.0),
    ("negative", "<answer>-7</answer>", "-7", 1.0),
    ("wrong_number", "<think>14 * 3 = 41</think><answer>41</answer>", "42", 0.0),
    ("unit_in_block", "<answer>42 dollars</answer>", "42", 0.0),
    ("no_block", "The answer is 42.", "42", 0.0),
    ("two_blocks", "<answer>41</answer><answer>42</answer>", "42", 0.0),
    ("unclosed", "<answer>42", "42", 0.0),
    ("reversed_tags", "</answer>42<answer>", "42", 0.0),
    ("empty_block", "<answer></answer>", "42", 0.0),
    ("gold_not_a_number", "<answer>42</answer>", "forty-two", 0.0),
]


def test_the_docstring_example_holds(my_reward):
    result = doctest.testmod(my_reward)
    assert result.attempted >= 2 and result.failed == 0


@pytest.mark.parametrize("text,gold,expected", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_chat_and_text_completions_score_alike(my_reward, text, gold, expected):
    """Chat prompts (posttrain's default) and text prompts (data.use_chat_template: false) give the same score."""
    assert my_reward.exact_number([chat(text)], answer=[gold]) == [expected]
    assert my_reward.exact_number([text], answer=[gold]) == [expected]


def test_a_message_without_text_scores_zero(my_reward):
    """A message that only calls a tool has content None: no answer, no crash."""
    assert my_reward.exact_number([[{"role": "assistant", "content": None}]], answer=["1"]) == [0.0]


def test_called_as_trl_calls_it_through_posttrain(my_reward):
    """TRL 1.16 (_calculate_rewards) calls reward(prompts=..., completions=..., completion_ids=..., <every column>,
    trainer_state=..., log_extra=..., log_metric=...), one entry per completion: 2 prompts x 2 generations here."""
    reward = get_reward("my_reward:exact_number")
    assert reward.__name__ == "exact_number"  # logged as rewards/exact_number/mean
    prompts = [[{"role": "system", "content": "..."}, {"role": "user", "content": q}] for q in ("q1", "q1", "q2", "q2")]
    completions = [chat("<answer>42</answer>"), chat("<answer>41</answer>"), chat("<answer>1,400</answer>"), chat("1400")]
    scores = reward(prompts=prompts, completions=completions, completion_ids=[[1], [2], [3], [4]],
                    answer=["42", "42", "1,400", "1,400"], question=["q1", "q1", "q2", "q2"], gold=[42, 42, "1,400", "1,400"],
                    trainer_state=object(), log_extra=lambda *a, **k: None, log_metric=lambda *a, **k: None)
    assert scores == [1.0, 0.0, 1.0, 0.0]


def test_the_recipe_option_is_bound_by_name_and_a_misspelt_one_refused(my_reward):
    final = get_reward("my_reward:exact_number", tag="final")
    assert final(completions=[chat("<final>7</final>"), chat("<answer>7</answer>")], answer=["7", "7"]) == [1.0, 0.0]
    with pytest.raises(ValueError, match=r"has no option\(s\) \['tga'\]; its options are \['answer', 'tag'\]"):
        get_reward("my_reward:exact_number", tga="final")


def guide_block(language: str) -> str:
    """The first fenced block of `language` in the guide."""
    found = re.search(rf"```{language}\n(.*?)```", GUIDE.read_text(), flags=re.S)
    assert found, f"{GUIDE.name} lost its {language} block"
    return found.group(1)


@pytest.mark.e2e
def test_the_guides_recipe_trains_with_the_reward_beside_it(cli, tmp_path):
    """The guide's recipe and data lines as written (tiny model, 2 short steps), my_reward.py copied next to the
    recipe. `validate` runs in that folder, as the guide's layout has it; `train` runs from the repository, so
    my_reward can only be imported from the recipe's folder (the rule the `posttrain` console script relies on)."""
    folder = tmp_path / "project"
    folder.mkdir()
    recipe = folder / "my-grpo.yaml"
    recipe.write_text(guide_block("yaml"))
    rows = [json.loads(line) for line in guide_block("json").splitlines() if line.strip()]
    assert rows and all(set(row) == {"question", "gold"} for row in rows)
    (folder / "my_problems.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows * 4))
    shutil.copy(EXAMPLE, folder / "my_reward.py")
    tiny = ["model.base_model_name=tiny:qwen2-1m"]

    checked = cli("validate", recipe, *tiny, cwd=folder)
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]
    misspelt = cli("validate", recipe, *tiny, "training.rewards=[{name: 'my_reward:exact_numbr'}]", cwd=folder)
    assert misspelt.returncode == 2 and "'my_reward' has no attribute 'exact_numbr'" in misspelt.stdout + misspelt.stderr

    out = tmp_path / "run"
    result = cli("train", "--recipe", recipe, *tiny, f"data.datasets[0].name={folder / 'my_problems.jsonl'}",
                 f"training.output_dir={out}", "training.max_steps=2", "training.num_generations=4",
                 "training.max_completion_length=16")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    scored = [r for r in steps if "rewards/exact_number/mean" in r]
    assert [r["step"] for r in scored] == [1, 2]
    assert all(0.0 <= r["rewards/exact_number/mean"] <= 1.0 for r in scored)
    assert all("rewards/format/mean" in r for r in scored)  # the built-in beside it


def test_the_guides_code_runs_on_its_own_and_is_the_shipped_files(my_reward):
    """The guide's python block is self-contained (its helpers shown, `posttrain recipes copy` ships the file): run
    alone it scores every case as above, and each function in it is the shipped file's, docstrings aside."""
    import ast

    shown = {}
    exec(guide_block("python"), shown)
    assert [shown["exact_number"]([chat(text)], answer=[gold]) for _, text, gold, _ in CASES] == [[e] for *_, e in CASES]

    def functions(source: str) -> dict[str, str]:
        found = {}
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef):
                if isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
                    node.body = node.body[1:]
                found[node.name] = ast.dump(node)
        return found

    assert functions(guide_block("python")) == functions(EXAMPLE.read_text())
