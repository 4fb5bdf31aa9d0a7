"""FSDP's copies on the compute stream around its collectives (``fsdp2_copies``), priced for ``terms.kind_terms``."""

from __future__ import annotations

from planner.compose.context import Context
from planner.pricing.gpu import hbm_time
from planner.pricing.host import hooks_measured
from planner.workload.accumulation import FSDP_ENGINES, DpSchedule, fsdp2_copy_bytes


def fsdp2_copies(
    ctx: Context,
    sched: DpSchedule,
    zero_stage: int,
    gathered: tuple[int, int, int],
    params: tuple[int, int, int],
    grad_elt: int,
    dp: int,
) -> tuple[list[float], list[float], list[float]]:
    """Seconds per micro-batch of each layer kind's (block, embedding, LM head) FSDP2 copies on the compute stream
    (``accumulation.fsdp2_copy_bytes`` at the achieved HBM bandwidth of each copy): the forward gather's copy-out, the
    backward gather's, the reduce-scatter's copy-in (FSDP1: its gradient passes) — zero where the collective does not
    run in every micro-batch, on engines other than FSDP's, at ZeRO-0 (not ``fully_shard``'s units) and on a host."""
    zero = [0.0, 0.0, 0.0]
    if ctx.stack.grad_accumulation not in FSDP_ENGINES or zero_stage == 0 or hooks_measured(ctx):
        return zero, zero, zero
    e = ctx.elt
    b = [fsdp2_copy_bytes(ctx.stack.grad_accumulation, g, e, p, e, grad_elt, dp) for g, p in zip(gathered, params)]
    out = [hbm_time(ctx, x.copy_out) for x in b]
    return (
        out if sched.gather_fwd else zero,
        out if sched.gather_bwd else zero,
        [hbm_time(ctx, x.reduce_copy_in) for x in b] if sched.reduce_each else zero,
    )
