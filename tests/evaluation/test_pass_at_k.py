"""`posttrain eval --pass-k K`: K sampled answers per item beside the greedy ones, pass@K against greedy accuracy.

The model is a real HTTP server on 127.0.0.1 speaking OpenAI's chat API, so what each answer is right on is known:
every answer is right on the even items, and a sampled one on the odd items too when the request's seed is a
multiple of 3. Sample j is drawn with seed --seed + 1 + j, so with --seed 0, K = 2 (seeds 1, 2) finds no headroom and
K = 3 (seed 3) reaches every odd item."""

from __future__ import annotations

import json

import pytest

from posttrain.evaluation.pass_at_k import pass_at_k

ITEMS = 6


def _server(http_server):
    def answer(method, path, headers, body):
        request = json.loads(body)
        number = int(request["messages"][-1]["content"].split()[-1])  # "What is item N?" -> its gold is N
        sampled = request["temperature"] > 0
        right = number % 2 == 0 or (sampled and request["seed"] % 3 == 0)
        text = f"The answer is {number if right else number + 100}."
        reply = {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                 "usage": {"prompt_tokens": 5, "completion_tokens": 5}}
        return 200, {"Content-Type": "application/json"}, json.dumps(reply).encode()

    return http_server(handler=answer)


def _eval(cli, tmp_path, server, k, out):
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"What is item {i}", "answer": i}) + "\n" for i in range(ITEMS)))
    return cli("eval", "--model", "openai:m", "--base-url", server.url + "/v1", "--task", "custom", "--data", data,
               "--pass-k", str(k), "--out", tmp_path / out, "--no-progress", env={"OPENAI_API_KEY": "k"})


def test_pass_at_k_against_greedy_through_the_cli(cli, tmp_path, http_server):
    server = _server(http_server)
    result = _eval(cli, tmp_path, server, 2, "k2")
    assert result.returncode == 0, result.stderr
    two = json.loads((tmp_path / "k2" / "summary.json").read_text())["pass_at_k"]
    assert two["k"] == 2 and two["loose"] == {"pass@2": 0.5, "greedy": 0.5, "headroom": 0.0, "reached_only_by_sampling": 0}

    result = _eval(cli, tmp_path, server, 3, "k3")
    assert result.returncode == 0, result.stderr
    three = json.loads((tmp_path / "k3" / "summary.json").read_text())["pass_at_k"]
    assert three["loose"] == {"pass@3": 1.0, "greedy": 0.5, "headroom": 0.5, "reached_only_by_sampling": 3}
    assert "| loose | 100.0% | 50.0% | +50.0 pts | 3/6 |" in result.stdout
    rows = [json.loads(line) for line in (tmp_path / "k3" / "samples_pass.jsonl").read_text().splitlines()]
    assert sorted({r["sample"] for r in rows}) == [0, 1, 2] and len(rows) == 3 * ITEMS
    assert json.loads((tmp_path / "k3" / "summary.json").read_text())["arms"][0]["loose_acc"] == 0.5  # greedy scores accuracy

    asked = len(server.requests)
    again = _eval(cli, tmp_path, server, 3, "k3")
    assert again.returncode == 0 and len(server.requests) == asked  # every pass came from the cache


@pytest.mark.parametrize("flags", [["--pass-k", "1"], ["--pass-k", "4", "--pass-temperature", "0"]])
def test_a_pass_k_that_samples_nothing_is_refused(cli, tmp_path, flags):
    result = cli("eval", "--model", "tiny:qwen2-1m", "--task", "arithmetic", "--n", "2", "--out", tmp_path / "o", *flags)
    assert result.returncode == 2 and "pass@k samples 2 or more answers per item at a temperature above 0" in result.stderr


def test_an_item_a_request_failed_on_is_left_out():
    def rows(right, failed=()):
        return [{"id": i, "strict": False, "loose": r, "error": "timeout" if i in failed else None} for i, r in enumerate(right)]

    result = pass_at_k(rows([True, False, False, False]), [rows([False, True, False, True], failed=(3,)),
                                                           rows([False, False, False, False])], 1.0)
    assert result["n"] == 3 and result["excluded"] == 1
    assert result["loose"] == {"pass@2": round(1 / 3, 6), "greedy": round(1 / 3, 6), "headroom": 0.0, "reached_only_by_sampling": 1}
