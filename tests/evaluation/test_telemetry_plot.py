"""report --plot: one colour per run in every panel, and a legend that is right for all of them."""

from pathlib import Path

import pytest

from posttrain.evaluation.telemetry import RunMetrics, figure

pytest.importorskip("matplotlib")


def run(name: str, keys: list[str]) -> RunMetrics:
    return RunMetrics(name, Path(name), [{"step": s, **{k: float(s) for k in keys}} for s in (1, 2, 3)], beta=None)


def test_each_run_keeps_its_colour_in_every_panel_and_in_the_legend():
    # "sft" logs no reward: before, "grpo" took the first colour in the reward panel and sft's colour elsewhere.
    runs = [run("sft", ["loss"]), run("grpo", ["loss", "reward"]), run("gspo", ["loss", "reward"])]
    fig = figure(runs)
    try:
        seen: dict[str, set] = {}
        for ax in fig.axes:
            for line in ax.get_lines():
                seen.setdefault(line.get_label(), set()).add(line.get_color())
        assert {name: len(colours) for name, colours in seen.items()} == {"sft": 1, "grpo": 1, "gspo": 1}
        assert len({next(iter(c)) for c in seen.values()}) == 3
        [legend] = fig.legends
        legend_colours = {text.get_text(): handle.get_color() for text, handle in zip(legend.get_texts(), legend.legend_handles)}
        assert legend_colours == {name: next(iter(colours)) for name, colours in seen.items()}
        panels = [ax for ax in fig.axes if ax.get_lines()]
        reward = next(ax for ax in panels if "reward" in ax.get_title().lower())
        assert [line.get_label() for line in reward.get_lines()] == ["grpo", "gspo"]
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_mfu_is_a_percentage_in_every_table():
    """metrics.jsonl and run_summary.json keep MFU as a fraction; the report showed it raw in the
    per-step table and as a percentage in the speed table."""
    from posttrain.evaluation.telemetry import render

    one = RunMetrics("a", Path("a"), [{"step": 1, "loss": 1.0, "speed/mfu": 0.1016}, {"step": 2, "loss": 0.9, "speed/mfu": 0.1016}],
                     beta=None, summary={"speed": {"mfu": 0.1016, "tokens_per_s": 100.0, "peak": "test"}, "health": []})
    text = render([one], 1)
    assert "## MFU (% of peak)" in text and text.count("10.2%") == 2 and "0.1016" not in text


def test_each_run_is_binned_on_its_own_so_a_short_run_shows_its_trend():
    """An 80-step GRPO run beside a 5-step SFT run: shared bins put all five SFT steps in the first of
    four ranges and left three empty; each run now gets its own parts."""
    from posttrain.evaluation.telemetry import render

    short = RunMetrics("sft", Path("sft"), [{"step": s, "loss": 2.0 - 0.3 * s} for s in range(1, 6)], beta=None, summary={"health": []})
    long = RunMetrics("grpo", Path("grpo"), [{"step": s, "loss": 1.0 / s} for s in range(1, 81)], beta=None, summary={"health": []})
    text = render([short, long], 4)
    assert "Steps in each part: sft 1-1, 2-2, 3-4, 5-5; grpo 1-20, 21-40, 41-60, 61-80" in text
    table = text.split("## loss")[1].split("\n\n")[1].splitlines()
    assert table[0] == "| part | sft | grpo |"
    assert [row.split(" | ")[1] for row in table[2:]] == ["1.7", "1.4", "0.95", "0.5"]  # every part of the short run filled
    same = render([long, RunMetrics("gspo", Path("gspo"), long.records, beta=None, summary={"health": []})], 4)
    assert "| 1-20 |" in same and "part" not in same.split("## loss")[1]  # runs of one length keep step ranges
