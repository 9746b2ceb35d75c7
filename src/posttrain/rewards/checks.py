"""User reward code, checked: once before the model loads (`trial`), and at every call while training (`guarded`).

A reward is `fn(completions, **columns) -> list[float]`, called by TRL with `prompts`, `completions`,
`completion_ids`, every dataset column but the prompt (one entry per completion), `trainer_state`,
`log_extra` and `log_metric`. A reward that raises, returns strings or the wrong number of values used
to pass `posttrain validate` and then end `train` in a TRL/torch traceback ("too many dimensions 'str'"),
sometimes before the first checkpoint. Here each fault is named with the reward, its file and line,
and the completion that caused it.

None is a reward's "no reward for this completion" in TRL 1.16 (`GRPOTrainer._calculate_rewards` turns
it into NaN and sums the rewards with `nansum`; a completion no reward scores only gets a warning), so
None is accepted value by value. A reward that gives None for every completion of the trial is most
likely missing a `return`; it is refused when no other reward scores those completions (TRL's own
warning case), and noted otherwise: in a multi-reward recipe one reward may not apply to the first rows.
NaN and infinity are refused: a NaN is read as None, so 0/0 silently becomes "no reward", and an
infinite reward makes every advantage of its group NaN.

Standard library only: `posttrain validate` runs the trial without torch.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from .scoring import call, reward_kwargs  # noqa: F401  (call: importable from here, as before)

# Made-up completions for the trial: what an untrained model writes too (nothing, no tags, prose).
TRIAL_COMPLETIONS = ("<think>3 + 4 = 7</think><answer>7</answer>", "", "The answer is 7.", "I do not know")
TRIAL_ROWS = 2  # the first data rows, each paired with every made-up completion


class RewardFault(Exception):
    """A reward raised or returned something TRL cannot use while training; the message is one line."""


def defined_at(fn: Callable) -> str:
    """'file:line' of the function's `def` (through posttrain's option-binding wrapper), or '?'."""
    target = inspect.unwrap(fn)
    try:
        return f"{_short(inspect.getsourcefile(target) or '?')}:{inspect.getsourcelines(target)[1]}"
    except (OSError, TypeError):
        return "?"


def raised_at(exc: BaseException, fn: Callable) -> str:
    """'file:line' where the reward's own code raised: the innermost frame in the reward's file, else the innermost
    frame outside posttrain and the installed libraries (a helper module of the user's), else the innermost one."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return defined_at(fn)
    try:
        own = os.path.realpath(inspect.getsourcefile(inspect.unwrap(fn)) or "")
    except TypeError:
        own = ""
    library = (os.path.dirname(os.__file__), os.path.dirname(os.path.dirname(__file__)), "site-packages", "dist-packages")
    for picks in (lambda f: os.path.realpath(f.filename) == own, lambda f: not any(part in f.filename for part in library)):
        chosen = [f for f in frames if picks(f)]
        if chosen:
            return f"{_short(chosen[-1].filename)}:{chosen[-1].lineno}"
    return f"{_short(frames[-1].filename)}:{frames[-1].lineno}"


def _short(path: str) -> str:
    """A path relative to the working directory when it is under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path


def excerpt(completion: Any, limit: int = 60) -> str:
    """The completion's text, quoted and cut to `limit` characters."""
    from .builtin import completion_text

    try:
        text = completion_text(completion)
    except TypeError:
        text = str(completion)
    if not text:
        return "'' (empty)"
    return repr(text if len(text) <= limit else text[:limit] + "...")


def output_problem(values: Any, n: int) -> tuple[str, int | None] | None:
    """(what is wrong, the completion index it concerns or None) with a reward's output for n completions, or None.

    >>> output_problem([1.0, None, 0], 3) is None
    True
    >>> output_problem(["1.0", 0.0], 2)
    ("value 0 is a str ('1.0'), not a number", 0)
    >>> output_problem([0.5], 2)
    ('returned 1 value for 2 completions (one per completion, in order)', None)
    """
    if isinstance(values, (str, bytes, dict, set)) or not hasattr(values, "__len__") or not hasattr(values, "__iter__"):
        return f"returned {_kind(values)}, not a list with one float per completion", None
    if len(values) != n:
        return f"returned {len(values)} value{'s' if len(values) != 1 else ''} for {n} completions (one per completion, in order)", None
    for i, value in enumerate(values):
        if value is None:
            continue
        if isinstance(value, (str, bytes)) or not hasattr(value, "__float__"):
            return f"value {i} is {_kind(value)}, not a number", i
        try:
            number = float(value)
        except (TypeError, ValueError):  # an array of several numbers, for one
            return f"value {i} is {_kind(value)}, not a number", i
        if not math.isfinite(number):
            return f"value {i} is {number} (return None for 'no reward for this completion')", i
    return None


def _kind(value: Any) -> str:
    shown = repr(value)
    return f"{'an' if type(value).__name__[0] in 'aeiou' else 'a'} {type(value).__name__} ({shown if len(shown) <= 40 else shown[:40] + '...'})"


def first_failing(fn: Callable, kwargs: dict, n: int) -> int | None:
    """The first completion that makes the reward raise when it is called on that completion alone (its row's
    column values with it), or None when none does: the fault needs the whole batch."""
    for i in range(n):
        alone = {k: [v[i]] if isinstance(v, list) and len(v) == n else v for k, v in kwargs.items()}
        try:
            call(fn, alone)
        except Exception:  # noqa: BLE001 - the user's code: any exception is the fault being looked for
            return i
    return None


def trial_kwargs(rows: list[dict]) -> tuple[dict, list[int]]:
    """TRL's keywords for the made-up completions of `rows` (each row once per completion, as TRL repeats a prompt for
    its generations), and the row index of each completion. Token ids are stand-ins (the tokenizer is not loaded yet):
    the completion's UTF-8 bytes."""
    rows_per, texts, row_of = [], [], []
    for r, row in enumerate(rows):
        for text in TRIAL_COMPLETIONS:
            rows_per.append(row)
            texts.append(text)
            row_of.append(r)
    state = SimpleNamespace(global_step=0, max_steps=0, epoch=0.0, num_train_epochs=0, log_history=[], is_world_process_zero=True)
    return reward_kwargs(rows_per, texts, [list(t.encode()) for t in texts], state), row_of


def trial(rewards: list[tuple[str, Callable]], rows: list[dict], rows_from: str, untried: int = 0) -> list[str]:
    """Call each reward (key, function) once on the made-up completions of the first rows; returns notes, and raises
    ValueError listing every fault (a raise, an output TRL cannot use, no reward for any completion). `untried`: the
    recipe's other rewards (reward models, `http`), which score every completion."""
    kwargs, row_of = trial_kwargs(rows[:TRIAL_ROWS])
    n = len(row_of)
    faults, notes, all_none = [], [], []

    def the_input(i: int) -> str:
        columns = {k: v for k, v in rows[row_of[i]].items() if k not in ("prompt", "completion", "completion_ids")}
        shown = repr(columns) if len(repr(columns)) <= 80 else repr(columns)[:80] + "...}"
        return f"completion {i} ({excerpt(kwargs['completions'][i])}) for row {row_of[i]} of {rows_from}, columns {shown}"

    for key, fn in rewards:
        name = f"{key} ({getattr(fn, '__name__', '?')}, {defined_at(fn)})"
        try:
            values = call(fn, kwargs)
        except Exception as exc:  # noqa: BLE001 - the user's code
            i = first_failing(fn, kwargs, n)
            on = the_input(i) if i is not None else f"the batch of {n} completions (none raised alone)"
            faults.append(f"{name} raised {type(exc).__name__}: {exc} at {raised_at(exc, fn)}, on {on}")
            continue
        problem = output_problem(values, n)
        if problem is not None:
            what, i = problem
            faults.append(f"{name} {what}" + (f", for {the_input(i)}" if i is not None else ""))
        elif all(v is None for v in values):
            all_none.append(name)
    if all_none and len(all_none) == len(rewards) and not untried:
        faults += [f"{name} returned None for all {n} completions: no reward scores them (TRL reads None as 'no reward "
                   "for this completion'; is a `return` missing?)" for name in all_none]
    else:
        notes += [f"{name} returned None for all {n} trial completions; other rewards score them" for name in all_none]
    if faults:
        raise ValueError("\n".join(faults) + f"\n  posttrain called each reward as TRL will, before loading the model, on {n} made-up "
                         f"completions, {len(TRIAL_COMPLETIONS)} for each of the first {len(set(row_of))} rows of {rows_from}. A reward "
                         "must return one float per completion (None: no reward for it), for any text a model may write, empty included.")
    return notes


def guarded(fn: Callable, key: str, locate: bool = True) -> Callable:
    """The reward as TRL calls it while training: a raise, or an output TRL cannot use, becomes a RewardFault that
    names the reward, the step, the completion (index and excerpt) and the file and line; the original exception is
    its cause (shown with --verbose). The completion is found by calling the reward again on each alone (`locate`;
    not for a remote service, nor an async reward, which runs inside TRL's event loop). Async rewards stay async."""
    name = getattr(fn, "__name__", "?")

    def fault(exc: BaseException | None, what: str, kwargs: dict, i: int | None) -> RewardFault:
        state = kwargs.get("trainer_state")
        step = f"step {state.global_step + 1}" if state is not None else "a step"
        n = len(kwargs.get("completions") or [])
        on = f"completion {i} of {n} ({excerpt(kwargs['completions'][i])})" if i is not None else f"its batch of {n} completions"
        where = raised_at(exc, fn) if exc is not None else defined_at(fn)
        return RewardFault(f"reward {key} ({name}, {where}) {what} at {step}, on {on}")

    def check(values, kwargs):
        problem = output_problem(values, len(kwargs.get("completions") or []))
        if problem is not None:
            raise fault(None, problem[0], kwargs, problem[1])
        return values

    def raised(exc: Exception, kwargs: dict) -> RewardFault:
        i = first_failing(fn, kwargs, len(kwargs.get("completions") or [])) if locate and not inspect.iscoroutinefunction(fn) else None
        return fault(exc, f"raised {type(exc).__name__}: {exc}", kwargs, i)

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def reward(**kwargs):
            try:
                values = await fn(**kwargs)
            except Exception as exc:  # noqa: BLE001 - the user's code
                raise raised(exc, kwargs) from exc
            return check(values, kwargs)

    else:

        @functools.wraps(fn)
        def reward(**kwargs):
            try:
                values = fn(**kwargs)
            except Exception as exc:  # noqa: BLE001 - the user's code
                raise raised(exc, kwargs) from exc
            return check(values, kwargs)

    return reward
