"""The search: enumerate configuration classes, bound them, and solve the stage cut of the promising
ones exactly with OR-Tools CP-SAT.

Exactness. The objective of a complete configuration is ``cost.evaluate``: the simulated pipeline
makespan plus the slowest rank's exposed DP sync and optimizer step, all integers (ns). For one
class the CP-SAT model has one integer variable per chunk (its layer count) and

* ``D ≥ opt_i + post_i`` and ``D ≥ sync_i − overlap_i + opt_i + post_i`` per rank (exact max);
* memory ``≤ usable`` per rank and per activation peak of the schedule (exact, linear);
* ``M ≥ length(path)`` for chains of operations of the schedule's dependency graph. Every chain is a
  lower bound of the makespan for *every* cut, so the model's optimum is a lower bound; the solution
  is simulated, and while the simulation is longer than ``M`` the critical path found by the
  simulation is added as a new cut (lazy constraint generation). When they agree the cut is optimal.
  GPipe starts from its exact closed form, so it needs no extra cut.

Interleaved classes enumerated without a pinned schedule have one cut only, Megatron-LM's uniform
split (``forced_cut``): they are memory-screened at that cut and simulated, no CP-SAT.

Across classes: a cut-independent lower bound (``class_bound``) orders them; classes are solved best
bound first until the next bound cannot beat the k-th best plan. Every solved class is OPTIMAL, every
skipped one is proven no better, so the answer is proven optimal for the modeled space.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from planner import rules
from planner.config import PRICED_SCHEDULES
from planner.cost import (
    Candidate,
    ClassCosts,
    Context,
    Evaluation,
    _block_crosses,
    _ns,
    class_costs,
    evaluate,
    rank_end_terms,
    rank_memory,
    shared_terms,
)
from planner.errors import MeshplanError
from planner.layout import even_stage_layers
from planner.simulate import rank_orders
from planner.specs import MULTI_STAGE_SCHEDULES, ParallelPins, SearchOptions

#: Schedules the planner models (``planner.config.SCHEDULES``: zero-bubble schedules are runtime-only).
SEARCHED_SCHEDULES = PRICED_SCHEDULES
#: Schedules searched when ``parallel.schedule`` is not pinned. Interleaved 1F1B is then searched as
#: Megatron-LM supports it: uniform chunks (num_layers divisible by pp·v, the even cut only), each
#: such class simulated at that one cut. Pinning ``schedule=interleaved-1f1b`` (or ``stage_layers``)
#: searches its free cuts with CP-SAT instead (docs/planner.md).
DEFAULT_SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b")
RECOMPUTE = ("none", "selective", "full")
#: Largest number of virtual stages searched when not pinned (Megatron uses 2–8 in practice).
MAX_VIRTUAL_STAGES = 8


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


# ---------------------------------------------------------------------------------------------
# Enumeration and pin validation


def tp_options(ctx: Context, allow_across: bool) -> list[int]:
    m = ctx.model
    limit = ctx.num_gpus if allow_across else ctx.cluster.gpus_per_node
    return [t for t in divisors(limit) if t <= ctx.num_gpus and ctx.num_gpus % t == 0
            and m.num_attention_heads % t == 0 and m.num_kv_heads % t == 0 and m.ffn_hidden_size % t == 0]


def validate_pins(ctx: Context, pins: ParallelPins, options: SearchOptions) -> None:
    """Reject pins that no configuration can satisfy, naming the field and the fix (``planner.rules``)."""
    m, n = ctx.model, ctx.num_gpus
    gbs = ctx.training.global_batch_size
    if pins.tp is not None:
        rules.check(rules.tp_divides_model(m, pins.tp), rules.tp_divides_gpus(pins.tp, n),
                    rules.tp_within_node(pins.tp, ctx.cluster.gpus_per_node, options.allow_tp_across_nodes))
    if pins.pp is not None:
        rules.check(rules.pp_fits_layers(pins.pp, 1, m.num_layers))
    if None not in (pins.tp, pins.pp, pins.dp):
        rules.check(rules.degrees_product(pins.tp, pins.pp, pins.dp, n))  # type: ignore[arg-type]
    rules.check(
        rules.degrees_divide(pins.tp, pins.pp, pins.dp, n),
        rules.batch_divides(gbs, pins.dp, None),
        rules.batch_divides(gbs, None, pins.micro_batch_size),
        rules.batch_divides(gbs, pins.dp, pins.micro_batch_size),
        rules.schedule_priced(pins.schedule) if pins.schedule is not None else None,
        rules.virtual_stages_fit(pins.schedule, pins.virtual_stages),
        rules.sequence_parallel_needs_tp(pins.sequence_parallel, pins.tp),
        rules.sequence_parallel_splits_seq(pins.sequence_parallel, pins.tp, ctx.training.seq_len),
    )
    if pins.stage_layers is not None:
        rules.check(
            rules.stage_layers_sum(pins.stage_layers, m.num_layers),
            rules.stage_layers_nonempty(pins.stage_layers, ends_may_be_empty=False),
            rules.stage_layers_count(pins.stage_layers, pins.pp, pins.virtual_stages),
        )


def enumerate_candidates(ctx: Context, pins: ParallelPins, options: SearchOptions) -> list[Candidate]:
    """Every class allowed by the pins (stage cuts are searched per class)."""
    validate_pins(ctx, pins, options)
    n, L = ctx.num_gpus, ctx.model.num_layers
    gbs, seq = ctx.training.global_batch_size, ctx.training.seq_len
    out: list[Candidate] = []
    short_1f1b: list[tuple[int, int, int, MeshplanError]] = []  # (pp, dp, -m, why) of 1F1B classes dropped for m < pp
    tps = [pins.tp] if pins.tp is not None else tp_options(ctx, options.allow_tp_across_nodes)
    for tp in tps:
        for pp in ([pins.pp] if pins.pp is not None else [p for p in divisors(n // tp) if rules.pp_fits_layers(p, 1, L) is None]):
            if (n // tp) % pp:
                continue
            dp = n // (tp * pp)
            if pins.dp is not None and dp != pins.dp:
                continue
            if rules.batch_divides(gbs, dp, None):
                continue
            mbss = [pins.micro_batch_size] if pins.micro_batch_size is not None else divisors(gbs // dp)
            for mbs in mbss:
                if rules.batch_divides(gbs, dp, mbs):
                    continue
                m = gbs // (dp * mbs)
                scheds: list[tuple[str, int]] = []
                for s in ([pins.schedule] if pins.schedule is not None else list(DEFAULT_SCHEDULES)):
                    if s in MULTI_STAGE_SCHEDULES:
                        if rules.interleaving_needs_pipeline(pp, 2) or rules.interleaved_microbatches_priced(s, pp, m):
                            continue
                        vs = [pins.virtual_stages] if pins.virtual_stages is not None else range(2, MAX_VIRTUAL_STAGES + 1)
                        # Unpinned: Megatron's virtual pipeline needs uniform chunks (L divisible by pp·v).
                        uniform = pins.schedule is None
                        scheds += [(s, v) for v in vs if rules.virtual_stages_fit(s, v) is None and rules.pp_fits_layers(pp, v, L) is None
                                   and (not uniform or L % (pp * v) == 0)]
                    elif pins.virtual_stages in (None, 1):
                        if pp == 1 and s != "1f1b" and pins.schedule is None:
                            continue  # one stage: every schedule is the same; keep one
                        short = rules.one_f_one_b_microbatches(s, pp, m, gbs, dp)
                        if short is not None:  # GPipe covers those classes
                            short_1f1b.append((pp, dp, -m, short))
                            continue
                        scheds.append((s, 1))
                for s, v in scheds:
                    if pins.stage_layers is not None and len(pins.stage_layers) != pp * v:
                        continue
                    for rc in ([pins.recompute] if pins.recompute is not None else RECOMPUTE):
                        sps = [pins.sequence_parallel] if pins.sequence_parallel is not None else ([False, True] if tp > 1 else [False])
                        for sp in sps:
                            if sp and (rules.sequence_parallel_needs_tp(sp, tp) or rules.sequence_parallel_splits_seq(sp, tp, seq)):
                                continue
                            zs = [pins.zero_stage] if pins.zero_stage is not None else ([0, 1, 2, 3] if dp > 1 else [0])
                            for z in zs:
                                out.append(Candidate(tp, pp, dp, mbs, s, v, rc, sp, z))
    if not out and short_1f1b and pins.schedule == "1f1b":
        why = min(short_1f1b, key=lambda x: x[:3])[3]
        raise why if pins.micro_batch_size is not None else rules.with_field(why, "parallel.schedule")
    return out


def forced_cut(ctx: Context, pins: ParallelPins, c: Candidate) -> list[int] | None:
    """The one cut a class is evaluated at, or None when its cut is searched: the pinned
    ``stage_layers``; else, for interleaved classes enumerated without a pinned schedule, the even
    split (Megatron-LM's virtual pipeline requires every chunk to hold num_layers / (pp·v) layers)."""
    if pins.stage_layers is not None:
        return list(pins.stage_layers)
    if pins.schedule is None and c.virtual_stages > 1:
        L = ctx.model.num_layers
        return [L // c.chunks] * c.chunks if L % c.chunks == 0 else even_stage_layers(L, c.chunks)
    return None


def explain_no_candidate(ctx: Context, pins: ParallelPins) -> tuple[str, str, str]:
    """(field, reason, suggestion) when the pins and the batch leave no class at all."""
    gbs, n = ctx.training.global_batch_size, ctx.num_gpus
    why = rules.interleaved_microbatches_priced(pins.schedule, pins.pp, None)
    if why is not None:
        return why.field, why.message, why.fix
    dps = [d for d in divisors(n) if gbs % d == 0]
    better = ((gbs + n - 1) // n) * n
    return ("training.global_batch_size",
            f"no data-parallel degree compatible with the pins divides the global batch size {gbs} (usable dp: {dps})",
            f"use a global batch size divisible by the data-parallel degree, e.g. {better}, or pin tp/pp so dp divides {gbs}")


# ---------------------------------------------------------------------------------------------
# Bounds and heuristics per class


def layer_caps(cc: ClassCosts) -> list[int]:
    """Per rank, an upper bound of the layers its memory can hold (exact for one chunk per rank):
    at each activation peak, every chunk of the rank keeps at least ``kmin`` copies."""
    caps = []
    for r in range(cc.cand.pp):
        own = cc.rank_chunks(r)
        base = cc.buffer_const[r] + sum(cc.state_extra[c] for c in own)
        cap = None
        for vec in cc.live[r]:
            kmin = min(vec.get(c, 0) for c in own)
            room = cc.usable_bytes - base - sum(k * cc.act_extra[c] for c, k in vec.items())
            per = cc.state_layer + kmin * cc.act_layer
            this = -1 if room < 0 else (room // per if per > 0 else cc.num_layers)
            cap = this if cap is None else min(cap, this)
        caps.append(cap)
    return caps


def may_fit(cc: ClassCosts) -> bool:
    caps = layer_caps(cc)
    v = cc.cand.virtual_stages
    return all(cp >= v for cp in caps) and sum(caps) >= cc.num_layers


def busiest_rank_load(L: int, p: int, w: int, e_first: int, e_last: int) -> int:
    """min over cuts of max over ranks of (layers·w + extras): the least F+B per micro-batch of the
    busiest pipeline rank, where rank 0 carries ``e_first`` and rank p−1 ``e_last`` (the embedding
    and the LM head). Relaxes "≥ 1 layer per chunk", so it is a lower bound of the true value."""
    if p == 1:
        return L * w + e_first + e_last
    if w <= 0:
        return max(e_first, e_last)

    def capacity(t: int) -> int:  # most layers the ranks can take with loads ≤ t
        return (t - e_first) // w + (t - e_last) // w + (p - 2) * (t // w)

    t = max(e_first, e_last, (L * w + e_first + e_last) // p)
    while capacity(t) < L:  # next breakpoint: some rank takes one more layer (a few steps)
        t = min(((t - e) // w + 1) * w + e for e in {0, e_first, e_last})
    return t


def _pipe_bound(schedule: str, m: int, p: int, v: int, L: int, f_layer: int, b_layer: int, extra_sum: int,
                first_extra: int, ends_extra: tuple[int, int, int, int], lag_sum: int, ends_sum: int, post_const: int) -> int:
    """The cut-independent lower bound of ``class_bound`` from the class's scalar terms: ``extra_sum``
    = Σ_c (f_extra + b_extra), ``first_extra`` = chunk 0's f_extra + b_extra, ``ends_extra`` = the
    first rank's (f, b) extras and the last rank's, ``ends_sum`` = the optimizer and ZeRO-1/2
    all-gather terms summed over every chunk (the rank average bounds the max)."""
    total = L * (f_layer + b_layer) + extra_sum  # one micro-batch through all chunks
    f0, b0, fl, bl = ends_extra
    if p == 1:
        f0, b0, fl, bl = f0 + fl, b0 + bl, 0, 0
    load = busiest_rank_load(L, p, f_layer + b_layer, f0 + b0, fl + bl)  # ≤ F_k + B_k of the busiest rank k
    if v == 1:
        # Chains F(0, 0..i-1) → all of rank i → B(m-1, i-1..0), weighted so the cut cancels.
        pipe = total / (1.0 - (1.0 - 1.0 / m) ** p)
        if schedule == "gpipe":
            # Exact closed form ΣF + ΣB + 2·lags + (m−1)·(max F + max B), and max F + max B ≥ load.
            pipe = max(pipe, total + 2 * lag_sum + (m - 1) * max(total / p, load))
        else:
            # 1F1B steady-state chain through the busiest rank k: F(0) through every stage, B(0) down
            # to k, k's m B and m − min(p − k, m) later F, B(m−1) down to 0, every lag twice:
            # total + 2·lags + (m−1)·B_k + max(0, m−p)·F_k, with B_k ≥ ρ·(F_k + B_k) (mediant).
            rho = min([b / (f + b) for f, b in ((f_layer, b_layer), (f0, b0), (fl, bl)) if f + b > 0] or [0.0])
            pipe = max(pipe, total + 2 * lag_sum + (max(0, m - p) + (min(m, p) - 1) * rho) * load)
    else:
        # Chunks 0..p-2 feed the last rank's first forward (only chunk 0 carries an extra there).
        ramp = ((f_layer + b_layer) * (p * (p - 1) // 2) + (p - 1) * first_extra) / p
        pipe = max(m * total / p + ramp, m * load)  # the busiest rank's own work
    return int(math.floor(pipe + (ends_sum / p + post_const)))


def interleaved_peak_copies(p: int, v: int, m: int, i: int) -> int:
    """Chunk activations alive at rank i's peak under Megatron's interleaved order (its warm-up
    2(p − i − 1) + (v − 1)p forwards, then one more before the first backward; all m·v when m = p)."""
    total = m * v
    warm = total if m == p else min(2 * (p - i - 1) + (v - 1) * p, total)
    return total if warm == total else warm + 1


def quick_may_fit(ctx: Context, c: Candidate, cut: list[int] | None = None) -> bool:
    """``may_fit`` of a one-chunk-per-rank class without building it (same integers, closed-form
    activation copies: GPipe m, 1F1B min(p − i, m)). With ``cut`` (a class's one allowed cut, e.g.
    interleaved's uniform split): False only when that cut cannot fit — every rank's states and
    buffers plus its peak chunk copies (``interleaved_peak_copies``) × the smallest chunk's layer
    activations, the embedding/LM-head activations left out (a lower bound of ``rank_memory``).
    Interleaved without a cut: True (unknown: cost it)."""
    from planner.cost import FIXED_RESERVE_BYTES, FRAGMENTATION, GIB

    if c.virtual_stages > 1 and cut is None:
        return True
    s = shared_terms(ctx, c.micro_batch_size, c.tp, c.sequence_parallel, c.recompute, c.zero_stage, c.dp)
    p, L = c.pp, ctx.model.num_layers
    m = ctx.training.global_batch_size // (c.dp * c.micro_batch_size)
    usable = int((ctx.gpu.memory_gib * GIB - FIXED_RESERVE_BYTES) / (1 + FRAGMENTATION))
    p2p = s.act // c.tp if c.sequence_parallel else s.act
    base = int(s.recompute_tmp + s.z3_tmp + (2 * p2p if p > 1 else 0))
    tied = ctx.model.tie_embeddings and c.chunks == 1
    if cut is not None:
        last = c.chunks - 1
        for r in range(p):
            own = range(r, c.chunks, p)
            states = sum(cut[ch] * s.state_blk for ch in own) + (s.state_emb if r == 0 else 0) \
                + (s.state_head if last % p == r and not tied else 0)
            copies = interleaved_peak_copies(p, c.virtual_stages, m, r) if c.virtual_stages > 1 else \
                (m if c.schedule == "gpipe" else min(p - r, m))
            acts = copies * min(cut[ch] for ch in own) * s.act_layer
            buf = int(base + s.logits_fp32) if last % p == r else base
            if states + acts + buf > usable:
                return False
        return True
    total = 0
    for r in range(p):
        k = m if c.schedule == "gpipe" else min(p - r, m)
        state = (s.state_emb if r == 0 else 0) + (s.state_head if r == p - 1 and not tied else 0)
        act = (s.act_emb if r == 0 else 0) + (s.act_head if r == p - 1 else 0)
        buf = int(base + s.logits_fp32) if r == p - 1 else base
        room = usable - buf - state - k * act
        per = s.state_blk + k * s.act_layer
        cap = -1 if room < 0 else (room // per if per > 0 else L)
        if cap < 1:
            return False
        total += cap
    return total >= L


def class_bound(cc: ClassCosts) -> int:
    """A lower bound of the objective over every stage cut of the class."""
    c, L = cc.cand, cc.num_layers
    ends = L * (cc.opt_layer + cc.post_layer) + sum(cc.opt_extra) + sum(cc.post_extra)
    last = cc.chunks - 1
    firsts = (cc.f_extra[0], cc.b_extra[0], cc.f_extra[last], cc.b_extra[last]) if cc.chunks > 1 else (cc.f_extra[0], cc.b_extra[0], 0, 0)
    return _pipe_bound(c.schedule, cc.m, c.pp, c.virtual_stages, L, cc.f_layer, cc.b_layer, sum(cc.f_extra) + sum(cc.b_extra),
                       cc.f_extra[0] + cc.b_extra[0], firsts, sum(cc.lag), ends, cc.post_const)


def quick_bound(ctx: Context, c: Candidate) -> int:
    """``class_bound`` without building the class (no pipeline lags): ≤ ``class_bound``, from the
    terms shared by every class with the same (mbs, tp, sp, recompute, ZeRO, dp); microseconds."""
    s = shared_terms(ctx, c.micro_batch_size, c.tp, c.sequence_parallel, c.recompute, c.zero_stage, c.dp)
    L = ctx.model.num_layers
    m = ctx.training.global_batch_size // (c.dp * c.micro_batch_size)
    head = not (ctx.model.tie_embeddings and c.chunks == 1)
    fe, be, fh, bh = _ns(s.f_emb), _ns(s.b_emb), _ns(s.f_head), _ns(s.b_head)
    ends = L * (s.opt_layer + s.post[1]) + s.opt_emb + s.post[2] + ((s.opt_head + s.post[3]) if head else 0)
    first = fe + be + ((fh + bh) if c.chunks == 1 else 0)
    firsts = (fe, be, fh, bh) if c.chunks > 1 else (fe + fh, be + bh, 0, 0)
    return _pipe_bound(c.schedule, m, c.pp, c.virtual_stages, L, _ns(s.f_blk), _ns(s.b_blk), fe + be + fh + bh, first, firsts, 0,
                       ends, s.post[0])


def cut_bound(ctx: Context, c: Candidate, cut: list[int]) -> int:
    """A lower bound of the objective of one class at one cut, from the shared terms (no
    ``ClassCosts``, no simulation): the longest rank chain with its p2p lags, F(0) through the chunks
    before rank i, all of rank i's m·(F + B), B(m−1) back through them (every schedule's order starts
    rank i with F(0) of its first chunk and ends it with B(m−1) of that chunk), plus the exact end
    term (``cut_end``). For a uniform interleaved cut rank p−1's chain is the ideal interleaved step,
    so the bound is close to the simulated one (0.1–2 % below on the bench instances)."""
    s = shared_terms(ctx, c.micro_batch_size, c.tp, c.sequence_parallel, c.recompute, c.zero_stage, c.dp)
    p = c.pp
    m = ctx.training.global_batch_size // (c.dp * c.micro_batch_size)
    fb, last = _ns(s.f_blk) + _ns(s.b_blk), c.chunks - 1
    t = [n * fb for n in cut]
    t[0] += _ns(s.f_emb) + _ns(s.b_emb)
    t[last] += _ns(s.f_head) + _ns(s.b_head)
    # The chain crosses boundaries 0..i−1 twice (forward and backward): their p2p lags, as class_costs.
    lags = [0] * p
    if p > 1:
        nbytes = s.act // c.tp if c.sequence_parallel else s.act
        g, block = ctx.cluster.gpus_per_node, c.dp * c.tp
        for b in range(p - 1):
            link = "inter_node" if _block_crosses(g, block, b, b + 1) else "intra_node"
            lags[b] = 2 * _ns(ctx.comm.time("send_recv", nbytes, 2, link))
    pipe = max(sum(t[:i]) + sum(lags[:i]) + m * sum(t[i::p]) for i in range(p))
    return pipe + cut_end(ctx, c, cut)


def cut_end(ctx: Context, c: Candidate, cut: list[int]) -> int:
    """``Evaluation.end_ns`` of a class at a cut (max over ranks of exposed DP sync + optimizer +
    ZeRO-1/2 parameter all-gather), from the shared terms: the same integers as ``rank_end``."""
    s = shared_terms(ctx, c.micro_batch_size, c.tp, c.sequence_parallel, c.recompute, c.zero_stage, c.dp)
    p, last = c.pp, c.chunks - 1
    head = not (ctx.model.tie_embeddings and c.chunks == 1)
    has_post = c.dp > 1 and s.post[1] + s.post[0] > 0
    best = None
    for r in range(p):
        layers = sum(cut[r::p])
        emb, hd = r == 0, head and last % p == r
        sync = s.sync[0] + layers * s.sync[1] + (s.sync[2] if emb else 0) + (s.sync[3] if hd else 0) if c.dp > 1 else 0
        overlap = cut[r] * _ns(s.b_blk) + (_ns(s.b_emb) if r == 0 else 0) + (_ns(s.b_head) if r == last else 0)
        opt = layers * s.opt_layer + (s.opt_emb if emb else 0) + (s.opt_head if hd else 0)
        post = s.post[0] + layers * s.post[1] + (s.post[2] if emb else 0) + (s.post[3] if hd else 0) if has_post else 0
        end = max(0, sync - overlap) + opt + post
        best = end if best is None else max(best, end)
    return best


def greedy_cut(cc: ClassCosts) -> list[int]:
    """A balanced cut: add layers one by one to the chunk whose F+B stays smallest (memory permitting)."""
    C, L = cc.chunks, cc.num_layers
    n = [1] * C
    heap = [((2) * (cc.f_layer + cc.b_layer) + cc.f_extra[c] + cc.b_extra[c], c) for c in range(C)]
    heapq.heapify(heap)
    left = L - C
    blocked: list[tuple[int, int]] = []
    while left > 0 and heap:
        t, c = heapq.heappop(heap)
        n[c] += 1
        if rank_memory(cc, n, cc.chunk_rank[c]) > cc.usable_bytes:
            n[c] -= 1
            blocked.append((t, c))
            continue
        left -= 1
        heapq.heappush(heap, (t + cc.f_layer + cc.b_layer, c))
    if left > 0:  # memory could not take them: place the rest evenly anyway (infeasible hint)
        for t, c in sorted(blocked):
            if left == 0:
                break
            n[c] += 1
            left -= 1
        i = 0
        while left > 0:
            n[i % C] += 1
            left -= 1
            i += 1
    return n


# ---------------------------------------------------------------------------------------------
# Exact stage cut of one class with CP-SAT


@dataclass
class ClassResult:
    cand: Candidate
    stage_layers: list[int] | None
    evaluation: Evaluation | None
    status: str  # OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN, or PRUNED (proven no better than the incumbent)
    bound: int
    iterations: int
    wall_s: float


def _chain_cut(cc: ClassCosts, path: list[tuple[str, int, int]], lags: list[int]) -> tuple[list[int], int]:
    """Coefficients (per chunk) and constant of a chain's length as a function of the layer counts."""
    coef = [0] * cc.chunks
    const = 0
    for kind, _, ch in path:
        if kind == "F":
            coef[ch] += cc.f_layer
            const += cc.f_extra[ch]
        else:
            coef[ch] += cc.b_layer
            const += cc.b_extra[ch]
    const += sum(cc.lag[b] for b in lags)
    return coef, const


def _initial_chains(cc: ClassCosts) -> list[tuple[list[int], int]]:
    """Per rank i: F(0) through chunks before i, every op of rank i, B(m-1) back through them."""
    c = cc.cand
    orders = rank_orders(c.schedule, c.pp, c.virtual_stages, cc.m)
    cuts = []
    for i in range(c.pp):
        path = [("F", 0, ch) for ch in range(i)] + list(orders[i]) + [("B", cc.m - 1, ch) for ch in range(i - 1, -1, -1)]
        lags = list(range(i)) * 2
        lags = [b for b in lags if cc.chunk_rank[b] != cc.chunk_rank[b + 1]]
        cuts.append(_chain_cut(cc, path, lags))
    if c.schedule == "1f1b" and c.virtual_stages == 1 and c.pp > 1:
        # The shape simulations show: micro-batch 0 forward through every stage and backward down to
        # stage k, then stage k's remaining operations (its steady state), then B(m-1) down to 0.
        p = c.pp
        for k in range(p):
            ops = list(orders[k])
            start = ops.index(("B", 0, k))
            path = [("F", 0, ch) for ch in range(p)] + [("B", 0, ch) for ch in range(p - 1, k, -1)] + ops[start:] \
                + [("B", cc.m - 1, ch) for ch in range(k - 1, -1, -1)]
            lags = list(range(p - 1)) + list(range(k, p - 1)) + list(range(k))
            cuts.append(_chain_cut(cc, path, lags))
    return cuts


def local_search(cc: ClassCosts, start: list[int], max_evals: int = 60, deadline: float | None = None) -> tuple[list[int], Evaluation, list[tuple[list[int], int]]]:
    """Hill-climb over single-layer moves between chunks, scored by the exact objective (simulation);
    returns the best fitting cut found and the critical-path cuts of every simulated cut."""
    cuts: dict[tuple, tuple[list[int], int]] = {}

    def score(n: list[int]) -> tuple[int, Evaluation]:
        ev = evaluate(cc, n)
        coef, const = _chain_cut(cc, ev.sim.critical_path, ev.sim.critical_lags)
        cuts[(tuple(coef), const)] = (coef, const)
        return (ev.objective_ns if ev.fits else ev.objective_ns + (1 << 50)), ev

    best_n = list(start)
    best_s, best_ev = score(best_n)
    evals = 1
    max_evals = min(max_evals, max(1, 200_000 // (2 * cc.m * cc.chunks)))  # ~0.5 s of simulation at most
    improved = True
    while improved and evals < max_evals:
        improved = False
        for a in range(cc.chunks):
            for b in range(cc.chunks):
                if a == b or best_n[a] <= 1:
                    continue
                if deadline is not None and time.perf_counter() >= deadline:
                    return best_n, best_ev, list(cuts.values())
                n = list(best_n)
                n[a] -= 1
                n[b] += 1
                sc, ev = score(n)
                evals += 1
                if sc < best_s:
                    best_n, best_s, best_ev, improved = n, sc, ev, True
                    break
            if improved or evals >= max_evals:
                break
    return best_n, best_ev, list(cuts.values())


def solve_class(cc: ClassCosts, options: SearchOptions, fixed: list[int] | None = None, incumbent: int | None = None,
                deadline: float | None = None) -> ClassResult:
    t0 = time.perf_counter()
    deadline = deadline if deadline is not None else t0 + options.time_limit_s
    c, C, L = cc.cand, cc.chunks, cc.num_layers
    if fixed is not None:
        ev = evaluate(cc, fixed)
        return ClassResult(c, fixed, ev, "OPTIMAL" if ev.fits else "INFEASIBLE", ev.objective_ns, 0, time.perf_counter() - t0)
    if C > L or not may_fit(cc):
        return ClassResult(c, None, None, "INFEASIBLE", 0, 0, time.perf_counter() - t0)

    model = cp_model.CpModel()
    n = [model.new_int_var(1, L - C + 1, f"n{ch}") for ch in range(C)]
    model.add(sum(n) == L)
    horizon = 1 << 50  # ns, ~13 days: far above any step
    M = model.new_int_var(0, horizon, "makespan")
    D = model.new_int_var(0, horizon, "end")
    for r in range(c.pp):
        own = cc.rank_chunks(r)
        layers = sum(n[ch] for ch in own)
        opt = layers * cc.opt_layer + sum(cc.opt_extra[ch] for ch in own)
        has_post = c.dp > 1 and cc.post_layer + cc.post_const > 0
        post = (cc.post_const + layers * cc.post_layer + sum(cc.post_extra[ch] for ch in own)) if has_post else 0
        model.add(D >= opt + post)
        if c.dp > 1:
            sync = cc.sync_const + layers * cc.sync_layer + sum(cc.sync_extra[ch] for ch in own)
            overlap = n[r] * cc.b_layer + cc.b_extra[r]
            model.add(D >= sync - overlap + opt + post)
        # Memory at every activation peak of the rank's schedule.
        states = sum(n[ch] * cc.state_layer + cc.state_extra[ch] for ch in own)
        for vec in cc.live[r]:
            acts = sum(k * (n[ch] * cc.act_layer + cc.act_extra[ch]) for ch, k in vec.items())
            model.add(states + acts + cc.buffer_const[r] <= cc.usable_bytes)
    if c.schedule == "gpipe":
        mf = model.new_int_var(0, horizon, "max_f")
        mb = model.new_int_var(0, horizon, "max_b")
        for ch in range(C):
            model.add(mf >= n[ch] * cc.f_layer + cc.f_extra[ch])
            model.add(mb >= n[ch] * cc.b_layer + cc.b_extra[ch])
        const = sum(cc.f_extra) + sum(cc.b_extra) + 2 * sum(cc.lag) + L * (cc.f_layer + cc.b_layer)
        model.add(M >= const + (cc.m - 1) * (mf + mb))
    for coef, const in _initial_chains(cc):
        model.add(M >= sum(k * x for k, x in zip(coef, n) if k) + const)
    model.minimize(M + D)
    if c.virtual_stages > 1 and incumbent is None:  # no plan yet: a good one early prunes the rest
        hint, hint_ev, seeds = local_search(cc, greedy_cut(cc), deadline=deadline)
    else:  # refine by cuts only
        hint = greedy_cut(cc)
        hint_ev = evaluate(cc, hint)
        seeds = [_chain_cut(cc, hint_ev.sim.critical_path, hint_ev.sim.critical_lags)]
    # Cutoffs (valid): the class optimum is no worse than its hint; a class that cannot beat the
    # k-th best plan found so far is of no interest. Both shrink CP-SAT's domains a lot.
    cutoff = hint_ev.objective_ns if hint_ev.fits else None
    if incumbent is not None:
        cutoff = incumbent - 1 if cutoff is None else min(cutoff, incumbent - 1)
    if cutoff is not None:
        model.add(M + D <= cutoff)
    if c.schedule != "gpipe":
        for coef, const in seeds:
            model.add(M >= sum(k * x for k, x in zip(coef, n) if k) + const)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = options.num_workers
    # Presolve buys nothing on these small models and costs tens of ms per solve (measured).
    solver.parameters.cp_model_presolve = False
    iterations = 0
    best: tuple[list[int], Evaluation] | None = (hint, hint_ev) if hint_ev is not None and hint_ev.fits else None
    status_name = "UNKNOWN"
    bound = 0
    while True:
        iterations += 1
        left = deadline - time.perf_counter()
        if left <= 0:
            break
        solver.parameters.max_time_in_seconds = left
        model.clear_hints()
        for x, h in zip(n, best[0] if best else hint):
            model.add_hint(x, h)
        st = solver.solve(model)
        status_name = solver.status_name(st)
        if st == cp_model.INFEASIBLE:
            if incumbent is not None and cutoff == incumbent - 1:  # cannot beat the k-th best plan
                return ClassResult(c, None, None, "PRUNED", incumbent, iterations, time.perf_counter() - t0)
            if best is not None:  # nothing at or below the hint's objective but the hint: optimal
                return ClassResult(c, best[0], best[1], "OPTIMAL", best[1].objective_ns, iterations, time.perf_counter() - t0)
            return ClassResult(c, None, None, "INFEASIBLE", 0, iterations, time.perf_counter() - t0)
        if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        bound = max(bound, int(solver.best_objective_bound))
        if incumbent is not None and bound >= incumbent and (best is None or best[1].objective_ns >= incumbent):
            # Proven unable to beat the plans already found: no need to simulate.
            return ClassResult(c, None, None, "PRUNED", bound, iterations, time.perf_counter() - t0)
        sol = [solver.value(x) for x in n]
        ev = evaluate(cc, sol)
        if best is None or ev.objective_ns < best[1].objective_ns:
            best = (sol, ev)
        if st == cp_model.OPTIMAL and ev.makespan_ns <= solver.value(M):
            bound = ev.objective_ns
            break
        if st != cp_model.OPTIMAL:
            break
        if incumbent is not None and bound >= incumbent:
            break  # cannot beat the plans already found: stop refining
        # Add the critical path of the solution and of its one-layer neighbours (fewer rounds).
        new_cuts = {tuple(_chain_cut(cc, ev.sim.critical_path, ev.sim.critical_lags)[0]): _chain_cut(cc, ev.sim.critical_path, ev.sim.critical_lags)}
        affordable = 4 * C * cc.m * C <= 100_000  # neighbour simulations cost ~2·m·C steps each
        for b in range(C - 1 if affordable else 0):
            for a, z in ((b, b + 1), (b + 1, b)):
                if sol[a] > 1 and time.perf_counter() < deadline:
                    nb = list(sol)
                    nb[a] -= 1
                    nb[z] += 1
                    nev = evaluate(cc, nb)
                    if nev.fits and nev.objective_ns < best[1].objective_ns:
                        best = (nb, nev)
                    cut = _chain_cut(cc, nev.sim.critical_path, nev.sim.critical_lags)
                    new_cuts[(tuple(cut[0]), cut[1])] = cut
        for coef, const in new_cuts.values():
            model.add(M >= sum(k * x for k, x in zip(coef, n) if k) + const)
    if best is None:
        return ClassResult(c, None, None, "UNKNOWN", bound, iterations, time.perf_counter() - t0)
    proven = best[1].objective_ns <= bound
    return ClassResult(c, best[0], best[1], "OPTIMAL" if proven else "FEASIBLE", bound, iterations, time.perf_counter() - t0)


# ---------------------------------------------------------------------------------------------
# Best-first over classes


@dataclass
class SearchResult:
    results: list[ClassResult]  # best first, feasible, at most top_k
    status: str
    objective_ns: int | None
    bound_ns: int | None
    wall_s: float
    classes: int
    classes_solved: int
    cp_sat_solves: int
    notes: list[str] = field(default_factory=list)
    #: the class with the smallest memory need, when nothing fits (cand, GiB needed per GPU)
    min_memory: tuple[Candidate, float] | None = None
    #: the class with the best bound that memory ruled out (cand, bound ns), if any
    memory_blocked: tuple[Candidate, int] | None = None


def simplicity(c: Candidate) -> tuple:
    """Tie-break between equally fast plans: prefer the simpler one (less recomputation, lower ZeRO
    stage, plainer schedule, fewer pipeline stages, smaller TP)."""
    return (RECOMPUTE.index(c.recompute), c.zero_stage, SEARCHED_SCHEDULES.index(c.schedule) if c.schedule != "1f1b" else -1,
            c.virtual_stages, c.pp, c.tp, c.sequence_parallel, -c.micro_batch_size, c)


def search(ctx: Context, pins: ParallelPins, options: SearchOptions, top_k: int = 3) -> SearchResult:
    t0 = time.perf_counter()
    cands = enumerate_candidates(ctx, pins, options)
    # Best-first on a cheap valid lower bound: a class is costed (ClassCosts, memory screen, exact
    # bound) only when its quick bound can still beat the k-th best plan, and solved only when its
    # exact bound can too. The first class whose quick bound cannot ends the search: every later one
    # is bounded out. Ties are visited simplest first (the tie-break of the results).
    # Classes with one allowed cut (interleaved's uniform split) are re-keyed by that cut's bound
    # (``cut_bound``, tighter) when they reach the front of the queue, and pushed back (lazy: only
    # the classes that get near the front pay for it).
    memo: dict[tuple, int] = {}  # the interleaved quick bound does not depend on v: share it

    def qbound(c: Candidate) -> int:
        if c.virtual_stages == 1:
            return quick_bound(ctx, c)
        k = (c.tp, c.pp, c.dp, c.micro_batch_size, c.recompute, c.sequence_parallel, c.zero_stage)
        if k not in memo:
            memo[k] = quick_bound(ctx, c)
        return memo[k]

    heap = [(qbound(c), simplicity(c), c.virtual_stages == 1 or forced_cut(ctx, pins, c) is None) for c in cands]
    heapq.heapify(heap)

    def next_class() -> tuple[int, tuple] | None:
        while heap:
            qb, key, final = heapq.heappop(heap)
            if final:
                return qb, key
            cand = key[-1]
            heapq.heappush(heap, (max(qb, cut_bound(ctx, cand, forced_cut(ctx, pins, cand))), key, True))
        return None

    found: list[ClassResult] = []
    costed = pruned_memory = solved = simulated = solves = 0
    blocked: tuple[Candidate, int] | None = None
    all_proven = True
    open_bound: int | None = None  # smallest bound among classes left unproven (time limit)
    rest: list[tuple[int, tuple]] = []  # classes not reached before the time limit
    unsolved: list[tuple[int, tuple]] = []  # classes the time limit cut short without a plan
    deadline = t0 + options.time_limit_s

    def leave_open(b: int) -> None:
        nonlocal all_proven, open_bound
        all_proven = False
        open_bound = b if open_bound is None else min(open_bound, b)

    while (item := next_class()) is not None:
        qb, key = item
        cand = key[-1]
        kth = found[top_k - 1].evaluation.objective_ns if len(found) >= top_k else None
        if kth is not None and qb >= kth:
            break
        if time.perf_counter() >= deadline:
            rest = [(qb, key)] + sorted((b, k) for b, k, _ in heap)
            leave_open(qb)
            break
        if pins.stage_layers is None and not quick_may_fit(ctx, cand, forced_cut(ctx, pins, cand)):
            pruned_memory += 1
            if blocked is None or qb < blocked[1]:
                blocked = (cand, qb)
            continue
        cc = class_costs(ctx, cand)
        costed += 1
        lb = class_bound(cc)
        fixed = forced_cut(ctx, pins, cand)
        # Memory screen before any simulation: exact for a forced uniform cut, a bound otherwise.
        if pins.stage_layers is None and not (may_fit(cc) if fixed is None else
                                              max(rank_memory(cc, fixed, r) for r in range(cand.pp)) <= cc.usable_bytes):
            pruned_memory += 1
            if blocked is None or lb < blocked[1]:
                blocked = (cand, lb)
            continue
        if kth is not None and lb >= kth:
            continue
        res = solve_class(cc, options, fixed=fixed, incumbent=kth, deadline=deadline)
        if fixed is None:
            solved += 1
        else:
            simulated += 1
        solves += res.iterations
        if res.status == "PRUNED":
            continue
        if res.evaluation is None or not res.evaluation.fits:
            if res.status != "INFEASIBLE":
                leave_open(lb)
                unsolved.append((lb, key))
            elif blocked is None or lb < blocked[1]:
                blocked = (cand, lb)
            continue
        if res.status != "OPTIMAL" and (kth is None or res.bound < kth):
            leave_open(res.bound)
        found.append(res)
        found.sort(key=lambda r: (r.evaluation.objective_ns, simplicity(r.cand)))
        del found[top_k:]
    if not found and not all_proven:
        found = _fallback(ctx, unsolved + rest, top_k, pins)
    wall = time.perf_counter() - t0
    notes = [f"{len(cands)} configuration classes (every stage cut of each), {costed} costed (the rest bounded out), "
             f"{pruned_memory} ruled out by memory bounds, {solved} solved with CP-SAT ({solves} solves), "
             f"{simulated} simulated at their one allowed cut (pinned, or interleaved's uniform split)"]
    if not found:
        return SearchResult([], "INFEASIBLE" if all_proven else "UNKNOWN", None, None, wall, len(cands), solved, solves, notes,
                            min_memory=_min_memory(ctx, cands, pins) if all_proven else None)
    best = found[0].evaluation.objective_ns
    if not all_proven:
        notes.append(f"time limit ({options.time_limit_s:g} s) reached before the proof completed; the bound is the smallest open lower bound")
    bound = best if all_proven else min(best, open_bound if open_bound is not None else best)
    return SearchResult(found, "OPTIMAL" if all_proven else "FEASIBLE", best, bound,
                        wall, len(cands), solved, solves, notes, memory_blocked=blocked)


def _fallback(ctx: Context, rest: list[tuple[int, tuple]], top_k: int, pins: ParallelPins,
              max_classes: int = 64) -> list[ClassResult]:
    """When the time limit ran out before any class was solved: the best-bound classes not reached,
    each with its balanced (greedy) cut scored by the simulation — valid FEASIBLE plans. (The
    reported bound is already the smallest open lower bound.)"""
    found: list[ClassResult] = []
    tried = 0
    for qb, key in rest:
        if tried >= max_classes or len(found) >= top_k:
            break
        fixed = forced_cut(ctx, pins, key[-1])
        if pins.stage_layers is None and not quick_may_fit(ctx, key[-1], fixed):
            continue
        cc = class_costs(ctx, key[-1])
        if fixed is None and not may_fit(cc):
            continue
        if pins.stage_layers is None and fixed is not None and \
                max(rank_memory(cc, fixed, r) for r in range(cc.cand.pp)) > cc.usable_bytes:
            continue
        tried += 1
        n = fixed if fixed is not None else greedy_cut(cc)
        ev = evaluate(cc, n)
        if ev.fits:
            found.append(ClassResult(cc.cand, n, ev, "FEASIBLE", qb, 0, 0.0))
    found.sort(key=lambda r: (r.evaluation.objective_ns, simplicity(r.cand)))
    return found


def _min_memory(ctx: Context, cands: list[Candidate], pins: ParallelPins | None = None) -> tuple[Candidate, float] | None:
    """The class and balanced cut needing the least memory per GPU (GiB, with the reserve)."""
    from planner.cost import FIXED_RESERVE_BYTES, FRAGMENTATION, GIB

    best: tuple[Candidate, float] | None = None
    for cand in cands:
        cc = class_costs(ctx, cand)
        if cc.chunks > cc.num_layers:
            continue
        n = forced_cut(ctx, pins, cand) if pins is not None else None
        if n is None:
            n = _balanced_memory_cut(cc) if cc.chunks * cc.num_layers <= 2_000 else even_stage_layers(cc.num_layers, cc.chunks)
        need = max(rank_memory(cc, n, r) for r in range(cand.pp))
        gib = (need * (1 + FRAGMENTATION) + FIXED_RESERVE_BYTES) / GIB
        if best is None or gib < best[1]:
            best = (cand, gib)
    return best


def _balanced_memory_cut(cc: ClassCosts) -> list[int]:
    C, L = cc.chunks, cc.num_layers
    n = [1] * C
    for _ in range(L - C):
        best_c, best_v = 0, None
        for ch in range(C):
            n[ch] += 1
            val = rank_memory(cc, n, cc.chunk_rank[ch])
            n[ch] -= 1
            if best_v is None or val < best_v:
                best_c, best_v = ch, val
        n[best_c] += 1
    return n


def rank_end_breakdown(cc: ClassCosts, n: list[int], r: int) -> tuple[int, int]:
    """(exposed DP sync incl. ZeRO parameter all-gather, optimizer) of rank r, ns."""
    sync, overlap, opt, post = rank_end_terms(cc, n, r)
    return max(0, sync - overlap) + post, opt
