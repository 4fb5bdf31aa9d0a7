"""The end of the step on one pipeline rank: the one formula (``end_terms``) of rank r's DP gradient sync, optimizer
step and ZeRO-1/2 parameter all-gather, built from a class's ``terms.SharedTerms`` at a cut — ints (``cost.evaluate``,
the bounds) or CP-SAT variables (the cut solver's model)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Generic, NamedTuple

from planner.compose.affine import NOTHING, Affine, Count, moe_counts, total

if TYPE_CHECKING:
    from planner.compose.cost import Candidate
    from planner.compose.terms import SharedTerms


class EndTerms(NamedTuple, Generic[Count]):
    """Pipeline rank r's end of step, ns: its DP gradient sync overlaps its last backward b (chunk r) when
    the stack overlaps it (``Stack.overlap_grad_reduce``; else ``overlap`` and ``slowed`` are 0), then the
    optimizer step, then the ZeRO-1/2 parameter all-gather. Overlapped compute runs σ slower over the time
    it shares with the sync (``OVERLAP_SLOWDOWN``), so the sync costs max(0, sync − b) + σ·min(sync, b)
    = max(σ·sync, sync − (1 − σ)·b): ``overlap`` = (1 − σ)·b and ``slowed`` = σ·sync.

    Interleaved 1F1B where the stack syncs chunk by chunk (``SharedTerms.chunk_grad_sync``: Megatron-core's
    ``grad_sync_func``, ``chunk_sync_terms``): ``overlap`` is (1 − σ)· the backward the rank runs after its first chunk's
    sync is launched, and ``last`` = (1 − σ)· the sync of its chunk 0, which is launched after the rank's last
    backward and hides under nothing: the sync then costs max(σ·sync + last, sync − overlap)."""

    sync: Count
    overlap: Count
    optimizer: Count
    post: Count
    slowed: Count = 0  # type: ignore[assignment]
    last: Count = 0  # type: ignore[assignment]
    near: Count = 0  # type: ignore[assignment]  # chunks 0 and 1's sync less the backward after chunk 1's launch
    posts: tuple[Count, ...] = ()  # the all-gather's exposed part is their max where it overlaps (else ``post``)


def _near(t: EndTerms[Count]) -> list[Count]:
    return [] if isinstance(t.near, int) and t.near == 0 else [t.near]


def _grad_parts(t: EndTerms[Count]) -> list[Count]:
    if isinstance(t.sync, int) and t.sync == 0:  # nothing to sync
        return [0]
    return [t.slowed + t.last, t.sync - t.overlap] + _near(t)


def end_parts(t: EndTerms[Count]) -> list[Count]:
    """The rank's end term is the max of these: ``max(slowed + last, sync − overlap[, near]) + optimizer +
    max(posts)`` (``post`` where the all-gather is not overlapped)."""
    posts = list(t.posts) or [t.post]
    return [t.optimizer + g + p for g in _grad_parts(t) for p in posts]


def end_terms(
    s: SharedTerms, c: Candidate, n: Sequence[Count], r: int, k: Sequence[Count] | None = None
) -> EndTerms[Count]:
    """The end terms of rank r of class ``c`` at the cut ``n`` (rank r holds chunks r, r + pp, …;
    the embedding is on rank 0, the LM head on rank pp − 1; with pp > 1 both also wait on the tied embeddings'
    all-reduce between them, ``SharedTerms.tied_sync``); ``k``: each chunk's MoE layers of a model of two block
    kinds (the cut solver's variables; counted on the layer sequence when None)."""
    layers = total(n[r :: c.pp])
    emb, head = r == 0, r == c.pp - 1 and s.own_head(c)
    tied = s.tied_sync if c.pp > 1 and r in (0, c.pp - 1) else 0  # the embedding group's all-reduce
    if k is None and s.moe_prefix is not None:
        k = moe_counts(s.moe_prefix, n)  # type: ignore[arg-type,assignment]  # ints: a cut being evaluated
    moe, own = (total(k[r :: c.pp]), k[r]) if k is not None else (0, 0)
    hidden: Count = s.hidden_bwd.at(n[r], r == 0, r == c.chunks - 1, own)
    last: Count = 0  # type: ignore[assignment]
    near: Count = 0  # type: ignore[assignment]
    interleaved = c.virtual_stages > 1 and c.schedule == "interleaved-1f1b"
    if s.chunk_grad_sync and interleaved:
        hidden, last, near = chunk_sync_terms(s, c, n, r, k, emb, head)
    posts = param_gather_parts(s, c, n, r, k, emb, head) if interleaved and s.hidden_fwd != NOTHING else ()
    return EndTerms(
        s.sync.at(layers, emb, head, moe),
        hidden,
        s.opt.at(layers, emb, head, moe) + tied,
        s.post.at(layers, emb, head, moe),
        s.sync_slowdown.at(layers, emb, head, moe),
        last,
        near,
        posts,
    )


def chunk_sync_terms(
    s: SharedTerms, c: Candidate, n: Sequence[Count], r: int, k: Sequence[Count] | None, emb: bool, head: bool
) -> tuple[Count, Count, Count]:
    """(overlap, last, near) of rank r under interleaved 1F1B with the gradient sync launched chunk by chunk.

    Megatron-core (NVIDIA/Megatron-LM df72712, the MLPerf v3.1 GPT-3 submission's; the same at d98e8a64dd
    schedules.py:1446-1451): megatron/core/pipeline_parallel/schedules.py:619-628 launches ``grad_sync_func`` for the
    chunk whose last micro-batch backward was ``microbatch_id − pipeline_parallel_rank`` (:534-544: the last of
    each chunk's pp backward slots in the last group of pp·v), and :917-926 the chunks never reached (rank r's
    chunk 0 for r > 0) after the rank's last backward; NeMo r1.20 (bd0b818) megatron_gpt_model.py:419-443 puts each
    virtual stage's layers in one bucket of apex's DistributedFusedAdam, the embedding and the sequence-parallel
    norms (overlap disabled, :385-412) in the last one. Rank r's chunk j (its (j+1)-th) is launched j·pp − r
    backward slots before its last backward ends, so on one stream the syncs end at
    max over j of (Σ_{i ≤ j} sync_i − B_j), B_j = pp·Σ_{i < j} b_i − r·b_{j−1} the backward after chunk j's launch
    (B_0 = 0), taken at j = v − 1 (the whole sync: ``overlap`` = (1 − σ)·B_{v−1}), j = 1 (``near``: sync_0 + sync_1 −
    (1 − σ)·B_1) and j = 0 (chunk 0's sync, with the embedding and head, against nothing: ``last``) — exact for
    equal chunks, where the terms between are linear in j; the compute under the rest is slowed by σ
    (``slowed``)."""
    ks: Sequence[Count] = k if k is not None else [0] * len(n)  # type: ignore[list-item]
    chunks = list(range(r, c.chunks, c.pp))  # the rank's chunks, 0-th first

    def hid(ch: int) -> Count:
        return s.hidden_bwd.at(n[ch], ch == 0, ch == c.chunks - 1, ks[ch])

    overlap = c.pp * total([hid(ch) for ch in chunks[:-1]]) - r * hid(chunks[-2])
    own, one = ks[r], chunks[1]
    last = s.sync.at(n[r], emb, head, own) - s.sync_slowdown.at(n[r], emb, head, own)
    first_two = s.sync.at(n[r], emb, head, own) + s.sync.at(n[one], False, False, ks[one])
    near = first_two - (c.pp - r) * hid(r)
    return overlap, last, near


def rank_end(t: EndTerms[int]) -> int:
    return max(end_parts(t))


def exposed_sync(t: EndTerms[int]) -> int:
    """The DP sync on the critical path (the sync beyond its overlap or the slowdown of the compute under
    it, and the ZeRO all-gather)."""
    return max(_grad_parts(t)) + max(list(t.posts) or [t.post])


def param_gather_parts(
    s: SharedTerms, c: Candidate, n: Sequence[Count], r: int, k: Sequence[Count] | None, emb: bool, head: bool
) -> tuple[Count, Count, Count]:
    """The candidates for the exposed ZeRO-1/2 parameter all-gather of rank r under interleaved 1F1B where the stack
    all-gathers chunk by chunk under the next step's forwards (``Stack.overlap_param_gather``; the step's all-gather
    is priced at its end, the same time on the critical path).

    Megatron-core df72712 megatron/core/pipeline_parallel/schedules.py:510-513 launches ``param_sync_func`` for
    chunks 0 and 1 before the first forward and :552-563 chunk j ≥ 2's at the forward slot ``(j − 1)·pp − r``, pp + r
    slots before its first forward (the same at d98e8a64dd :1342); NeMo r1.20 (bd0b818) megatron_base_model.py:351-353
    ``sync_overlap_parameters`` → apex DistributedFusedAdam ``_try_start_bucket_param_sync`` (``overlap_param_sync``:
    the submission's conf/optim/distributed_fused_adam.yaml:4). Chunk 0's gather (with the embedding and head, NeMo's
    last bucket: megatron_gpt_model.py:439-443) holds the first forward; chunk j's must be in by its first forward,
    pp·Σ_{i<j} f_i after the start: as for the gradient sync (``chunk_sync_terms``) the stall is
    max over j of (Σ_{i ≤ j} gather_i − (1 − σ)·pp·Σ_{i<j} f_i) taken at j = 0 (with σ· the overlapped rest), 1, v − 1."""
    ks: Sequence[Count] = k if k is not None else [0] * len(n)  # type: ignore[list-item]
    chunks = list(range(r, c.chunks, c.pp))
    moe, own, one = total([ks[ch] for ch in chunks]), ks[r], chunks[1]
    layers = total([n[ch] for ch in chunks])

    def hid(ch: int) -> Count:
        return s.hidden_fwd.at(n[ch], ch == 0, ch == c.chunks - 1, ks[ch])

    whole, first = s.post.at(layers, emb, head, moe), s.post.at(n[r], emb, head, own)
    slowed = s.post_slowdown.at(layers, emb, head, moe) - s.post_slowdown.at(n[r], emb, head, own)
    near = first + s.post.at(n[one], False, False, ks[one]) - c.pp * hid(r)
    far = whole - c.pp * total([hid(ch) for ch in chunks[:-1]])
    return first + slowed, near, far


def end_floor(s: SharedTerms, c: Candidate, num_layers: int, moe_layers: int = 0) -> tuple[int, int]:
    """(ends, const): every cut's slowest rank's end of step is ≥ ends / pp + const (the rank average of the
    optimizer step and the ZeRO-1/2 parameter all-gather; the gradient sync at its least, 0) — what the search's
    bounds add to a pipeline's makespan.

    Where the all-gather overlaps the next forwards (``param_gather_parts``: interleaved 1F1B with
    ``Stack.overlap_param_gather``) rank r's exposed part is at least its first candidate, chunk r's gather plus σ·
    the rest, ``post(n_r) + post_slowdown(N_r) − post_slowdown(n_r)`` (N_r its layers, n_r ≥ 1 those of chunk r):
    summed over the ranks, ``post_slowdown`` of every layer and (post − post_slowdown) of one layer per rank at least
    — not the whole ``post`` (MLPerf v3.1 GPT-3 175B, TP4 PP8 v12: 146 ms per rank against 41 ms exposed)."""
    head = s.own_head(c)
    o, g = s.opt, s.post
    ends = _over_ranks(o, num_layers, moe_layers, head)
    if not (c.virtual_stages > 1 and c.schedule == "interleaved-1f1b" and s.hidden_fwd != NOTHING):
        return ends + _over_ranks(g, num_layers, moe_layers, head), o.const + g.const
    part, const = _slowed_and_one_chunk(g, s.post_slowdown, c.pp, num_layers, moe_layers, head)
    return ends + part, o.const + const


def _over_ranks(a: Affine, num_layers: int, moe_layers: int, head: bool) -> int:
    """Σ over the ranks of ``a`` at rank r's layers (Σ_r N_r = L, Σ_r K_r = K MoE layers), its constant apart."""
    return num_layers * a.layer + moe_layers * a.moe + a.emb + (a.head if head else 0)


def _slowed_and_one_chunk(
    whole: Affine, slowed: Affine, p: int, num_layers: int, moe_layers: int, head: bool
) -> tuple[int, int]:
    """(sum, const): Σ over the ranks of ``slowed`` at rank r's N_r layers plus (``whole`` − ``slowed``) at chunk r's
    n_r ≥ 1 (the embedding on rank 0, the LM head on rank pp − 1) is ≥ sum + pp·const at every cut: what of a
    collective that hides under the next (previous) chunks stays exposed at least (σ of all of it, and chunk r's whole,
    ``end_floor``'s all-gather and ``grad_floor``'s sync)."""
    L = num_layers
    d = Affine(*(a - b for a, b in zip(whole, slowed)))
    least = min(d.layer, d.layer + d.moe)  # chunk r's layers (n_r ≥ 1 of them, Σ_r n_r ≤ L) each add at least this
    part = _over_ranks(slowed, L, moe_layers, head) + d.emb + (d.head if head else 0)
    return part + (p * least if least >= 0 else L * least), slowed.const + d.const


def grad_floor(s: SharedTerms, c: Candidate, num_layers: int, moe_layers: int = 0) -> tuple[int, int]:
    """(sum, const): Σ over the ranks of each rank's exposed gradient sync (``_grad_parts``' max) is ≥ sum + pp·const at
    every cut — the part ``end_floor`` takes as 0. Without the overlap (``hidden_bwd`` NOTHING) the part ``sync −
    overlap`` is the whole sync of the rank's N_r layers; with it, the part ``slowed + last`` is σ· the sync of its N_r
    layers (``sync_slowdown``) plus, where the sync runs chunk by chunk (``chunk_sync_terms``), (1 − σ)· that of chunk r
    (n_r ≥ 1 layers, with the embedding on rank 0 and the LM head on rank pp − 1): summed over the ranks,
    ``sync_slowdown`` of every layer and (sync − sync_slowdown) of one layer per rank at least. (0, 0) where a
    coefficient of the sync is negative (a rank's sync could then be 0, whose exposed part ``_grad_parts`` takes as 0)."""
    y = s.sync
    if min(y.const, y.layer, y.layer + y.moe, y.emb, y.head) < 0:
        return 0, 0
    head = s.own_head(c)
    if s.hidden_bwd == NOTHING:
        return _over_ranks(y, num_layers, moe_layers, head), y.const
    w = s.sync_slowdown
    if not (s.chunk_grad_sync and c.virtual_stages > 1 and c.schedule == "interleaved-1f1b"):
        return _over_ranks(w, num_layers, moe_layers, head), w.const
    return _slowed_and_one_chunk(y, w, c.pp, num_layers, moe_layers, head)


def sync_lift(s: SharedTerms, c: Candidate, num_layers: int, moe_layers: int = 0) -> int:
    """What every cut's slowest rank's end of step is above ``end_floor``'s ``ends / pp + const`` at least, ns (floored):
    the rank average of the gradient sync's least (``grad_floor``) and of the tied embeddings' all-reduce on the first
    and last ranks (``end_terms`` adds it to their optimizer step; ``end_floor`` leaves both out). A bound built as
    something + ``end_floor`` plus this is still a bound (``search.lift``)."""
    grads, const = grad_floor(s, c, num_layers, moe_layers)
    tied = 2 * s.tied_sync if c.pp > 1 else 0
    return int(math.floor((grads + tied) / c.pp + const))
