"""How many rows each dataset lost before training, and the limit on it (`data.max_drop_fraction`).

Rows are dropped at three stages, each counted where it happens: while reading (empty fields,
unreadable media, gold answers a reward cannot compare: `DataReport.dropped`), when prompts are
measured against `data.max_prompt_length` (GRPO/GSPO/DPO), and when the collator finds a row with
no token to train on (`TokenAudit.no_label_rows`). A stage sees only what the previous ones kept,
so a dataset's lost share is 1 - the product of each stage's kept share.

A dataset that loses more than the limit is an error before training, naming each reason with
its count: a run on the remnant trains on a different dataset (every long prompt gone, every
non-integer answer gone) and would call itself done.

    ledger = DropLedger(0.1)
    ledger.add_report(report)                  # after reading
    ledger.add_stage("data.datasets[0]", "over data.max_prompt_length=64", seen=80, dropped=12)
    ledger.add_audits(audits)                  # after the collator's audit
    ledger.check()                             # UserError (exit 2) naming every dataset over the limit
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from posttrain.errors import UserError


@dataclass
class _Stage:
    what: str  # "reading", "over data.max_prompt_length=64", "without a label token"
    seen: int
    reasons: dict[str, int]

    @property
    def dropped(self) -> int:
        return sum(self.reasons.values())


@dataclass
class DropLedger:
    limit: float
    names: dict[str, str] = field(default_factory=dict)  # key -> file or hub id
    stages: dict[str, list[_Stage]] = field(default_factory=dict)

    def add_report(self, report) -> None:
        self.names[report.key] = report.name
        self.stages.setdefault(report.key, []).append(_Stage("reading", report.rows_in, dict(report.dropped)))

    def add_stage(self, key: str, what: str, seen: int, dropped: int) -> None:
        """Rows of dataset `key` a stage saw and dropped; the same stage on another split (eval_fraction's
        held-out rows) adds to it, as both splits are shares of the same rows."""
        stages = self.stages.setdefault(key, [])
        same = next((s for s in stages if s.what == what), None)
        if same is None:
            stages.append(_Stage(what, seen, {what: dropped} if dropped else {}))
        else:
            same.seen += seen
            if dropped:
                same.reasons[what] = same.reasons.get(what, 0) + dropped

    def add_audits(self, audits) -> None:
        """Token audits (one per dataset key and split); prompt audits (GRPO) drop nothing and are skipped."""
        from .token_audit import TokenAudit

        for audit in audits:
            if isinstance(audit, TokenAudit):
                self.add_stage(audit.key, "without a label token", audit.rows, audit.no_label_rows)

    def lost_share(self, key: str) -> float:
        kept = 1.0
        for stage in self.stages.get(key, []):
            kept *= 1 - stage.dropped / stage.seen if stage.seen else 1.0
        return 1 - kept

    def over_limit(self) -> list[str]:
        """One line per dataset that lost more than the limit."""
        out = []
        for key, stages in self.stages.items():
            share = self.lost_share(key)
            if share <= self.limit + 1e-12:
                continue
            parts = []
            for stage in stages:
                if not stage.dropped:
                    continue
                if stage.what == "reading":
                    reasons = ", ".join(f"{n} {why}" for why, n in sorted(stage.reasons.items(), key=lambda item: -item[1]))
                    parts.append(f"{stage.dropped} of {stage.seen} rows at reading ({reasons})")
                else:
                    parts.append(f"{stage.dropped} of {stage.seen} remaining rows {stage.what}")
            name = f" ({self.names[key]})" if key in self.names else ""
            out.append(f"{key}{name} lost {share:.1%} of its rows: {'; '.join(parts)}")
        return out

    def check(self) -> None:
        lines = self.over_limit()
        if lines:
            needed = math.ceil(100 * max(self.lost_share(key) for key in self.stages) - 1e-9) / 100  # the largest loss, up to 0.01
            raise UserError(f"data.max_drop_fraction={self.limit:g}: {len(lines)} dataset(s) lost more of their rows than that, so "
                            "the run would train on what is left of them:\n" + "\n".join(f"  - {line}" for line in lines) +
                            "\nFix the rows (the start-up log above lists them by reason and row), or raise "
                            f"data.max_drop_fraction to train on the rest (data.max_drop_fraction={needed:g} lets this data through).")
