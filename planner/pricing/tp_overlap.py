"""What overlapping a block's TP collectives with its GEMMs (``planner.workload.tp_overlap``) changes in its time on
this device: per pair, the collective's blocking time (``collectives.tp_collective``) and the GEMMs' time are
replaced by the pipelined pair's (``pair_seconds``):

* the GEMMs run slowed while overlapped: G' = G + σ·min(G, C) (σ = ``OVERLAP_SLOWDOWN``, the measured slowdown
  of compute under communication, as everywhere the cost model overlaps; Transformer Engine's default
  ``set_sm_margin = 0`` reserves no SMs from the GEMM, so no SM-count term beyond σ);
* ``ring`` (all-gather → GEMM, n = tp chunks, the local shard first): n GEMM chunks g = G'/n (1/n of the rows
  each; Transformer Engine runs QKV and FC1 as one fused GEMM each, whose chunks still fill the SMs at training
  sizes: no wave quantization of chunks is priced) and n − 1
  point-to-point steps c of one shard each (``send_recv`` of bytes/tp over the TP link, each with its own
  latency: the decomposition's cost): (n − 1)·max(g, c) + g;
* ``pipeline`` (GEMM → reduce-scatter in n chunks): each chunk's reduce-scatter (bytes/n, its own latency) under
  the next chunk's GEMM: g + (n − 1)·max(g, c) + c — at least the GEMM plus the last chunk's collective;
* ``bulk`` (a collective beside an independent GEMM): max(G', C).

With full recomputation the backward reruns the forward, with its overlap. On a host device nothing overlaps
(no stack that runs there overlaps TP), and a block that is not a dense one is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.pricing.collectives import tp_collective
from planner.pricing.comm import tp_link
from planner.pricing.device import Device
from planner.pricing.fp8_accum import SPLIT_ACCUM_PHASES
from planner.pricing.gpu import gemm_time
from planner.workload.tp_overlap import OverlapPair, overlap_pairs, pair_linears


@dataclass(frozen=True, slots=True)
class OverlapDelta:
    """Seconds a block's forward and backward change by when its TP collectives overlap (negative: faster), and
    the change of the exposed TP communication within them (for the breakdown)."""

    fwd: float
    bwd: float
    fwd_tp: float
    bwd_tp: float


NO_DELTA = OverlapDelta(0.0, 0.0, 0.0, 0.0)


def _gemm_seconds(ctx: Device, pair: OverlapPair, tokens: int, tp: int) -> float:
    """Seconds of the pair's GEMMs over ``tokens`` rows (× the compute residual, as the layer's own GEMMs)."""
    fp8 = ctx.fp8_recipe is not None
    t = 0.0
    for lin in pair_linears(ctx.model, pair, tp):
        m, n, k = {"fwd": (tokens, lin.n, lin.k), "dgrad": (tokens, lin.k, lin.n), "wgrad": (lin.k, lin.n, tokens)}[
            pair.phase
        ]
        t += gemm_time(ctx, m, n, k, fp8=fp8, backward=pair.phase in SPLIT_ACCUM_PHASES)
    return ctx.residuals.compute_scale * t


def pair_seconds(
    ctx: Device, pair: OverlapPair, gemm: float, chunk: float, act: float, tp: int, slowdown: float
) -> float:
    """Seconds of one pair run overlapped (module docstring); ``gemm`` its GEMMs' time alone, ``chunk`` one
    chunk's GEMMs (1/n of the rows), ``act`` the bytes of the (unsharded) residual-stream tensor the collective
    moves."""
    blocking = tp_collective(ctx, "reduce_scatter", act, tp)
    slow = 1 + slowdown * min(gemm, blocking) / gemm if gemm > 0 else 1.0
    if pair.method == "bulk":
        return max(gemm * slow, blocking)
    n = pair.chunks
    g = chunk * slow
    if pair.method == "ring":
        c = ctx.comm.time("send_recv", act / tp, 2, tp_link(ctx.cluster.gpus_per_node, tp))
        return (n - 1) * max(g, c) + g
    c = tp_collective(ctx, "reduce_scatter", act / n, tp)
    return g + (n - 1) * max(g, c) + c


def overlap_delta(
    ctx: Device,
    kind: str,
    mbs: int,
    tp: int,
    recompute: str,
    act: float,
    slowdown: float,
    gather: float | None = None,
) -> OverlapDelta:
    """The change of a dense block's forward and backward (compute + blocking TP) per micro-batch when the
    stack's overlap ``kind`` pipelines its SP collectives (``act``: one residual-stream tensor's bytes; ``gather``:
    an all-gather's where it moves FP8, ``collectives.tp_comms``)."""
    model = ctx.model
    if tp == 1 or model.moe is not None or model.mla is not None:
        return NO_DELTA
    tokens = mbs * ctx.training.seq_len
    d = {False: [0.0, 0.0], True: [0.0, 0.0]}  # bwd → [time, exposed TP]
    for pair in overlap_pairs(kind, tp):
        nbytes = gather if pair.op == "all_gather" and gather is not None else act
        blocking = tp_collective(ctx, "reduce_scatter", nbytes, tp)
        gemm = _gemm_seconds(ctx, pair, tokens, tp)
        chunk = gemm / pair.chunks  # a 1/n-row chunk of the GEMM (TE fuses QKV and FC1: still SM-filling)
        both = pair_seconds(ctx, pair, gemm, chunk, nbytes, tp, slowdown)
        d[pair.bwd][0] += both - (gemm + blocking)
        d[pair.bwd][1] += max(0.0, both - gemm) - blocking
    fwd, fwd_tp = d[False]
    bwd, bwd_tp = d[True]
    if recompute == "full":  # the backward reruns the forward, overlapped alike
        bwd, bwd_tp = bwd + fwd, bwd_tp + fwd_tp
    return OverlapDelta(fwd, bwd, fwd_tp, bwd_tp)
