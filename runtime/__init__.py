"""Applies a `Plan` with PyTorch's own distributed stack (DeviceMesh, DTensor TP, pipelining, FSDP2),
trains, checkpoints with DCP, and reports measured beside predicted (see docs/runtime.md)."""
