"""Context parallelism (CP, issue 24): each sequence split over the cp ranks, attention computed with the
plan's exchange (``parallel.cp_comm``, ``planner.specs.config.CP_COMMS``).

Causal load balancing: the sequence is cut into 2·cp equal chunks and cp rank i holds chunks i and
2·cp − 1 − i (so every rank attends over the same number of query/key pairs); ``CPContext.positions`` are
its tokens' global positions (RoPE, learned positions and the causal mask read them). Everything but
attention is token-local, so the blocks run unchanged on the local tokens. Exchanges, each autograd-correct
(gradients flow back to the rank whose K/V or Q produced them):

- ``p2p`` (ring): K and V rotate over the cp ranks (cp − 1 hops of a custom autograd function whose
  backward sends the K/V gradient back the other way); each rank attends its queries over each K/V block
  under the position mask and merges the blocks' outputs by their log-sum-exp (online softmax). On CPU the
  rotation is synchronous (not overlapped with the block's attention).
- ``all_gather``: K and V all-gathered (``all_gather_single``; backward reduce-scatters dK/dV), then the
  local queries attend over the whole sequence under the position mask.
- ``a2a`` (Ulysses): all-to-all of Q, K, V from sequence-sharded to head-sharded (heads/cp and
  kv_heads/cp per rank, the whole sequence, put in position order), causal SDPA, all-to-all back.
- ``a2a+p2p`` (hierarchical, Megatron's ``hierarchical_context_parallel_sizes``): the cp group is cut into
  groups of ``inner`` consecutive cp ranks (those on one node: ``planner.specs.layout.cp_a2a_size``, as the
  Megatron export writes ``--hierarchical-context-parallel-sizes``); Ulysses all-to-alls inside each inner group
  (heads/inner per rank, the inner group's tokens), then the ring across the cp / inner groups with K/V blocks
  of those tokens, under the tokens' position mask; all-to-all back.

A sliding window (``ModelSpec.sliding_window`` on the layer: ``Attention.window``) narrows every exchange's position
mask to the band (``sees``); the exchange itself is unchanged: the ring still rotates every K/V block (a block
outside every local query's band contributes exactly nothing to the merge), all_gather gathers the whole K/V.

The ring's blocks are computed in fp32 PyTorch ops (scores and probabilities of one s/cp × s/cp block at a
time, kept for backward), not by a fused kernel: a correctness path for the bundled runtime, whose memory
the planner does not price (it does not price CP at all yet). The model zoo only calls ``positions`` and
``attention`` on the context ``apply_cp`` hands its modules (``runtime.models.transformer``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

#: The mask value of the ring's blocks: finite, so a query row that sees no key of one block (its lse is
#: then ≈ MASKED and its weight in the merge exactly 0) gives neither NaN values nor NaN gradients.
MASKED = -1e30


class _Group:
    """A process group seen from this rank: its global ranks in group order, this rank's index, the size."""

    def __init__(self, group: dist.ProcessGroup) -> None:
        self.group = group
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.ranks = dist.get_process_group_ranks(group)  # global ranks, in group order


class CPContext(_Group):
    """This rank's place in the context-parallel group and the exchange to run attention with. For ``a2a+p2p``,
    ``inner`` (the all-to-all group of ``a2a_size`` consecutive cp ranks) and ``outer`` (the ring over the
    inner groups: the cp ranks with this rank's index inside its inner group) come from ``hierarchical_groups``."""

    def __init__(self, group: dist.ProcessGroup, cp_comm: str, inner: _Group | None = None, outer=None) -> None:
        super().__init__(group)
        self.comm = cp_comm
        self.inner, self.outer = inner, outer

    # ---------------------------------------------------------------- the sequence's split
    def chunks(self, rank: int | None = None) -> tuple[int, int]:
        """The two of the 2·cp chunks that cp rank ``rank`` (default: this one) holds."""
        r = self.rank if rank is None else rank
        return r, 2 * self.size - 1 - r

    def positions(self, local_len: int, device, rank: int | None = None) -> torch.Tensor:
        """Global positions of the ``local_len`` tokens that cp rank ``rank`` holds."""
        c = local_len // 2
        return torch.cat([torch.arange(i * c, (i + 1) * c, device=device) for i in self.chunks(rank)])

    def shard(self, x: torch.Tensor, dim: int = 1) -> torch.Tensor:
        """This rank's tokens of a whole-sequence tensor (its two chunks, in order)."""
        pieces = x.chunk(2 * self.size, dim=dim)
        return torch.cat([pieces[i] for i in self.chunks()], dim=dim)

    def _rank_order(self, local_len: int, device) -> torch.Tensor:
        """Positions of the sequence concatenated in cp-rank order (each rank's tokens in turn)."""
        return torch.cat([self.positions(local_len, device, r) for r in range(self.size)])

    # ---------------------------------------------------------------- attention
    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None = None) -> torch.Tensor:
        """Causal attention of the local queries over the whole sequence: q [B, heads, T, hd], k and v
        [B, kv_heads, T, hd] (T = seq_len / cp local tokens); returns [B, heads, T, hd]. ``window``: a sliding
        window's (query p sees keys p − window < j ≤ p: ``sees``), in every exchange's position mask."""
        if self.comm == "p2p":
            return _ring_attention(self, q, k, v, window)
        if self.comm == "all_gather":
            return _all_gather_attention(self, q, k, v, window)
        if self.comm == "a2a":
            return _ulysses_attention(self, q, k, v, window)
        if self.comm == "a2a+p2p":
            return _hierarchical_attention(self, q, k, v, window)
        raise NotImplementedError(f"cp_comm {self.comm!r} has no runtime path")


def hierarchical_groups(mesh, a2a_size: int) -> tuple[_Group, _Group]:
    """(inner, outer) process groups of ``a2a+p2p`` for this rank, made on every rank of the job (each
    ``new_subgroups_by_enumeration`` is collective): the cp groups of the mesh (its "cp" dim, other dims
    fixed) cut into ``a2a_size`` consecutive cp ranks (inner), and the cp ranks a2a_size apart (outer)."""
    cp = mesh["cp"].size()
    ranks = mesh.mesh.movedim(mesh.mesh_dim_names.index("cp"), -1).reshape(-1, cp)  # one row per cp group
    inner = [row[o : o + a2a_size].tolist() for row in ranks for o in range(0, cp, a2a_size)]
    outer = [row[i::a2a_size].tolist() for row in ranks for i in range(a2a_size)]
    mine_inner, _ = dist.new_subgroups_by_enumeration(inner)
    mine_outer, _ = dist.new_subgroups_by_enumeration(outer)
    return _Group(mine_inner), _Group(mine_outer)


def apply_cp(chunk: nn.Module, ctx: CPContext) -> None:
    """Hand the context to the modules that read positions or run attention: the embedding (learned
    positions), each block's attention (RoPE) and its core (the exchange)."""
    from runtime.models.transformer import Attention, Embedding, SelfAttention

    for module in chunk.modules():
        if isinstance(module, Attention | Embedding | SelfAttention):
            module.cp = ctx


# ------------------------------------------------------------------------------------------------
# all_gather


def sees(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int | None) -> torch.Tensor:
    """The position mask [len(q_pos), len(k_pos)]: True where the query attends the key (causal; within the window's
    ``window`` keys when given, as ``runtime.models.transformer.banded_causal_mask``)."""
    d = q_pos[:, None] - k_pos[None, :]
    return d >= 0 if window is None else (d >= 0) & (d < window)


def _all_gather_attention(ctx: CPContext, q, k, v, window: int | None = None):
    b, hkv, t, hd = k.shape
    from torch.distributed._functional_collectives import all_gather_single, wait_tensor

    kv = torch.stack((k, v)).unsqueeze(0).contiguous()  # [1, 2, B, hkv, T, hd]
    full = wait_tensor(all_gather_single(kv, 0, ctx.group))  # [cp, 2, B, hkv, T, hd]; backward: reduce-scatter
    full = full.permute(1, 2, 3, 0, 4, 5).reshape(2, b, hkv, ctx.size * t, hd)
    order = ctx._rank_order(t, q.device)
    full = full.index_select(3, torch.argsort(order))  # position order
    seen = sees(ctx.positions(t, q.device), torch.arange(ctx.size * t, device=q.device), window)
    return F.scaled_dot_product_attention(q, full[0], full[1], attn_mask=seen, enable_gqa=hkv != q.shape[1])


# ------------------------------------------------------------------------------------------------
# a2a (Ulysses)


def _to_heads(g: _Group, x: torch.Tensor) -> torch.Tensor:
    """[B, h, T, hd] sequence-sharded over ``g`` → [B, h/n, n·T, hd] head-sharded: the n members' tokens in
    member order."""
    from torch.distributed._functional_collectives import all_to_all_single_autograd, wait_tensor

    b, h, t, hd = x.shape
    c = g.size
    x = x.reshape(b, c, h // c, t, hd).transpose(0, 1).contiguous()  # [n (destination), B, h/n, T, hd]
    y = wait_tensor(all_to_all_single_autograd(x, None, None, g.group))  # [n (source), B, h/n, T, hd]
    return y.permute(1, 2, 0, 3, 4).reshape(b, h // c, c * t, hd)


def _to_seq(g: _Group, y: torch.Tensor, t: int) -> torch.Tensor:
    """The inverse of ``_to_heads``: [B, h/n, n·T, hd] (member order) → [B, h, T, hd]."""
    from torch.distributed._functional_collectives import all_to_all_single_autograd, wait_tensor

    b, hc, _, hd = y.shape
    c = g.size
    y = y.reshape(b, hc, c, t, hd).permute(2, 0, 1, 3, 4).contiguous()  # [n (destination), B, h/n, T, hd]
    x = wait_tensor(all_to_all_single_autograd(y, None, None, g.group))  # [n (head group), B, h/n, T, hd]
    return x.transpose(0, 1).reshape(b, c * hc, t, hd)


def _ulysses_attention(ctx: CPContext, q, k, v, window: int | None = None):
    t = q.shape[2]
    order = ctx._rank_order(t, q.device)  # rank order → position of each token
    to_pos = torch.argsort(order)
    qh, kh, vh = (_to_heads(ctx, x).index_select(2, to_pos) for x in (q, k, v))  # position order
    gqa = kh.shape[1] != qh.shape[1]
    if window is None:
        out = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, enable_gqa=gqa)
    else:
        pos = torch.arange(qh.shape[2], device=q.device)
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=sees(pos, pos, window), enable_gqa=gqa)
    return _to_seq(ctx, out.index_select(2, order), t)


# ------------------------------------------------------------------------------------------------
# a2a+p2p (hierarchical)


def _hierarchical_attention(ctx: CPContext, q, k, v, window: int | None = None):
    """Ulysses inside the inner group (heads/inner, the inner group's inner·T tokens), the ring across the
    inner groups (outer), all-to-all back."""
    assert ctx.inner is not None and ctx.outer is not None
    t, a = q.shape[2], ctx.inner.size

    def positions(group: int) -> torch.Tensor:  # the tokens of inner group ``group``, in member order
        return torch.cat([ctx.positions(t, q.device, group * a + i) for i in range(a)])

    qh, kh, vh = (_to_heads(ctx.inner, x) for x in (q, k, v))
    out = _ring(ctx.outer, qh, kh, vh, positions(ctx.outer.rank), positions, window)
    return _to_seq(ctx.inner, out, t)


# ------------------------------------------------------------------------------------------------
# p2p (ring)


class _Rotate(torch.autograd.Function):
    """Send to the next rank of the ring, receive from the previous one; backward sends the gradient back."""

    @staticmethod
    def forward(fctx, x: torch.Tensor, ctx: _Group) -> torch.Tensor:
        fctx.cp = ctx
        return _exchange(ctx, x.contiguous(), +1)

    @staticmethod
    def backward(fctx, grad: torch.Tensor):
        return _exchange(fctx.cp, grad.contiguous(), -1), None


def _exchange(ctx: _Group, x: torch.Tensor, step: int) -> torch.Tensor:
    to = ctx.ranks[(ctx.rank + step) % ctx.size]
    frm = ctx.ranks[(ctx.rank - step) % ctx.size]
    out = torch.empty_like(x)
    ops = [dist.P2POp(dist.isend, x, to, ctx.group), dist.P2POp(dist.irecv, out, frm, ctx.group)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    return out


def _block(q, k, v, q_pos, k_pos, window: int | None = None):
    """Masked attention of q over one K/V block in fp32: (output, log-sum-exp per query)."""
    rep = q.shape[1] // k.shape[1]
    if rep > 1:
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(~sees(q_pos, k_pos, window), MASKED)
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    return torch.exp(scores - lse) @ v, lse


def _ring_attention(ctx: CPContext, q, k, v, window: int | None = None):
    t = q.shape[2]
    return _ring(ctx, q, k, v, ctx.positions(t, q.device), lambda source: ctx.positions(t, q.device, source), window)


def _ring(ring: _Group, q, k, v, q_pos: torch.Tensor, kv_positions, window: int | None = None):
    """The ring over ``ring``: this rank's queries (at ``q_pos``) over every member's K/V block
    (``kv_positions(member)``: its tokens' positions), merged by log-sum-exp."""
    q32 = q.float()
    kv = torch.stack((k, v))
    outs, lses = [], []
    for hop in range(ring.size):
        source = (ring.rank - hop) % ring.size  # the member whose K/V this rank holds now
        o, lse = _block(q32, kv[0].float(), kv[1].float(), q_pos, kv_positions(source), window)
        outs.append(o)
        lses.append(lse)
        if hop < ring.size - 1:
            kv = _Rotate.apply(kv, ring)
    total = torch.logsumexp(torch.stack(lses), dim=0)
    out = sum(torch.exp(lse - total) * o for o, lse in zip(outs, lses, strict=True))
    return out.to(q.dtype)
