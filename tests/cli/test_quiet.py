"""The libraries' routine output is off unless --verbose (POSTTRAIN_VERBOSE=1)."""

import logging

from posttrain.cli import build_parser, parse_args
from posttrain.log import quiet_libraries


def deepspeed_warning_passes() -> bool:
    record = logging.LogRecord("DeepSpeed", logging.WARNING, __file__, 1, "Setting accelerator to CPU.", None, None)
    return logging.getLogger("DeepSpeed").filter(record)


def test_quiet_unless_verbose(monkeypatch):
    logger = logging.getLogger("DeepSpeed")
    monkeypatch.setattr(logger, "filters", [])
    monkeypatch.setenv("POSTTRAIN_VERBOSE", "1")
    quiet_libraries()
    assert deepspeed_warning_passes()
    monkeypatch.delenv("POSTTRAIN_VERBOSE")
    quiet_libraries()
    quiet_libraries()  # idempotent
    assert not deepspeed_warning_passes() and len(logger.filters) == 1


def test_every_command_takes_verbose():
    parser = build_parser()
    for argv in (["train", "r.yaml"], ["eval", "--model", "m"], ["compare"], ["generate"], ["report", "x"], ["validate", "r.yaml"]):
        assert parse_args(parser, [*argv, "--verbose"]).verbose is True
