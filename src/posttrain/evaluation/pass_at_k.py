"""pass@k beside greedy accuracy: whether the right answer is within a model's reach (`posttrain eval --pass-k K`).

    posttrain eval --model runs/sft/best --task custom --data dev.jsonl --pass-k 8      # + K sampled answers per item

An item counts for pass@k when any of its K answers sampled at `--pass-temperature` is right (strict or loose). pass@k
minus greedy accuracy is the headroom reinforcement learning can turn into greedy accuracy: RLVR raises pass@1 inside the
policy's pass@k (Yue et al. 2025). With none, try more data, distillation or a stronger start before RL.

Sample j of every item is drawn with seed `--seed` + 1 + j (greedy answers use no randomness), so each of the K passes
is one cached generation run of its own and a repeated command regenerates nothing.
"""

from __future__ import annotations

METRICS = ("strict", "loose")


def pass_at_k(greedy: list[dict], passes: list[list[dict]], temperature: float) -> dict:
    """summary.json's `pass_at_k`: per metric, pass@k, greedy accuracy and their difference, over the items that no
    request failed on (a failed request is no answer, not a wrong one)."""
    failed = {r["id"] for rows in [greedy, *passes] for r in rows if r.get("error")}
    ids = [r["id"] for r in greedy if r["id"] not in failed]
    out = {"k": len(passes), "temperature": temperature, "n": len(ids), "excluded": len(greedy) - len(ids)}
    for metric in METRICS:
        right = {r["id"]: bool(r[metric]) for r in greedy}
        sampled = [{r["id"]: bool(r[metric]) for r in rows} for rows in passes]
        reached = {i: any(rows[i] for rows in sampled) for i in ids}
        solved, greedy_right = sum(reached.values()), sum(right[i] for i in ids)
        out[metric] = {f"pass@{len(passes)}": round(solved / len(ids), 6) if ids else None,
                       "greedy": round(greedy_right / len(ids), 6) if ids else None,
                       "headroom": round((solved - greedy_right) / len(ids), 6) if ids else None,
                       "reached_only_by_sampling": sum(reached[i] and not right[i] for i in ids)}
    return out


def render(result: dict) -> str:
    """The summary.md section."""
    k = result["k"]
    lines = [f"## pass@{k}: {k} answers per item sampled at temperature {result['temperature']:g}", "",
             f"| metric | pass@{k} | greedy | headroom (pass@{k} - greedy) | items only sampling solves |", "|---|---|---|---|---|"]
    for metric in METRICS:
        m = result[metric]
        if m["greedy"] is None:
            lines.append(f"| {metric} | - | - | - | - |")
            continue
        lines.append(f"| {metric} | {100 * m[f'pass@{k}']:.1f}% | {100 * m['greedy']:.1f}% | {100 * m['headroom']:+.1f} pts | "
                     f"{m['reached_only_by_sampling']}/{result['n']} |")
    lines += ["", f"pass@{k}: an item counts when any of its {k} sampled answers is right. The headroom is what RL can turn "
              "into greedy accuracy (RLVR raises pass@1 inside pass@k); near 0, RL can only teach format: try more SFT data "
              "or distillation first." + (f" {result['excluded']} items left out: a request failed." if result["excluded"] else ""), ""]
    return "\n".join(lines)
