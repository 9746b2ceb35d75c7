"""When each held-out evaluation happened on the run's training clock: time to accuracy.

Two runs from one start compare fairly only at equal cost, and steps are no common unit (a GRPO step generates,
an SFT step does not). A run's clock is the wall time it spent training before the evaluation: its held-out
evaluations left out (they are measurement, not training); what the method does before its first step counted
(the difficulty filter's pre-pass, RFT's first sampling round) and RFT's later rounds too.

- Runs that log `time/train_s` (held-out records since 2026-12-06; it starts when the trainer does): that, plus
  the pre-pass's seconds (run_summary.json's `difficulty.seconds`) and RFT's first round's (logged at step 0). A
  resumed run's clock restarts: its later evaluations continue from the last one before the resume, marked estimated.
- Older runs: reconstructed, assuming equal steps: the run's mean step (run_summary.json's `speed.step_s`, which
  leaves out held-out scoring and RFT's rounds) times the step, plus the same costs before training, plus the
  RFT rounds logged before the step. Such times are marked estimated.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tick:
    step: int
    seconds: float
    estimated: bool  # reconstructed from the run's average step (older runs), not read from the record


def held_out_ticks(records: list[dict], summary: dict | None) -> list[Tick]:
    """The training clock at each held-out evaluation in `records` (metrics.jsonl), in their order. Empty when the
    run logged none, and for an older run not finished (no run_summary.json: no mean step to reconstruct from)."""
    evaluations = [r for r in records if isinstance(r.get("held_out/loose"), (int, float))]
    summary = summary or {}
    rounds = [(r["step"], r["time/rft_sample_s"]) for r in records if isinstance(r.get("time/rft_sample_s"), (int, float))]
    before = float((summary.get("difficulty") or {}).get("seconds") or 0.0) + sum(s for at, s in rounds if at == 0)
    if all(isinstance(r.get("time/train_s"), (int, float)) for r in evaluations):
        ticks, offset, last, resumed = [], before, 0.0, False
        for r in evaluations:
            if r["time/train_s"] < last:  # a resume restarted the clock: continue from the last evaluation before it
                offset, resumed = offset + last, True  # (what ran after that evaluation and was redone is not counted)
            last = r["time/train_s"]
            ticks.append(Tick(r["step"], offset + last, estimated=resumed))
        return ticks
    step_s = (summary.get("speed") or {}).get("step_s")
    if not step_s:
        return []
    # an RFT round logged at step k > 0 samples after step k and before step k + 1
    return [Tick(r["step"], before + step_s * r["step"] + sum(s for at, s in rounds if 0 < at < r["step"]), estimated=True)
            for r in evaluations]
