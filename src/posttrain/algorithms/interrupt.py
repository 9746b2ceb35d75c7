"""Ctrl-C and SIGTERM (preemption) keep the work: the run stops at the end of the step in progress,
saves a checkpoint there and says how to resume.

The first SIGINT or SIGTERM only sets a flag; at the end of the current optimizer step `GracefulStop`
asks transformers' Trainer to save a checkpoint (`TrainerControl.should_save`) and to stop
(`should_training_stop`), the same two switches its own `DefaultFlowCallback` uses at max_steps. The
save is the Trainer's own, so the checkpoint holds the optimizer, scheduler and RNG state and the
resumed run continues the same learning-rate schedule. A second signal stops at once, without
saving (the default behaviour). With several processes the flag is all-reduced at every step end,
so every rank stops after the same step (a rank that stopped alone would hang the others).

"Again" means the same signal: Ctrl-C under torchrun reaches each rank twice, as SIGINT from the
terminal and as the SIGTERM torchrun forwards on its own SIGINT, and that pair must not cancel the
save. A SIGTERM after a SIGINT (or the other way round) is absorbed.
"""

from __future__ import annotations

import signal
import threading

from transformers import TrainerCallback

EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}


class GracefulStop(TrainerCallback):
    def __init__(self, log=print, world_size: int = 1):
        self.log, self.world_size = log, world_size
        self.signal_name: str | None = None  # the first signal received
        self.stopped_at: int | None = None  # the step the run stopped after, once it did
        self._previous: dict = {}

    def install(self) -> "GracefulStop":
        """Handle SIGINT and SIGTERM, except one the process inherited as ignored: a run started with
        `nohup` or in the background (`&`) ignores Ctrl-C on purpose, and keeps ignoring it."""
        if threading.current_thread() is threading.main_thread():  # signal handlers can only be set there
            for sig in (signal.SIGINT, signal.SIGTERM):
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.signal_name is not None and name != self.signal_name:  # the launcher forwarding the same stop
            return
        if self.signal_name is not None:  # the same signal again: stop now, as without this handler
            self.restore()
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise SystemExit(EXIT_CODES.get(name, 128 + signum))
        self.signal_name = name
        self.log(f"\n{name}: stopping at the end of this step and saving a checkpoint there "
                 f"({'Ctrl-C' if name == 'SIGINT' else name} again stops at once, without saving)")

    def on_step_end(self, args, state, control, **kwargs):
        stop = self.signal_name is not None
        if self.world_size > 1:
            stop = _any_rank(stop, args.device)
            if stop and self.signal_name is None:
                self.signal_name = "SIGTERM"  # another rank got it (launchers forward the same signal to all)
        if stop:
            control.should_training_stop = True
            control.should_save = True
            self.stopped_at = state.global_step
        return control


def _any_rank(flag: bool, device) -> bool:
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return flag
    tensor = torch.tensor([1 if flag else 0], device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())
