"""The `math` scorer (math-verify) against the numeric parser on a hand-labelled set of LaTeX answers.

    python benchmarks/latex_answers.py          # needs the math extra: pip install 'posttrain[math]'

The set (tests/rewards/latex_answers.jsonl, 55 completions) holds MATH-style gold answers --
fractions, roots, pi, intervals, sets, expressions in x, complex numbers, matrices, percentages,
plain numbers -- each answered right in several equivalent forms (\\frac12, 1/2, 0.5) and wrong in
near-miss ones, every row labelled by hand: does the completion's final answer equal gold? Each
scorer reads every row; the table counts, per scorer, right answers accepted and rejected, wrong
answers accepted and rejected, and golds it cannot read (the numeric rewards drop such rows from
GRPO data, eval scores them as text). strict: the <answer> block (the 4 untagged rows are wrong by
format, whatever they say); loose: format-blind. Prints a table and writes
benchmarks/results/latex_answers.json and .md (the disagreements with the hand labels listed).
The proof that the numbers mean something: tests/rewards/test_math_answers.py asserts the same
labels row by row, so a scorer change that moves this table fails the suite first.
"""

from __future__ import annotations

import datetime
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from posttrain.rewards.answers import extract_answer, loose_correct, strict_correct  # noqa: E402
from posttrain.rewards.math_answers import math_loose, math_strict  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ANSWERS = REPO / "tests" / "rewards" / "latex_answers.jsonl"
RESULTS = REPO / "benchmarks" / "results" / "latex_answers"


def _numeric(fn):
    """The numeric scorer, with a gold it cannot read reported as such (it raises: a data error to it)."""
    def score(completion: str, gold: str):
        try:
            return fn(completion, gold)
        except ValueError:
            return None
    return score


SCORERS = {
    "numeric strict (answer_match)": (_numeric(strict_correct), True),
    "math strict (math_match)": (math_strict, True),
    "numeric loose": (_numeric(loose_correct), False),
    "math loose": (math_loose, False),
}


def main() -> int:
    rows = [json.loads(line) for line in ANSWERS.read_text().splitlines() if line.strip()]
    math_strict("<answer>1</answer>", "1")  # math-verify's import and first parse (~1 s) are not any row's time
    results, misses = {}, {}
    for name, (fn, strict) in SCORERS.items():
        counts = {"right_accepted": 0, "right_rejected": 0, "wrong_accepted": 0, "wrong_rejected": 0, "gold_unreadable": 0}
        started, missed = time.perf_counter(), []
        for row in rows:
            verdict = fn(row["completion"], row["gold"])
            # strict: an untagged completion is wrong by format, whatever it says
            right = row["right"] and (not strict or extract_answer(row["completion"]) is not None)
            if verdict is None:  # counted, not listed: the table says how many
                counts["gold_unreadable"] += 1
                continue
            counts[f"{'right' if right else 'wrong'}_{'accepted' if verdict else 'rejected'}"] += 1
            if bool(verdict) != right:
                missed.append({"id": row["id"], "gold": row["gold"], "label": right, "scored": bool(verdict)})
        counts["agree"] = counts["right_accepted"] + counts["wrong_rejected"]
        counts["ms_per_row"] = round(1000 * (time.perf_counter() - started) / len(rows), 2)
        results[name], misses[name] = counts, missed
    machine = f"{platform.machine()}, Python {platform.python_version()}"
    from importlib.metadata import version

    out = {"date": datetime.date.today().isoformat(), "command": "python benchmarks/latex_answers.py", "machine": machine,
           "math_verify": version("math-verify"), "rows": len(rows), "right_rows": sum(r["right"] for r in rows),
           "scorers": results, "disagreements": misses}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.with_suffix(".json").write_text(json.dumps(out, indent=2) + "\n")
    header = "| scorer | agrees with the hand label | right accepted | right rejected | wrong accepted | wrong rejected | gold unreadable | ms/row |"
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    for name, c in results.items():
        lines.append(f"| {name} | {c['agree']}/{len(rows)} | {c['right_accepted']} | {c['right_rejected']} | {c['wrong_accepted']} | "
                     f"{c['wrong_rejected']} | {c['gold_unreadable']} | {c['ms_per_row']} |")
    table = "\n".join(lines)
    print(table)
    detail = ["", "Disagreements with the hand labels (label: the row is right; golds a scorer cannot read are only counted):", ""]
    for name, missed in misses.items():
        detail += [f"- {name}: " + ("; ".join(f"`{m['id']}` (gold `{m['gold']}`, label {m['label']}, scored {m['scored']})"
                                               for m in missed) or "none")]
    RESULTS.with_suffix(".md").write_text(f"{out['date']}, `{out['command']}`, {machine}, math-verify {out['math_verify']}, "
                                          f"{len(rows)} rows ({out['right_rows']} right)\n\n{table}\n" + "\n".join(detail) + "\n")
    print("\n".join(detail))
    print(f"wrote {RESULTS.with_suffix('.json').relative_to(REPO)} and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
