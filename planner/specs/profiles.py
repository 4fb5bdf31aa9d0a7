"""Measured (or analytic) costs: per-layer profiles and collective fits of a network."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from planner.specs.common import SCHEMA_VERSION, LayerKind, Precision, Spec
from planner.specs.inputs import ModelSpec

# --------------------------------------------------------------------------------------------
# Profiles


class ActivationBytes(Spec):
    """Bytes saved for backward by one layer for one micro-batch, per recompute mode."""

    none: int = Field(ge=0)
    selective: int = Field(ge=0)
    full: int = Field(ge=0)

    def for_mode(self, mode: str) -> int:
        return int(getattr(self, mode))


class LayerProfile(Spec):
    """One layer kind at one (micro_batch_size, seq_len, tp, sequence_parallel) point. Per GPU."""

    kind: LayerKind
    micro_batch_size: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    tp: int = Field(ge=1)
    sequence_parallel: bool = False
    fwd_flops: float = Field(ge=0)
    bwd_flops: float = Field(ge=0)
    param_count: int = Field(ge=0)
    param_bytes: int = Field(ge=0)
    saved_activation_bytes: ActivationBytes
    output_activation_bytes: int = Field(ge=0)
    fwd_time_s: float | None = Field(default=None, ge=0)
    bwd_time_s: float | None = Field(default=None, ge=0)
    peak_memory_bytes: int | None = Field(default=None, ge=0)


class Profile(Spec):
    """Per-layer-kind measurements (or analytic derivations) of one model on one device."""

    schema_version: int = SCHEMA_VERSION
    model: ModelSpec
    device: str = Field(description="'meta', 'cpu', 'analytic', or a CUDA device name.")
    dtype: Precision = "bf16"
    torch_version: str | None = None
    source: Literal["analytic", "meta", "measured"] = "measured"
    created_at: str | None = None
    layers: list[LayerProfile] = Field(min_length=1, max_length=100_000)
    notes: list[str] = Field(default_factory=list, max_length=100, description="How it was measured.")

    def find(
        self, kind: str, micro_batch_size: int, seq_len: int, tp: int, sequence_parallel: bool = False
    ) -> LayerProfile | None:
        for layer in self.layers:
            if (layer.kind, layer.micro_batch_size, layer.seq_len, layer.tp, layer.sequence_parallel) == (
                kind,
                micro_batch_size,
                seq_len,
                tp,
                sequence_parallel,
            ):
                return layer
        return None


LinkClass = Literal["intra_node", "inter_node"]
Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "send_recv"]


class LinkFit(Spec):
    """α-β fit of one collective on one link class: time(S) = alpha_s + S · beta_s_per_byte, where S
    is the message size in bytes (per rank) at ``group_size`` ranks."""

    link: LinkClass
    collective: Collective
    group_size: int = Field(ge=2)
    alpha_s: float = Field(ge=0)
    beta_s_per_byte: float = Field(ge=0)
    samples: list[tuple[int, float]] = Field(default_factory=list, description="(bytes, seconds) measured.")

    @property
    def bandwidth_GBps(self) -> float:
        return 1.0 / self.beta_s_per_byte / 1e9 if self.beta_s_per_byte > 0 else float("inf")


class NetworkProfile(Spec):
    schema_version: int = SCHEMA_VERSION
    backend: str
    device: str
    world_size: int = Field(ge=1)
    nodes: int = Field(default=1, ge=1)
    created_at: str | None = None
    links: list[LinkFit] = Field(default_factory=list, max_length=1000)

    def fit(self, link: str, collective: str) -> LinkFit | None:
        for f in self.links:
            if f.link == link and f.collective == collective:
                return f
        return None
