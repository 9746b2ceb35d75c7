"""The user's tools and environments, run isolated from the process that trains or evaluates.

- `worker`: the child process that imports the user's code and runs each call (standard library only);
- `isolation`: the parent's side: one worker per environment instance and one for plain tools,
  a per-call timeout, and every failure turned into the tool's error message and counted;
- `probe`: the checks `posttrain validate` and `train` run on tool and environment specs, in a worker.
"""
