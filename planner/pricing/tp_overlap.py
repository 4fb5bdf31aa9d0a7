"""What overlapping a block's TP collectives with its GEMMs (``planner.workload.tp_overlap``) changes in its time on
this device: per pair, the collective's blocking time (``collectives.tp_collective``) and the GEMMs' time are
replaced by the pipelined pair's (``pair_seconds``):

* the GEMMs run slowed while overlapped: G' = G + σ·min(G, C) (σ = ``OVERLAP_SLOWDOWN``, the measured slowdown
  of compute under communication, as everywhere the cost model overlaps; Transformer Engine's default
  ``set_sm_margin = 0`` reserves no SMs from the GEMM, so no SM-count term beyond σ);
* ``ring`` (all-gather → GEMM, n = tp chunks, the local shard first): n GEMM chunks g (1/n of the rows each) and
  n − 1 point-to-point steps c of one shard each (``send_recv`` of bytes/tp over the TP link, each with its own
  latency: the decomposition's cost): (n − 1)·max(g, c) + g;
* ``pipeline`` (GEMM → reduce-scatter in n chunks): each chunk's reduce-scatter (bytes/n, its own latency) under
  the next chunk's GEMM: g + (n − 1)·max(g, c) + c — at least the GEMM plus the last chunk's collective.

Under Transformer Engine's userbuffers each chunk is its own GEMM launch (``workload.tp_overlap``:
``split_overlap_ag`` / ``split_overlap_rs``), so g is the chunk's GEMM priced at its own shape (``gpu.gemm_time``: its
tiles' waves over the SMs, the measured table) × the overlap slowdown — 1/n of the rows (ring) or of the output
columns (pipeline), TE's fused QKV / FC1 as one GEMM — not G'/n: a chunk of tokens/tp rows fills fewer waves
than the whole GEMM (cost model 58; was G'/n, "no wave quantization of chunks"). E.g. GPT-3 175B at TP 4, micro-batch
1: the fused QKV chunk is 512 × 9216 × 12288, 288 tiles of 128² in 3 waves of 132 SMs (0.73 of them busy) where the
whole GEMM's 1,152 tiles fill 9 waves at 0.97. The whole GEMM the pair replaces stays as the layer prices it; the
breakdown counts the chunks' slowness as compute, what runs beyond them as exposed TP communication. torchtitan's
async TP keeps g = G'/n: torch's fused matmuls run one mm per shard and per weight (``_symmetric_memory``), and a
GQA model's K and V shards (e.g. 1,024 × 128 × 8,192 at TP 8) are single-wave, deep-K GEMMs that cuBLAS splits over
K, which ``gpu.gemm_time`` does not price (it would charge each the whole 8,192-deep tile loop).
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


def _gemm_seconds(ctx: Device, pair: OverlapPair, tokens: int, tp: int, cols: int = 1) -> float:
    """Seconds of the pair's GEMMs over ``tokens`` rows and 1/``cols`` of their output columns (× the compute
    residual, as the layer's own GEMMs)."""
    fp8 = ctx.fp8_recipe is not None
    t = 0.0
    for lin in pair_linears(ctx.model, pair, tp):
        m, n, k = {"fwd": (tokens, lin.n, lin.k), "dgrad": (tokens, lin.k, lin.n), "wgrad": (lin.k, lin.n, tokens)}[
            pair.phase
        ]
        t += gemm_time(ctx, m, -(-n // cols), k, fp8=fp8, backward=pair.phase in SPLIT_ACCUM_PHASES)
    return ctx.residuals.compute_scale * t


def chunk_seconds(ctx: Device, pair: OverlapPair, tokens: int, tp: int) -> float:
    """Seconds of one chunk's GEMMs at its own shape: 1/chunks of the rows or of the output columns (``split``);
    a ``fused`` pair's linears (same input) as one GEMM of their summed output columns."""
    n = pair.chunks
    rows = tokens if pair.split == "cols" else -(-tokens // n)
    cols = n if pair.split == "cols" else 1
    lins = pair_linears(ctx.model, pair, tp)
    if not pair.fused or len(lins) == 1 or pair.phase != "fwd":
        return _gemm_seconds(ctx, pair, rows, tp, cols)
    fp8 = ctx.fp8_recipe is not None
    width = -(-sum(lin.n for lin in lins) // cols)
    return ctx.residuals.compute_scale * gemm_time(ctx, rows, width, lins[0].k, fp8=fp8)


def pair_seconds(
    ctx: Device, pair: OverlapPair, gemm: float, chunk: float, act: float, tp: int, slowdown: float
) -> float:
    """Seconds of one pair run overlapped (module docstring); ``gemm`` its GEMMs' time alone, ``chunk`` one
    chunk's GEMMs at its own shape (``chunk_seconds``), ``act`` the bytes of the (unsharded) residual-stream tensor the collective
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
    cast_after_gather: bool = False,
) -> OverlapDelta:
    """The change of a dense block's forward and backward (compute + blocking TP) per micro-batch when the
    stack's overlap ``kind`` pipelines its SP collectives (``act``: one residual-stream tensor's bytes; ``gather``:
    an all-gather's where it moves FP8, ``collectives.tp_comms``; ``cast_after_gather``: an FP8 cast between each
    all-gather and its matmul, ``workload.fp8.fp8_cast_after_gather``: no all-gather pair under async TP)."""
    model = ctx.model
    if tp == 1 or model.moe is not None or model.mla is not None:
        return NO_DELTA
    tokens = mbs * ctx.training.seq_len
    d = {False: [0.0, 0.0], True: [0.0, 0.0]}  # bwd → [time, exposed TP]
    for pair in overlap_pairs(kind, tp, cast_after_gather):
        nbytes = gather if pair.op == "all_gather" and gather is not None else act
        blocking = tp_collective(ctx, "reduce_scatter", nbytes, tp)
        gemm = _gemm_seconds(ctx, pair, tokens, tp)
        if pair.method == "bulk":
            chunk = gemm
        elif kind == "userbuffers":  # TE's chunk GEMMs at their own shape (cost model 58)
            chunk = chunk_seconds(ctx, pair, tokens, tp)
        else:  # async TP: 1/n of the GEMM (torch's per-shard mms of GQA's narrow K/V want split-K: not priced)
            chunk = gemm / pair.chunks
        both = pair_seconds(ctx, pair, gemm, chunk, nbytes, tp, slowdown)
        alone = max(gemm, pair.chunks * chunk)  # its GEMMs as the overlap runs them
        d[pair.bwd][0] += both - (gemm + blocking)
        d[pair.bwd][1] += max(0.0, both - alone) - blocking  # a chunked GEMM's own slowness is compute
    fwd, fwd_tp = d[False]
    bwd, bwd_tp = d[True]
    if recompute == "full":  # the backward reruns the forward, overlapped alike
        bwd, bwd_tp = bwd + fwd, bwd_tp + fwd_tp
    return OverlapDelta(fwd, bwd, fwd_tp, bwd_tp)
