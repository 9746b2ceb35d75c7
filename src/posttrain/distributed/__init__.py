"""Many processes, one result: launching (torchrun), the sharding backend (DDP, DeepSpeed ZeRO,
FSDP), and the once-per-node rule for downloads. See docs/guides/distributed.md."""
