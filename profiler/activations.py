"""Activation memory a layer keeps for backward, measured with ``saved_tensors_hooks``.

Every tensor autograd saves during the forward passes through the pack hook; the layer's own
parameters and buffers (saved by reference, e.g. a weight's transpose) are skipped, and tensors that
share a storage (views such as the attention output and the output projection's input) are counted
once, at their storage's size. What remains is what one micro-batch of this layer holds between its
forward and its backward.

Recomputation is measured by running the layer the way the runtime does, under
``torch.utils.checkpoint`` (non-reentrant): ``selective`` checkpoints the block's attention core
(``attn.core``), ``full`` the whole block. A checkpointed region keeps only its inputs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

RECOMPUTE_MODES = ("none", "selective", "full")


def _storage_key(t: torch.Tensor) -> int:
    return id(t.untyped_storage())


class SavedTensorBytes:
    """Context manager: distinct bytes of the tensors saved for backward inside it, excluding the
    storages of ``module``'s parameters and buffers."""

    def __init__(self, module: nn.Module) -> None:
        self._exclude = {_storage_key(t) for t in [*module.parameters(), *module.buffers()]}
        self._sizes: dict[int, int] = {}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        key = _storage_key(t)
        if key not in self._exclude and key not in self._sizes:
            self._sizes[key] = t.untyped_storage().nbytes()
        return t

    @property
    def nbytes(self) -> int:
        return sum(self._sizes.values())

    def __enter__(self) -> SavedTensorBytes:
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)


@contextmanager
def _checkpointed(module: nn.Module) -> Iterator[None]:
    """Run ``module`` under non-reentrant activation checkpointing while the context is open."""
    own = module.__dict__.get("forward")  # an instance-level forward, if any, to restore
    module.forward = functools.partial(checkpoint, module.forward, use_reentrant=False)
    try:
        yield
    finally:
        if own is None:
            del module.forward  # back to the class's forward
        else:
            module.forward = own


@contextmanager
def recompute(layer: nn.Module, kind: str, mode: str) -> Iterator[None]:
    """Apply recompute ``mode`` to a layer (only transformer blocks are ever recomputed)."""
    if mode not in RECOMPUTE_MODES:
        raise ValueError(f"unknown recompute mode {mode!r}")
    if kind != "transformer_block" or mode == "none":
        yield
    elif mode == "selective":
        with _checkpointed(layer.attn.core):
            yield
    else:
        with _checkpointed(layer):
            yield


def saved_bytes(layer: nn.Module, kind: str, mode: str, forward: Callable[[], torch.Tensor]) -> int:
    """Bytes ``forward()`` leaves saved for backward under recompute ``mode``."""
    with recompute(layer, kind, mode), SavedTensorBytes(layer) as saved:
        out = forward()
    del out
    return saved.nbytes
