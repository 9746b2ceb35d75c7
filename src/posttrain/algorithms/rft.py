"""Rejection-sampling fine-tuning (RFT): sample with the policy, keep what the rewards accept, fine-tune as SFT does.

    posttrain train --recipe recipes/rft/tiny-cpu.yaml

Expert iteration (Anthony et al. 2017), STaR (Zelikman et al. 2022, arXiv:2203.14465), RFT (Yuan et al. 2023,
arXiv:2308.01825), ReST-EM (Singh et al. 2023, arXiv:2312.06585); Llama 2 and 3 post-train with it. Beside GRPO it is
the plain baseline that tells "RL's update" from "more verified data": the same prompts, the same rewards, and
supervised steps on the samples that pass instead of policy-gradient steps on every sample.

Each of `training.rounds` rounds:
1. draws `prompts_per_round` prompts (every one by default) in a seeded shuffle (training.seed) that runs on across
   rounds, a fresh shuffle on each pass through the data;
2. samples `num_generations` completions of each with the current policy through posttrain's decoding loop: the
   engine `posttrain eval` and held-out scoring use (`TransformersEngine.around`; eval mode, float32 on a CPU),
   seeded with training.seed + the round;
3. scores them with the recipe's rewards, called as TRL's GRPOTrainer calls them (prompts, completions, the rows'
   columns, trainer_state), their weighted sum as TRL sums it (a None is left out), and keeps those at or above
   `reward_threshold`, deduplicated per prompt (the same text, whitespace stripped, is one completion);
4. trains on `rows_per_round` rows of the kept pairs (default: one per prompt drawn), taken round-robin over their
   prompts and cycling when fewer were kept, as SFT trains prompt/completion pairs: `sft.build_trainer` builds the
   trainer (the chat template, loss on the completion only, padding-free batches where SFT has them), and each
   round's pairs go through its dataset step (tokens, labels, the token audit).

The Trainer sees one epoch per round (num_train_epochs = rounds) of a fixed number of rows; `Rounds`, a callback,
swaps a round's rows in at its epoch's start, after the previous round's last optimizer step and before the epoch's
first batch is drawn, so each round samples with the weights the previous round trained. Round 1 is sampled before
the trainer is built: a first round that keeps nothing stops with exit 2 before output_dir is written.

Every round adds one record to metrics.jsonl at the step it starts: rft/round, rft/sampled, rft/accepted (at or above
the threshold), rft/acceptance (accepted / sampled), rft/kept (after deduplication), rft/duplicates,
rft/prompts_solved (share of the drawn prompts with a kept completion), rft/rows, rft/repeats (rows / kept),
rft/reward_mean and time/rft_sample_s. The kept pairs go to output_dir/rft/round-R.jsonl; a resumed run reads each
round that began at or before its checkpoint from there instead of sampling it again, so it trains the same rows.
run_summary.json's `rft` lists every round's record and the sequences trained (rounds x rows_per_round).
"""

from __future__ import annotations

import json
import math
import random
import time
from contextlib import nullcontext

from transformers import TrainerCallback

from posttrain.errors import UserError

from .common import is_main_process, log, without_autocast

FOLDER = "rft"  # output_dir/rft/round-R.jsonl: each round's kept pairs
TRAINED_COLUMNS = ("input_ids", "labels", "seq_lengths")  # what TRL 1.16's SFT collator reads (its signature columns)


def build_trainer(run):
    from posttrain.internals import require

    from . import sft
    from .grpo import reward_functions

    training = run.loaded_recipe.recipe.training
    functions, _ = reward_functions(training)  # reward models are refused by the schema (recipe/rft_section.py)
    prompts = run.train_dataset
    rounds = Rounds(run, prompts, functions)
    first = rounds.first_round()
    run.train_dataset = first.pairs_dataset()
    try:
        trainer = sft.build_trainer(run)  # round 1's pairs tokenized and audited as SFT data
    finally:
        run.train_dataset = prompts
    require(trainer, "_prepare_dataset")  # posttrain's audited dataset step, for each later round's pairs
    rounds.attach(trainer)
    trainer.train_dataset = RoundRows(rounds.rows_of(first, trainer.train_dataset))
    trainer.add_callback(rounds)
    return trainer


class RoundRows:
    """The trained rows of the current round: a map-style dataset whose length never changes (the Trainer's schedule is
    built on it), whose rows `replace` swaps between epochs. The DataLoader reads rows lazily, so a swap before an
    epoch's first batch is what that epoch trains."""

    def __init__(self, rows: list[dict]):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        return self.rows[i]

    def replace(self, rows: list[dict]) -> None:
        if len(rows) != len(self.rows):
            raise RuntimeError(f"an RFT round has {len(rows)} rows where the schedule has {len(self.rows)}")
        self.rows = rows


class Round:
    """One round's draw: the prompts (their dataset rows), the kept completions per prompt, the counts."""

    def __init__(self, number: int, step: int, rows: list[dict], kept: dict[int, list[str]], stats: dict, cached: bool = False):
        self.number, self.step, self.rows, self.kept, self.stats, self.cached = number, step, rows, kept, stats, cached

    def pairs(self) -> list[dict]:
        """The unique kept pairs, prompt by prompt in draw order: {prompt, completion, rft_prompt}."""
        out = []
        for i, texts in self.kept.items():
            prompt = self.rows[i]["prompt"]
            for text in texts:
                completion = [{"role": "assistant", "content": text}] if isinstance(prompt, list) else text
                out.append({"prompt": prompt, "completion": completion, "rft_prompt": i})
        return out

    def pairs_dataset(self):
        from datasets import Dataset

        return Dataset.from_list(self.pairs())


class Rounds(TrainerCallback):
    """Samples, scores and keeps each round's completions, and swaps its rows in at its epoch's start (module docstring)."""

    def __init__(self, run, prompts, rewards: list):
        training = run.loaded_recipe.recipe.training
        self.run, self.training, self.prompts, self.rewards = run, training, prompts, rewards
        self.weights = [spec.weight for spec in training.rewards]
        self.seed = training.seed if training.seed is not None else 42
        self.per_round = (training.prompts_per_round or len(prompts)) if len(prompts) else 0  # more than the data: a prompt recurs
        self.n_rows = training.rows_per_round or self.per_round
        self.folder = run.output_dir / FOLDER
        self.resumed_at = None
        if run.resume_from is not None:
            from .resume import checkpoint_step

            self.resumed_at = checkpoint_step(run.resume_from)
        self.trainer = None
        self.current = 0  # the round whose rows are in the dataset
        self.steps_per_round = None
        self.unwritten: list[Round] = []  # sampled before output_dir was ready (round 1): written at train begin
        self.unlogged: list[Round] = []

    def attach(self, trainer) -> None:
        self.trainer = trainer

    # -- which prompts -------------------------------------------------------------------------
    def drawn(self, number: int) -> list[int]:
        """Round `number`'s prompt indices: positions (number-1)*P .. number*P-1 of a stream of seeded shuffles."""
        n, out, orders = len(self.prompts), [], {}
        for position in range((number - 1) * self.per_round, number * self.per_round):
            epoch, at = divmod(position, n)
            if epoch not in orders:
                orders[epoch] = list(range(n))
                random.Random(self.seed * 1_000_003 + epoch).shuffle(orders[epoch])
            out.append(orders[epoch][at])
        return out

    # -- one round -------------------------------------------------------------------------------
    def first_round(self) -> Round:
        if not self.per_round:
            raise UserError("data.datasets: no training prompts are left to sample (RFT samples completions of them)")
        first = self.cached(1, 0) or self.sample(1, 0, self.run.loaded.model, wrapped=None)
        self.current = 1
        if not first.cached:
            self.unwritten.append(first)
            self.unlogged.append(first)
        return first

    def cached(self, number: int, step: int) -> Round | None:
        """A resumed run's round that began at or before its checkpoint, as it was kept then (else None)."""
        path = self.folder / f"round-{number}.jsonl"
        if self.resumed_at is None or step > self.resumed_at or not path.is_file():
            return None
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        drawn = self.drawn(number)
        kept: dict[int, list[str]] = {}
        for r in records:  # by the prompt's position in the round's draw (a prompt drawn twice in one round is two)
            kept.setdefault(r["position"], []).append(r["completion"])
        log(f"rft round {number}: {sum(map(len, kept.values()))} kept pairs read from {path} (the round began at step {step}, "
            f"at or before the checkpoint's step {self.resumed_at})")
        return Round(number, step, [self.prompts[i] for i in drawn], kept, {}, cached=True)

    def sample(self, number: int, step: int, model, wrapped) -> Round:
        """Sample, score and keep round `number`'s completions with `model` as it is now (this process's share of the prompts,
        gathered from every process). `wrapped`: the trainer's model, whose autocast forward generation steps around."""
        import torch

        from posttrain.generation.base import SamplingParams
        from posttrain.generation.inference_weights import forget_trained
        from posttrain.generation.local import TransformersEngine

        training, run = self.training, self.run
        started = time.perf_counter()
        drawn = self.drawn(number)
        rows = [self.prompts[i] for i in drawn]
        rank, world = run.trl_config.process_index, run.trl_config.world_size
        mine = list(range(rank, len(rows), world))
        k = training.num_generations
        engine = TransformersEngine.around(model, run.loaded.tokenizer, "rft",
                                           use_chat_template=getattr(run.loaded_recipe.recipe.data, "use_chat_template", True))
        was_training = model.training
        model.eval()
        params = SamplingParams(max_new_tokens=training.max_completion_length, temperature=training.temperature,
                                top_p=training.top_p, seed=self.seed + number)
        trainer = self.trainer
        autocast = (without_autocast(wrapped, trainer.accelerator.native_amp)
                    if trainer is not None and trainer.args.use_cpu else nullcontext())
        try:
            with autocast, torch.no_grad():
                completions = engine.generate([rows[i]["prompt"] for i in mine for _ in range(k)], params) if mine else []
        finally:
            model.train(was_training)
            forget_trained(model, frozen_too=True)  # the next round's weights differ; the packed copies would only take memory
        texts = [c.text for c in completions]
        scores = self.score([rows[i] for i in mine for _ in range(k)], texts)
        local = [(i, texts[j * k:(j + 1) * k], scores[j * k:(j + 1) * k]) for j, i in enumerate(mine)]
        if world > 1:
            from accelerate.utils import gather_object

            local = sorted(gather_object(local), key=lambda item: item[0])
        kept: dict[int, list[str]] = {}
        accepted = duplicates = 0
        all_scores = []
        for i, group_texts, group_scores in local:
            all_scores += group_scores
            for text, score in zip(group_texts, group_scores):
                if score >= training.reward_threshold:
                    accepted += 1
                    unique = kept.setdefault(i, [])
                    if any(text.strip() == t.strip() for t in unique):
                        duplicates += 1
                    else:
                        unique.append(text)
        sampled = len(rows) * k
        n_kept = accepted - duplicates
        finite = [s for s in all_scores if not math.isnan(s)]
        stats = {"rft/round": number, "rft/sampled": sampled, "rft/accepted": accepted,
                 "rft/acceptance": round(accepted / sampled, 6) if sampled else 0.0, "rft/kept": n_kept, "rft/duplicates": duplicates,
                 "rft/prompts_solved": round(len(kept) / len(rows), 6) if rows else 0.0,
                 "rft/reward_mean": round(sum(finite) / len(finite), 6) if finite else None,
                 "rft/rows": self.n_rows, "rft/repeats": round(self.n_rows / n_kept, 4) if n_kept else None,
                 "time/rft_sample_s": round(time.perf_counter() - started, 3)}
        if not n_kept:
            best = max(finite) if finite else None
            raise UserError(f"rft round {number}: none of the {sampled} sampled completions ({len(rows)} prompts x training.num_generations="
                            f"{k}) scored at least training.reward_threshold={training.reward_threshold} (best: {best}), so there is nothing "
                            "to train on. Start from a model that solves some prompts (SFT first), raise training.num_generations, "
                            "or lower training.reward_threshold to what a right answer earns with these rewards.")
        round_ = Round(number, step, rows, kept, stats)
        log(f"rft round {number}/{training.rounds} (step {step}): {sampled} completions sampled ({len(rows)} prompts x {k}), "
            f"{accepted} at or above {training.reward_threshold} ({100 * stats['rft/acceptance']:.1f}%), {n_kept} kept after "
            f"{duplicates} duplicates, {len(kept)}/{len(rows)} prompts solved; training {self.n_rows} rows"
            + (f" (each kept pair {stats['rft/repeats']:g}x)" if n_kept < self.n_rows else "") + f" [{stats['time/rft_sample_s']:.1f} s]")
        return round_

    def score(self, rows: list[dict], texts: list[str]) -> list[float]:
        """Each completion's weighted reward sum, the rewards called with the keywords TRL's GRPOTrainer passes
        (posttrain.rewards.scoring, as the start-up trial and the difficulty pre-pass call them); NaN where none scored."""
        from posttrain.rewards.scoring import reward_kwargs, weighted_sums

        if not texts:
            return []
        tokenizer = self.run.loaded.tokenizer
        ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        kwargs = reward_kwargs(rows, texts, ids, self.trainer.state if self.trainer is not None else None)
        return [math.nan if total is None else total for total in weighted_sums(self.rewards, self.weights, kwargs, len(texts))]

    def rows_of(self, round_: Round, tokenized) -> list[dict]:
        """`n_rows` trained rows from a round's tokenized pairs: round-robin over their prompts (every kept prompt once
        before any twice), cycling through the pairs when fewer were kept."""
        missing = [c for c in ("input_ids", "labels") if c not in tokenized.column_names]
        if missing or "rft_prompt" not in tokenized.column_names:
            raise RuntimeError(f"TRL's SFT dataset step no longer gives {missing or ['rft_prompt']}: pin trl==1.16.0 (pyproject.toml)")
        if not len(tokenized):
            raise UserError(f"rft round {round_.number}: every kept pair was dropped by the token audit (no completion token left "
                            "under training.max_length); raise training.max_length")
        keep = [c for c in TRAINED_COLUMNS if c in tokenized.column_names]
        by_prompt: dict[int, list[dict]] = {}
        for row in tokenized:
            by_prompt.setdefault(row["rft_prompt"], []).append({c: row[c] for c in keep})
        queue = [row for depth in range(max(map(len, by_prompt.values()))) for rows in by_prompt.values() if depth < len(rows)
                 for row in [rows[depth]]]
        return [queue[i % len(queue)] for i in range(self.n_rows)]

    # -- when --------------------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        self.steps_per_round = state.max_steps // self.training.rounds
        self._write_and_log(state, control)

    def on_epoch_begin(self, args, state, control, **kwargs):
        number = state.global_step // self.steps_per_round + 1
        if number == self.current or number > self.training.rounds:
            return
        step = (number - 1) * self.steps_per_round
        trainer = self.trainer
        round_ = self.cached(number, step) or self.sample(number, state.global_step, trainer.accelerator.unwrap_model(trainer.model),
                                                          wrapped=trainer.model)
        tokenized = self.tokenize(round_)
        trainer.train_dataset.replace(self.rows_of(round_, tokenized))
        self.current = number
        if not round_.cached:
            self.unwritten.append(round_)
            self.unlogged.append(round_)
        self._write_and_log(state, control)

    def on_train_end(self, args, state, control, **kwargs):
        """run_summary.json's `rft`: every round's record (metrics.jsonl's, so a resumed run's earlier rounds too) and the
        sequences trained, the figure a compute-matched comparison (more SFT) states."""
        path = self.run.output_dir / "metrics.jsonl"
        logged = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
        rounds = {r["rft/round"]: {k.removeprefix("rft/"): v for k, v in r.items() if k.startswith("rft/") or k == "step"}
                  for r in logged if "rft/round" in r}
        self.run.summary["rft"] = {"rounds": [rounds[n] for n in sorted(rounds)], "rows_per_round": self.n_rows,
                                   "sequences_trained": round((state.epoch or 0) * self.n_rows)}  # an epoch per round

    def tokenize(self, round_: Round):
        """A later round's pairs through the trainer's SFT dataset step (posttrain's audited one), its audit logged."""
        from posttrain.internals import require

        trainer = self.trainer
        args = trainer.args
        padding_free, args.padding_free = args.padding_free, False  # as when the trainer was built (sft.build_trainer)
        try:
            tokenized = require(trainer, "_prepare_dataset")(round_.pairs_dataset(), trainer.processing_class, args, False, None, "train")
        finally:
            args.padding_free = padding_free
        for audit in trainer.token_audits[1:]:
            log(f"rft round {round_.number}: {audit.render()}")
        del trainer.token_audits[1:]  # run_summary.json keeps round 1's audit, which start-up checked against the drop limit
        return tokenized

    def _write_and_log(self, state, control) -> None:
        if is_main_process():
            for round_ in self.unwritten:
                self.folder.mkdir(parents=True, exist_ok=True)
                drawn = self.drawn(round_.number)
                lines = [json.dumps({"round": round_.number, "step": round_.step, "position": i, "prompt_index": drawn[i],
                                     "prompt": round_.rows[i]["prompt"], "completion": text}, ensure_ascii=False, default=str)
                         for i, texts in round_.kept.items() for text in texts]
                (self.folder / f"round-{round_.number}.jsonl").write_text("".join(line + "\n" for line in lines))
        self.unwritten = []
        trainer = self.trainer
        for round_ in self.unlogged:  # as held_out logs its records: every callback's on_log, the step's should_log kept
            trainer.state.log_history.append({**round_.stats, "step": state.global_step})
            should_log = control.should_log
            trainer.control = trainer.callback_handler.on_log(trainer.args, state, control, dict(round_.stats))
            trainer.control.should_log = should_log
        self.unlogged = []
