"""Feasibility rules of the sequence's splits — sequence parallelism (SP, over the TP ranks) and context
parallelism (CP, issue 24) — in the shape of ``planner.specs.rules`` (each a function of plain values
returning ``None`` or the ``MeshplanError`` to raise; ``rules`` re-exports them).

CP splits each sequence into 2·cp chunks and gives cp rank i chunks i and 2·cp − 1 − i (causal load
balancing: every rank attends over the same number of key/query pairs). The exchange is ``cp_comm``
(``planner.specs.config.CP_COMMS``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.specs.config import CP_COMM_INFO, RUNNABLE_CP_COMMS
from planner.specs.errors import MeshplanError

if TYPE_CHECKING:
    from planner.specs import ModelSpec

Err = MeshplanError | None


def sequence_parallel_needs_tp(sequence_parallel: bool | None, tp: int | None) -> Err:
    if sequence_parallel and tp == 1:
        return MeshplanError(
            "parallel.sequence_parallel",
            "sequence parallelism needs tp > 1",
            "set sequence_parallel to false or tp > 1",
        )
    return None


def sequence_parallel_splits_seq(sequence_parallel: bool | None, tp: int | None, seq_len: int) -> Err:
    """Sequence parallelism shards the sequence over the TP ranks evenly."""
    if sequence_parallel and tp is not None and seq_len % tp:
        return MeshplanError(
            "training.seq_len",
            f"sequence parallelism splits seq_len={seq_len} over tp={tp} unevenly",
            "use a seq_len divisible by tp, or set sequence_parallel to false",
        )
    return None


def tp_overlap_needs_sp(overlap: bool | None, tp: int | None, sequence_parallel: bool | None) -> Err:
    """Overlapped TP pipelines the all-gathers and reduce-scatters of sequence parallelism with the GEMMs
    (Megatron-LM arguments.py: --tp-comm-overlap asserts --sequence-parallel; torch's micro-pipeline TP pass
    matches all-gather → matmul and matmul → reduce-scatter, which only SP issues)."""
    if overlap and (tp == 1 or sequence_parallel is False):
        return MeshplanError(
            "parallel.tp_comm_overlap",
            "overlapped tensor parallelism needs tp > 1 and sequence parallelism (it pipelines SP's all-gathers "
            "and reduce-scatters with the GEMMs)",
            "set parallel.tp_comm_overlap to false, or tp > 1 with parallel.sequence_parallel true",
        )
    return None


def seq_len_fits(model: ModelSpec, seq_len: int) -> Err:
    if seq_len <= model.max_seq_len:
        return None
    return MeshplanError(
        "training.seq_len",
        f"seq_len={seq_len} exceeds the model's max_seq_len={model.max_seq_len}",
        f"use seq_len ≤ {model.max_seq_len}",
    )


def cp_splits_seq(cp: int, seq_len: int, tp: int = 1, sequence_parallel: bool = False) -> Err:
    """Load-balanced causal chunks: seq_len divisible by 2·cp; with sequence parallelism each cp rank's
    seq_len / cp tokens also split over the tp ranks."""
    if cp > 1 and seq_len % (2 * cp):
        return MeshplanError(
            "training.seq_len",
            f"context parallelism with load balancing splits seq_len={seq_len} into 2·cp = {2 * cp} equal chunks, "
            "and it does not divide evenly",
            f"use a seq_len divisible by {2 * cp}, or a cp whose double divides {seq_len}",
        )
    if cp > 1 and sequence_parallel and (seq_len // cp) % tp:
        return MeshplanError(
            "training.seq_len",
            f"sequence parallelism splits each cp rank's seq_len / cp = {seq_len // cp} tokens over tp={tp} unevenly",
            f"use a seq_len divisible by cp × tp = {cp * tp} (and by 2·cp), or set sequence_parallel to false",
        )
    return None


def cp_splits_heads(model: ModelSpec, tp: int, cp: int, cp_comm: str) -> Err:
    """All-to-all exchanges (Ulysses ``a2a``, ``a2a+p2p``) give each cp rank heads / (tp·cp) query heads
    and kv_heads / (tp·cp) key/value heads."""
    if cp == 1 or not CP_COMM_INFO[cp_comm].splits_heads:
        return None
    for what, value in (("num_attention_heads", model.num_attention_heads), ("num_kv_heads", model.num_kv_heads)):
        if value % (tp * cp):
            return MeshplanError(
                "parallel.cp_comm",
                f"cp_comm {cp_comm!r} splits the {value // tp if value % tp == 0 else value} {what} of each tp rank "
                f"over cp={cp} ranks unevenly ({what} = {value}, tp = {tp})",
                f"use cp_comm 'p2p' or 'all_gather', or a cp that divides {what} / tp",
            )
    return None


def cp_runnable(cp: int, cp_comm: str) -> Err:
    """The bundled runtime runs the exchange (``CP_COMMS`` marks the export-only ones)."""
    if cp == 1 or cp_comm in RUNNABLE_CP_COMMS:
        return None
    return MeshplanError(
        "parallel.cp_comm",
        f"cp_comm {cp_comm!r} is export-only: the bundled runtime does not run it (Megatron does)",
        f"use one of {', '.join(RUNNABLE_CP_COMMS)} to run it here, or export the plan to megatron",
    )
