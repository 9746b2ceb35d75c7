"""`posttrain report --html`: one self-contained page, loaded in a real headless Chromium.

Chromium comes from the OS packages (`apt-get install -y chromium`; .ci/run installs it). Without
it the browser test is skipped with the reason, except in CI (CI=true), where it fails.
"""

import json
import os
import re
import shutil
import subprocess

import pytest

from posttrain.evaluation.html_report import markdown_to_html


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but no chromium on PATH: .ci/run must apt-get install -y chromium")
        pytest.skip("headless Chromium not installed (apt-get install -y chromium)")
    return found


def fake_run(path, steps=12):
    """A GRPO run directory as posttrain writes it, with rewards that never vary (no learning signal)."""
    path.mkdir()
    records = [{"step": s, "loss": 0.0, "grad_norm": 0.0, "learning_rate": 1e-4, "reward": 0.0, "reward_std": 0.0,
                "frac_reward_zero_std": 1.0, "completions/mean_length": 30.0, "completions/clipped_ratio": 0.5,
                "entropy": 7.0, "kl": 0.0, "speed/tokens_per_s": 100.0 + s, "time/generation_s": 1.0} for s in range(1, steps + 1)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (path / "trl_config.json").write_text(json.dumps({"beta": 0.04, "num_generations": 4, "max_completion_length": 32}))
    (path / "run_summary.json").write_text(json.dumps({"algorithm": "grpo", "global_step": steps, "stopped_by": None,
                                                       "speed": {"tokens_per_s": 106.5, "samples_per_s": 2.0, "peak": "test"}}))
    return path


def test_markdown_subset_renders_tables_lists_and_flags():
    page = markdown_to_html("## health\n\n- run: 1 flag(s)\n- no_learning_signal (steps 1-5): `x` <b>\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    assert "<h2>health</h2>" in page and "<td>1</td><td>2</td>" in page
    assert '<li class="flag">no_learning_signal (steps 1-5): <code>x</code> &lt;b&gt;</li>' in page


def test_html_report_renders_in_headless_chromium(cli, tmp_path):
    browser = chromium()
    run = fake_run(tmp_path / "grpo-run")
    page = tmp_path / "report.html"
    result = cli("report", str(run), "--html", str(page))
    assert result.returncode == 0, result.stderr
    text = page.read_text()
    assert "no_learning_signal (steps 1-12)" in text and "src=\"http" not in text  # self-contained
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([browser, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-ready="yes"' in dom.stdout  # the load handler ran
    plots = re.findall(r'<img class="plot"[^>]*>', dom.stdout)
    assert plots and all('data-loaded="yes"' in img for img in plots)  # every plot decoded with a size
    errors = re.search(r'<pre id="errors" hidden="">(.*?)</pre>', dom.stdout, re.S)
    assert errors is not None and errors.group(1).strip() == ""  # no script errors
    shot = tmp_path / "report.png"
    subprocess.run([browser, *flags, "--window-size=1200,2400", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, text=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
