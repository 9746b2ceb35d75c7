"""`posttrain vllm-serve --model M`: the vLLM server that GRPO/GSPO's `vllm_mode: server` talks to.

    posttrain vllm-serve --model Qwen/Qwen2.5-0.5B-Instruct --tensor-parallel-size 1 --port 8000
    CUDA_VISIBLE_DEVICES=1 posttrain vllm-serve --model runs/sft-qwen   # then, on GPU 0:
    posttrain train --recipe R training.use_vllm=true training.vllm_mode=server

A thin wrapper over TRL's own `trl vllm-serve` (`trl.scripts.vllm_serve`): posttrain resolves the
model spec the way every other command does (`tiny:`, a local directory, `s3://` downloaded once),
checks that vLLM and a GPU are present (exit 2 with the reason, before anything loads), then hands
over to TRL, which replaces this process with `vllm serve` plus the settings its trainers need
(weight transfer, processed logprobs). Arguments after `--` go to `vllm serve` unchanged.
"""

from __future__ import annotations

import argparse

from posttrain.flag_types import COUNT, FRACTION, PORT


def add_parser(sub) -> None:
    p = sub.add_parser(
        "vllm-serve",
        help="serve a model with vLLM for GRPO/GSPO training (vllm_mode: server); wraps TRL's server",
        description="Start TRL's vLLM server for a model so that training with training.use_vllm=true and "
        "training.vllm_mode=server generates there. Needs vllm and a CUDA GPU.",
        epilog="example: posttrain vllm-serve --model Qwen/Qwen2.5-0.5B-Instruct --port 8000 -- --enforce-eager",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", required=True, help="hub id, local model directory, a .gguf file, tiny:ARCH-SIZE or s3://bucket/model/")
    p.add_argument("--tensor-parallel-size", type=COUNT, default=1, help="GPUs one model copy is split over (default 1)")
    p.add_argument("--data-parallel-size", type=COUNT, default=1, help="model copies (default 1)")
    p.add_argument("--gpu-memory-utilization", type=FRACTION, default=0.9, help="share of each GPU's memory vLLM may take, 0-1 (default 0.9)")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--port", type=PORT, default=8000, help="port (default 8000, the recipe's training.vllm_server_port)")
    p.add_argument("--max-model-len", type=COUNT, default=None, help="longest prompt + completion in tokens (default: the model's)")
    p.add_argument("--dtype", default="auto", help="weights' dtype (default auto)")
    p.add_argument("--print-command", action="store_true", help="print the vllm serve command and exit (no GPU needed)")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="after --: arguments for vllm serve, unchanged")
    p.set_defaults(func=run)


def serve_command(args) -> tuple[list[str], object, list[str]]:
    """(the command TRL would run, TRL's ScriptArguments, extra vllm arguments): TRL's own translation."""
    from trl.scripts.vllm_serve import ScriptArguments, build_command

    from posttrain.models.loading import resolve_source

    script_args = ScriptArguments(
        model=resolve_source(args.model), tensor_parallel_size=args.tensor_parallel_size, data_parallel_size=args.data_parallel_size,
        gpu_memory_utilization=args.gpu_memory_utilization, host=args.host, port=args.port, max_model_len=args.max_model_len,
        dtype=args.dtype,
    )
    extra = [a for a in args.extra if a != "--"]
    return build_command(script_args, extra), script_args, extra


def run(args) -> int:
    from posttrain.errors import UserError
    from posttrain.recipe.preflight import vllm_problems

    if not 0 < args.gpu_memory_utilization <= 1:
        raise UserError(f"--gpu-memory-utilization {args.gpu_memory_utilization}: a share of GPU memory, in (0, 1]")
    if args.tensor_parallel_size < 1 or args.data_parallel_size < 1:
        raise UserError("--tensor-parallel-size and --data-parallel-size must be at least 1")
    problems = [] if args.print_command else vllm_problems()
    if problems:
        raise UserError("cannot start the vLLM server: " + " ".join(problems))
    command, script_args, extra = serve_command(args)
    if args.print_command:
        print(" ".join(command))
        return 0
    from trl.scripts.vllm_serve import main

    main(script_args, extra)  # replaces this process with `vllm serve`
    return 0
