"""The end of the step on one pipeline rank: the one formula (``end_terms``) of rank r's DP gradient sync, optimizer
step and ZeRO-1/2 parameter all-gather, built from a class's ``terms.SharedTerms`` at a cut — ints (``cost.evaluate``,
the bounds) or CP-SAT variables (the cut solver's model)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Generic, NamedTuple

from planner.compose.affine import Count, moe_counts, total

if TYPE_CHECKING:
    from planner.compose.cost import Candidate
    from planner.compose.terms import SharedTerms


class EndTerms(NamedTuple, Generic[Count]):
    """Pipeline rank r's end of step, ns: its DP gradient sync overlaps its last backward b (chunk r) when
    the stack overlaps it (``Stack.overlap_grad_reduce``; else ``overlap`` and ``slowed`` are 0), then the
    optimizer step, then the ZeRO-1/2 parameter all-gather. Overlapped compute runs σ slower over the time
    it shares with the sync (``OVERLAP_SLOWDOWN``), so the sync costs max(0, sync − b) + σ·min(sync, b)
    = max(σ·sync, sync − (1 − σ)·b): ``overlap`` = (1 − σ)·b and ``slowed`` = σ·sync."""

    sync: Count
    overlap: Count
    optimizer: Count
    post: Count
    slowed: Count = 0  # type: ignore[assignment]


def end_parts(t: EndTerms[Count]) -> list[Count]:
    """The rank's end term is the max of these: ``max(slowed, sync − overlap) + optimizer + post``."""
    done = t.optimizer + t.post
    if isinstance(t.sync, int) and t.sync == 0:  # nothing to sync
        return [done]
    return [done + t.slowed, t.sync - t.overlap + done]


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
    return EndTerms(
        s.sync.at(layers, emb, head, moe),
        s.hidden_bwd.at(n[r], r == 0, r == c.chunks - 1, own),
        s.opt.at(layers, emb, head, moe) + tied,
        s.post.at(layers, emb, head, moe),
        s.sync_slowdown.at(layers, emb, head, moe),
    )


def rank_end(t: EndTerms[int]) -> int:
    return max(end_parts(t))


def exposed_sync(t: EndTerms[int]) -> int:
    """The DP sync on the critical path (the sync beyond its overlap or the slowdown of the compute under
    it, and the ZeRO all-gather)."""
    return max(t.slowed, t.sync - t.overlap) + t.post
