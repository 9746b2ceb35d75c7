"""Start N training processes on this machine (and M machines) through torchrun, or none.

    posttrain train --recipe R --nproc 8                         # one node, 8 GPUs
    posttrain train --recipe R --nproc 8 --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500
    posttrain train --recipe R --nproc 8 --nnodes 2 --rdzv-endpoint 10.0.0.1:29500 --rdzv-id job42

posttrain chooses and starts the engine, nothing more: the launch line becomes
`python -m torch.distributed.run --nproc-per-node N [--nnodes ...] -m posttrain train --recipe R
[overrides]` (torchrun, the launcher `accelerate launch` itself uses for multi-GPU runs), which
replaces the posttrain process (exec), so signals and the exit code are torchrun's. Every
multi-node flag is handed to torchrun unchanged. `--nproc 1` (the default) on one node is one plain
process in this interpreter, never `nn.DataParallel`.

Inside a launcher already (RANK / WORLD_SIZE / LOCAL_RANK set: torchrun, `accelerate launch`,
`srun` with those exported, Ray Train, a Kubernetes PyTorchJob), `posttrain train` runs in-process
as one rank of that job; launch flags there are an error, since the processes already exist.

Standard library only: this runs before anything heavy loads.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

from posttrain.errors import UserError
from posttrain.flag_types import COUNT, NONNEGATIVE, PORT

LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
# The secret overrides (API keys, reward headers) travel to the ranks here, not on their command lines:
# any user of the machine can read a command line (ps, /proc/PID/cmdline), only the owner an environment.
SECRETS_VAR = "POSTTRAIN_SECRET_OVERRIDES"


@dataclass(frozen=True)
class LaunchOptions:
    nproc: int = 1
    nnodes: int = 1
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def multi_node_flags_given(self) -> bool:
        return any(v is not None for v in (self.node_rank, self.master_addr, self.master_port, self.rdzv_endpoint, self.rdzv_id))

    @property
    def launches(self) -> bool:
        """Whether these options start processes (anything but one plain process)."""
        return self.world_size > 1


def add_launch_args(parser) -> None:
    """The launch flags of `posttrain train` (and `validate`, which checks batch shapes for them)."""
    g = parser.add_argument_group("launching (torchrun)")
    g.add_argument("--nproc", "--num-gpus", dest="nproc", type=COUNT, default=1, metavar="N",
                   help="processes on this machine, one per GPU (default 1: one plain process). On CPU, N gloo processes.")
    g.add_argument("--nnodes", type=COUNT, default=1, metavar="M", help="machines taking part (default 1); run the same command on each")
    g.add_argument("--node-rank", type=NONNEGATIVE, default=None, metavar="R", help="this machine's index, 0..M-1 (static rendezvous with --master-addr)")
    g.add_argument("--master-addr", default=None, metavar="HOST", help="address of node 0 (static rendezvous)")
    g.add_argument("--master-port", type=PORT, default=None, metavar="PORT", help="port on node 0 (default 29500 for multi-node)")
    g.add_argument("--rdzv-endpoint", default=None, metavar="HOST:PORT", help="c10d rendezvous endpoint instead of --node-rank/--master-addr (node ranks are assigned)")
    g.add_argument("--rdzv-id", default=None, metavar="ID", help="job id shared by all nodes of a c10d rendezvous (default 'posttrain')")


def options_from_args(args) -> LaunchOptions:
    opts = LaunchOptions(args.nproc, args.nnodes, args.node_rank, args.master_addr, args.master_port, args.rdzv_endpoint, args.rdzv_id)
    check(opts)
    return opts


def check(opts: LaunchOptions) -> None:
    """Reject launch flags that cannot work, before any process starts (exit 2)."""
    if opts.nproc < 1:
        raise UserError(f"--nproc {opts.nproc}: needs at least 1 process")
    if opts.nnodes < 1:
        raise UserError(f"--nnodes {opts.nnodes}: needs at least 1 node")
    if opts.rdzv_endpoint and (opts.node_rank is not None or opts.master_addr):
        raise UserError("--rdzv-endpoint assigns node ranks itself: drop --node-rank/--master-addr, or drop --rdzv-endpoint for a static rendezvous")
    if opts.nnodes > 1 and not opts.rdzv_endpoint:
        if opts.node_rank is None or not opts.master_addr:
            raise UserError(f"--nnodes {opts.nnodes} needs --node-rank and --master-addr (static rendezvous) or --rdzv-endpoint HOST:PORT")
        if not 0 <= opts.node_rank < opts.nnodes:
            raise UserError(f"--node-rank {opts.node_rank} is outside 0..{opts.nnodes - 1} for --nnodes {opts.nnodes}")
    if opts.nnodes == 1 and (opts.node_rank not in (None, 0) or opts.rdzv_endpoint):
        raise UserError("--node-rank/--rdzv-endpoint are multi-node flags: give --nnodes M (M > 1) as well")
    active = launcher_variables()
    if active and (opts.launches or opts.multi_node_flags_given):
        shown = ", ".join(f"{k}={v}" for k, v in active.items())
        raise UserError(f"already inside a launcher ({shown}): the processes exist, so --nproc/--nnodes would start more. "
                        "Drop the launch flags (this process runs as one rank of that job).")


def launcher_variables() -> dict[str, str]:
    """The launcher's variables in this process's environment (empty when not started by a launcher)."""
    return {k: os.environ[k] for k in LAUNCHER_VARS if k in os.environ}


def torchrun_command(opts: LaunchOptions, posttrain_args: list[str]) -> list[str]:
    """The torchrun line that starts `posttrain <posttrain_args>` on this node for `opts`."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(opts.nproc)]
    if opts.nnodes == 1 and opts.master_addr is None and opts.master_port is None:
        cmd.append("--standalone")  # a private rendezvous on a free port: several jobs per machine never clash
    else:
        cmd += ["--nnodes", str(opts.nnodes)]
        if opts.rdzv_endpoint:
            cmd += ["--rdzv-backend", "c10d", "--rdzv-endpoint", opts.rdzv_endpoint, "--rdzv-id", opts.rdzv_id or "posttrain"]
        else:
            cmd += ["--node-rank", str(opts.node_rank or 0), "--master-addr", opts.master_addr or "127.0.0.1",
                    "--master-port", str(opts.master_port or 29500)]
    return [*cmd, "-m", "posttrain", *posttrain_args]


def exec_torchrun(opts: LaunchOptions, posttrain_args: list[str], shown_args: list[str]) -> None:
    """Replace this process with torchrun (never returns). `shown_args` (secret overrides blanked) is
    what the log and every process's command line show; the blanked values go in SECRETS_VAR, and
    each rank puts them back (`restore_secret_overrides`)."""
    secrets = {shown: real for real, shown in zip(posttrain_args, shown_args) if real != shown}
    if secrets:
        os.environ[SECRETS_VAR] = json.dumps(secrets)
    cmd = torchrun_command(opts, shown_args)
    print(f"posttrain: launching {opts.nproc} process(es) on this node"
          + (f" of {opts.nnodes}" if opts.nnodes > 1 else "") + ": " + " ".join(cmd[1:]), flush=True)
    sys.stderr.flush()
    os.execv(cmd[0], cmd)


def restore_secret_overrides(overrides: list[str]) -> list[str]:
    """In a rank posttrain launched: the overrides with the blanked secrets put back from the environment."""
    secrets = json.loads(os.environ.pop(SECRETS_VAR, "{}"))
    return [secrets.get(item, item) for item in overrides]
