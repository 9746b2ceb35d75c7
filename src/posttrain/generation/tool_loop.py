"""Multi-turn generation with tools, for any engine: the loop GRPO runs while it trains, at evaluation time.

    loop = ToolLoop(make_engine("runs/tool-use/grpo"), Toolbox(["posttrain.tools.calculator:calculator"]))
    completions = loop.generate(prompts, SamplingParams(max_new_tokens=64))
    completions[0].text                 # the final answer, what scoring reads
    completions[0].extra["turns"]       # every assistant turn, call and result after the prompt

Each round, the conversations still going are generated as one batch (the local engine batches
them, API engines send them concurrently) with the tools offered; each call is run through the
Toolbox (worker processes, per-call timeout: `posttrain.tools.isolation`) and its result, or
`{'error': ...}` exactly as TRL writes it in training, is appended as a tool turn. A conversation
ends with a turn that calls nothing, or after `max_turns` turns of calls (its last calls are then
left unanswered and counted as `cut_off`). `max_new_tokens` applies to each turn.

With an environment, each conversation gets its own instance (worker), reset with the item's
fields (`reset(prompt=..., **item)`, as TRL passes the dataset row; an evaluation item's gold answer
also arrives as `answer`, the column name training rows use); a returned observation is appended to
the last user message, as TRL does; `get_reward()` at the end is recorded as `environment_reward`.
Instances are pooled and reset between conversations, at most `environment_pool` at a time.
"""

from __future__ import annotations

from posttrain.generation.base import Completion, Prompt, SamplingParams

COUNT_KEYS = ("calls", "errors", "timeouts", "crashes", "truncated")


class ToolLoop:
    takes_rows = True  # the runner passes each prompt's item (an environment's reset reads it)

    def __init__(self, engine, toolbox, max_turns: int = 5, environment_pool: int = 16):
        self.engine, self.toolbox, self.max_turns = engine, toolbox, max_turns
        self.name = engine.name
        self.environment_pool = environment_pool
        self.schemas = toolbox.schemas()
        self._plain = {fn.__name__: fn for fn in toolbox.tools()}
        self._pool: list = []

    def identity(self) -> dict:
        """Part of the generation cache's key: the same model answers differently with other tools."""
        return {**self.toolbox.identity(), "max_turns": self.max_turns}

    @property
    def notes(self) -> list[str]:
        return getattr(self.engine, "notes", [])

    def close(self) -> None:
        """Stop the engine (LazyEngine frees the model) and the environment workers."""
        if hasattr(self.engine, "close"):
            self.engine.close()
        for env in self._pool:
            env._worker.stop()
        self._pool = []

    def generate(self, prompts: list[Prompt], params: SamplingParams, rows: list[dict] | None = None) -> list[Completion]:
        if self.toolbox.environment_class is None:
            return self._converse(prompts, params, [None] * len(prompts), rows)
        out: list[Completion] = []
        for start in range(0, len(prompts), self.environment_pool):
            chunk = slice(start, start + self.environment_pool)
            size = len(prompts[chunk])
            while len(self._pool) < size:
                self._pool.append(self.toolbox.new_environment())
            out += self._converse(prompts[chunk], params, self._pool[:size], rows[chunk] if rows else None)
        return out

    def _converse(self, prompts, params, envs: list, rows: list[dict] | None) -> list[Completion]:
        chats = [[{"role": "user", "content": p}] if isinstance(p, str) else [dict(m) for m in p] for p in prompts]
        for i, env in enumerate(envs):
            if env is not None:
                row = {k: v for k, v in (rows[i] if rows else {}).items() if k != "prompt"}
                if "gold" in row:
                    row.setdefault("answer", row["gold"])  # training rows carry the gold answer as `answer`
                observation = env.reset(prompt=prompts[i], **row)
                if isinstance(observation, str) and observation and isinstance(chats[i][-1].get("content"), str):
                    chats[i][-1]["content"] += observation
        starts = [len(chat) for chat in chats]
        counts = [dict.fromkeys(COUNT_KEYS, 0) for _ in chats]
        rounds, tokens, first, last = [0] * len(chats), [0] * len(chats), [None] * len(chats), [None] * len(chats)
        active = list(range(len(chats)))
        while active:
            answers = self.engine.generate([chats[i] for i in active], params, tools=self.schemas)
            still = []
            for i, answer in zip(active, answers):
                first[i] = first[i] or answer
                last[i] = answer
                tokens[i] += answer.completion_tokens or 0
                if answer.error:
                    continue
                message = {"role": "assistant", "content": answer.text}
                if answer.tool_calls:
                    message["tool_calls"] = answer.tool_calls
                chats[i].append(message)
                if answer.tool_calls and rounds[i] < self.max_turns:
                    chats[i] += [self._run(call, envs[i], counts[i]) for call in answer.tool_calls]
                    rounds[i] += 1
                    still.append(i)
            active = still
        results = []
        for i, chat in enumerate(chats):
            turns = chat[starts[i]:]
            assistant = [m for m in turns if m["role"] == "assistant"]
            extra = {"turns": turns, "tools": {**counts[i], "rounds": rounds[i],
                                               "cut_off": bool(assistant and assistant[-1].get("tool_calls"))}}
            if envs[i] is not None and hasattr(envs[i], "get_reward"):
                extra["environment_reward"] = envs[i].get_reward()
            results.append(Completion(text=last[i].text, prompt_tokens=first[i].prompt_tokens,
                                      completion_tokens=tokens[i], finish_reason=last[i].finish_reason, error=last[i].error,
                                      extra={**last[i].extra, **extra}))
        return results

    def _run(self, call: dict, env, counts: dict) -> dict:
        """One call, run: its tool message (the result, or TRL's {'error': ...} form)."""
        from posttrain.tools.isolation import ToolError

        function = call.get("function") or {}
        name, arguments = function.get("name", "unknown"), function.get("arguments")
        target, problem = None, None
        if not isinstance(arguments, dict):
            problem = f"the arguments of {name} must be a JSON object, got {str(arguments)[:200]!r}"
        elif name in self._plain:
            target = self._plain[name]
        elif env is not None and not name.startswith("_") and name not in ("reset", "get_reward") and callable(getattr(type(env), name, None)):
            target = getattr(env, name)
        else:
            problem = f"Tool {name} not found."  # TRL's words for it
        if problem is not None:
            counts["calls"] += 1
            counts["errors"] += 1
            content = str({"error": problem})
        else:
            try:
                content = target(**arguments)
            except ToolError as e:
                content = str({"error": str(e)})
            taken = self.toolbox.stats.take()  # the toolbox counted this call (and its failure)
            for key in COUNT_KEYS:
                counts[key] += taken.get(key, 0)
        return {"role": "tool", "name": name, "tool_call_id": call.get("id"), "content": content}
