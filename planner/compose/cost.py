"""The cost model of one configuration class: its integer coefficients (``ClassCosts``) and the exact
objective of a complete configuration (class + stage cut, ``evaluate``).

A *class* (``Candidate``) fixes everything but the stage cut: tp, pp, dp, micro-batch size, schedule, virtual stages,
recomputation, sequence parallelism and ZeRO stage. Given the class, every quantity the objective needs is an integer
affine function of the layer counts ``n_c`` of the chunks, built by one function each from the class's
``terms.SharedTerms``: chunk times (``chunk_times``), a rank's end of step (``step_end.end_terms``) and its memory
(``memory.memory_terms``). The simulation (``evaluate``), the brute force, the bounds and the CP-SAT model consume those
very functions: times in nanoseconds, memory in bytes. Per-layer compute is ``planner.pricing.layer_times``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from functools import cached_property
from itertools import pairwise
from operator import attrgetter

from planner.compose.affine import NOTHING, Affine, moe_counts
from planner.compose.context import Context
from planner.compose.context_parallel import class_terms
from planner.compose.grad_peaks import Done, live_and_done, schedule_peaks
from planner.compose.memory import rank_memory
from planner.compose.pp_kept import kept_outputs
from planner.compose.pp_order import peak_schedule
from planner.compose.simulate import SimResult, chunk_ranks, simulate
from planner.compose.step_end import EndTerms, end_terms, rank_end
from planner.compose.terms import SharedTerms, ns
from planner.pricing.collectives import p2p, tp_collective
from planner.pricing.comm import boundary_crosses_nodes
from planner.specs import config

__all__ = [
    "Candidate",
    "ClassCosts",
    "Context",
    "Evaluation",
    "Live",
    "boundary_lags",
    "class_costs",
    "evaluate",
    "live_vectors",
    "live_vectors_cached",
    "num_microbatches",
    "rank_end_terms",
    "rank_memory",
]


@dataclass(frozen=True, order=True)
class Candidate:
    """A configuration class: a complete ParallelConfig minus ``stage_layers`` (the fields of
    ``planner.specs.config.FIELDS``, checked below). A plain frozen dataclass: hashed and sorted in the search."""

    tp: int
    pp: int
    dp: int
    #: context parallelism (keyword-only, default none: a class is written positionally without them)
    cp: int = field(default=1, kw_only=True)
    cp_comm: str = field(default="p2p", kw_only=True)
    micro_batch_size: int
    schedule: str
    virtual_stages: int
    recompute: str
    sequence_parallel: bool
    zero_stage: int
    tp_comm_overlap: bool = False
    #: expert parallelism of a MoE model's routed experts (keyword-only, default none, like cp)
    ep: int = field(default=1, kw_only=True)
    etp: int = field(default=1, kw_only=True)

    def __hash__(self) -> int:
        """The dataclass's hash (of the fields in order), kept after the first ask: the search hashes each class many
        times (its memos, sets and queues). ``variant`` and ``family`` drop it from their copies."""
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(_FIELDS(self))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict:
        """Pickled without the kept hash (a string's hash differs between processes)."""
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @property
    def chunks(self) -> int:
        return self.pp * self.virtual_stages

    def describe(self) -> str:
        return config.describe(self)

    def variant(self, **changes: object) -> Candidate:
        """``replace(self, **changes)`` without the frozen ``__init__``, as ``family`` copies (``changes``: fields of
        the same types, not checked)."""
        d = self.__dict__ | changes  # a dict's copy: ~3× faster than ``update`` of an empty instance dict
        d.pop("_hash", None)
        c = object.__new__(Candidate)
        _SET(c, "__dict__", d)
        return c

    def family(self, pairs: Sequence[tuple[int, int]]) -> list[Candidate]:
        """The class at each (ep, etp) of ``pairs``, its other fields this one's: the search enumerates 21,036 of
        them on DeepSeek-V3, so the copies are made without the frozen ``__init__`` (one ``object.__setattr__`` a
        field) — equal, hashed and ordered as ``replace(self, ep=ep, etp=etp)`` (``tests/test_planner_core.py``)."""
        new, set_, fields_ = object.__new__, _SET, self.__dict__
        if "_hash" in fields_:  # its kept hash is not the copies'
            fields_ = {k: x for k, x in fields_.items() if k != "_hash"}
        out = []
        for ep, etp in pairs:
            if ep == self.ep and etp == self.etp:
                out.append(self)  # a dense model's one pair: the class itself
                continue
            d = fields_.copy()  # the fields in their order, as ``update`` of an empty instance dict, ~3× faster
            d["ep"], d["etp"] = ep, etp
            c = new(Candidate)
            set_(c, "__dict__", d)
            out.append(c)
        return out


#: ``object.__setattr__``: a copy's ``__dict__`` set past the frozen ``__setattr__`` (``Candidate.variant``, ``family``)
_SET = object.__setattr__
config.check_fields(Candidate, class_only=True)
#: ``Candidate``'s fields in order, as a tuple: what its dataclass ``__hash__`` would hash
_FIELDS = attrgetter(*(f.name for f in fields(Candidate)))


@dataclass
class ClassCosts:
    """One class's integer coefficients. Chunk c's forward per micro-batch is ``n_c·f_layer +
    f_extra[c]`` ns (the embedding on chunk 0, the LM head on the last), likewise backward;
    end-of-step and memory terms come from ``shared`` through ``step_end.end_terms`` and
    ``memory.memory_terms``."""

    cand: Candidate
    shared: SharedTerms
    m: int
    num_layers: int
    chunk_rank: list[int]
    f_layer: int
    b_layer: int
    f_extra: list[int]
    b_extra: list[int]
    lag: list[int]  # p2p delay of each chunk boundary c → c+1
    # blocking pipeline sends within ``f_extra``/``b_extra`` (``Stack.p2p_blocking``; the breakdown's p2p)
    f_extra_pp: list[int]
    b_extra_pp: list[int]
    # The TP-communication part of the above, for the breakdown
    f_layer_tp: int
    b_layer_tp: int
    f_extra_tp: list[int]
    b_extra_tp: list[int]
    # The exposed ZeRO-3 gathers/reduce-scatters within the above (data-parallel communication, for the breakdown)
    f_layer_z3: int
    b_layer_z3: int
    f_extra_z3: list[int]
    b_extra_z3: list[int]
    #: per rank: its activation peaks, each the (chunk, copies alive) pairs (``live_vectors_cached``)
    live: Live
    usable_bytes: int
    flops_layer: float  # model FLOPs (fwd+bwd incl. recompute) per layer per micro-batch, per GPU
    flops_extra: list[float]
    # The exposed context-parallel exchange within ``f_layer``/``b_layer`` (for the breakdown)
    f_layer_cp: int = 0
    b_layer_cp: int = 0
    # The EP all-to-all part of f_layer/b_layer (MoE blocks; for the breakdown)
    f_layer_ep: int = 0
    b_layer_ep: int = 0
    #: A model of dense and MoE blocks (``terms.block_sequence``): what a MoE layer adds to each ``*_layer``
    #: coefficient above (a chunk's forward is ``n_c·f_layer + k_c·f_moe + f_extra[c]`` with k_c its MoE
    #: layers, ``moe_counts``); all 0 for a model of one block kind
    f_moe: int = 0
    b_moe: int = 0
    f_moe_tp: int = 0
    b_moe_tp: int = 0
    f_moe_z3: int = 0
    b_moe_z3: int = 0
    f_moe_cp: int = 0
    b_moe_cp: int = 0
    f_moe_ep: int = 0
    b_moe_ep: int = 0
    #: per rank, aligned with ``live``: the chunks whose gradients exist at each peak (``grad_peaks.live_and_done``);
    #: None where the gradients are held throughout (``SharedTerms.grads`` NOTHING)
    done: Done | None = None
    kept: tuple[int, ...] = ()  # per rank, what the pipeline runtime keeps of every micro-batch (``pp_kept``)

    @property
    def moe_prefix(self) -> tuple[int, ...] | None:
        """MoE layers among the first i layers (``affine.moe_prefix``); None for a model of one block kind."""
        return self.shared.moe_prefix

    def moe_counts(self, n: Sequence[int]) -> list[int] | None:
        """Each chunk's MoE layers at the cut ``n`` (None for a model of one block kind)."""
        return moe_counts(self.shared.moe_prefix, n)

    @property
    def chunks(self) -> int:
        return len(self.chunk_rank)

    def rank_chunks(self, r: int) -> list[int]:
        return self.ranks[r]

    @cached_property
    def evaluations(self) -> dict[tuple[int, ...], Evaluation]:
        """``evaluate``'s results (without timeline) by cut: the search and the answer's explanation ask some cuts of
        a class again (read only)."""
        return {}

    @cached_property
    def ranks(self) -> list[list[int]]:
        """Per pipeline rank, its chunks (rank r holds chunks r, r + pp, r + 2·pp, …)."""
        return [list(range(r, self.chunks, self.cand.pp)) for r in range(self.cand.pp)]


#: Per rank, the activation peaks of its schedule, each as (chunk, copies alive) pairs.
Live = tuple[tuple[tuple[tuple[int, int], ...], ...], ...]


def live_vectors_cached(schedule: str, pp: int, v: int, m: int) -> Live:
    """Per rank, the activation peaks of its order (``grad_peaks.schedule_peaks``, memoised there)."""
    return schedule_peaks(schedule, pp, v, m, False)[0]


def class_peaks(s: SharedTerms, c: Candidate, m: int) -> tuple[Live, Done | None]:
    """The activation peaks of the class's order as its stack runs it (``pp_order.peak_schedule``) and, where its
    gradients exist only from a chunk's first backward on (``SharedTerms.grads``), the chunks done at each."""
    if s.grads == NOTHING:
        return live_vectors_cached(peak_schedule(s, c), c.pp, c.virtual_stages, m), None
    return live_and_done(peak_schedule(s, c), c.pp, c.virtual_stages, m)


def live_vectors(schedule: str, pp: int, v: int, m: int) -> list[list[dict[int, int]]]:
    """Per rank, the non-dominated sets {chunk: activation copies alive} at the peaks of its order."""
    return [[dict(p) for p in rank] for rank in live_vectors_cached(schedule, pp, v, m)]


def boundary_lags(ctx: Context, c: Candidate, p2p_bytes: int) -> list[int]:
    """The p2p delay of every chunk boundary c → c+1, ns: 0 on one rank, else one send of
    ``p2p_bytes`` over NVLink or, when some rank pair of the boundary sits on two nodes, the network.
    On a stack that scatters its sends (``Stack.p2p_scatter_gather``: Megatron-LM v2.5
    ``megatron/p2p_communication.py``), with tp > 1 and no SP (with SP the tensor is already split), each TP rank
    sends its 1/tp of the tensor over its own link (``split_tensor_into_1d_equal_chunks``) and the receiving stage
    all-gathers the tensor over its TP group before using it (``gather_split_1d_tensor``): the send of
    ``p2p_bytes / tp`` + the TP all-gather of ``p2p_bytes``. (Shared between calls: read only.)"""
    sg = c.tp if ctx.stack.p2p_scatter_gather and c.tp > 1 and not c.sequence_parallel else 1
    key = (c.dp * c.cp * c.tp, c.pp, c.virtual_stages, p2p_bytes, sg)
    lags = ctx.lags.get(key)
    if lags is None:
        where, g, block = chunk_ranks(c.pp, c.virtual_stages), ctx.cluster.gpus_per_node, c.dp * c.cp * c.tp
        gather = tp_collective(ctx, "all_gather", p2p_bytes, sg) if sg > 1 else 0.0
        # on a host as the run measured it (``pricing.collectives``)
        t_intra = ns(p2p(ctx, p2p_bytes // sg, "intra_node") + gather)
        t_inter = ns(p2p(ctx, p2p_bytes // sg, "inter_node") + gather)
        lags = ctx.lags[key] = [
            0 if i == j else (t_inter if boundary_crosses_nodes(g, block, i, j) else t_intra)
            for i, j in pairwise(where)
        ]
    return lags


def num_microbatches(ctx: Context, c: Candidate) -> int:
    return ctx.training.global_batch_size // (c.dp * c.micro_batch_size)


def class_costs(ctx: Context, c: Candidate) -> ClassCosts:
    """Build (and cache) the integer cost coefficients of one class from its shared terms."""
    cc = ctx.classes.get(c)
    if cc is None:
        cc = ctx.classes[c] = _class_costs(ctx, c)
    return cc


def _class_costs(ctx: Context, c: Candidate) -> ClassCosts:
    s = class_terms(ctx, c)
    m = num_microbatches(ctx, c)
    last = c.chunks - 1

    def per_chunk(a: tuple[float, float]) -> list[float]:  # (embedding, LM head) extras on chunks 0 and last
        out = [0.0] * c.chunks
        out[0] += a[0]
        out[last] += a[1]
        return out

    def extras(a: Affine) -> list[int]:
        return a.per_chunk([0] * c.chunks)

    lag = list(boundary_lags(ctx, c, s.p2p_bytes))
    f_pp, b_pp = [0] * c.chunks, [0] * c.chunks
    if c.schedule in ctx.stack.p2p_blocking:
        # each forward ends with its send to the next chunk, each backward with its send to the previous one,
        # both ends waiting for the transfer (the stack synchronises on it): on the action, no lag after it. A
        # scattered send's TP all-gather is the receiver's, priced on the sender's action: each rank gathers as many
        # tensors as it sends (one forward and one backward per micro-batch), and the receiver waits for it either way
        f_pp, b_pp, lag = lag + [0], [0] + lag, [0] * len(lag)
    f_extra = [a + b for a, b in zip(extras(s.fwd), f_pp)]
    b_extra = [a + b for a, b in zip(extras(s.bwd), b_pp)]
    live, done = class_peaks(s, c, m)

    return ClassCosts(
        cand=c,
        shared=s,
        m=m,
        num_layers=ctx.model.num_layers,
        chunk_rank=chunk_ranks(c.pp, c.virtual_stages),
        f_layer=s.fwd.layer,
        b_layer=s.bwd.layer,
        f_extra=f_extra,
        b_extra=b_extra,
        lag=lag,
        f_extra_pp=f_pp,
        b_extra_pp=b_pp,
        f_layer_tp=s.fwd_tp.layer,
        b_layer_tp=s.bwd_tp.layer,
        f_extra_tp=extras(s.fwd_tp),
        b_extra_tp=extras(s.bwd_tp),
        f_layer_z3=s.fwd_z3.layer,
        b_layer_z3=s.bwd_z3.layer,
        f_extra_z3=extras(s.fwd_z3),
        b_extra_z3=extras(s.bwd_z3),
        live=live,
        done=done,
        usable_bytes=ctx.usable_bytes,
        flops_layer=s.flops_layer,
        flops_extra=per_chunk((s.flops_emb, s.flops_head)),
        f_layer_cp=s.fwd_cp.layer,
        b_layer_cp=s.bwd_cp.layer,
        f_layer_ep=s.fwd_ep.layer,
        b_layer_ep=s.bwd_ep.layer,
        f_moe=s.fwd.moe,
        b_moe=s.bwd.moe,
        f_moe_tp=s.fwd_tp.moe,
        b_moe_tp=s.bwd_tp.moe,
        f_moe_z3=s.fwd_z3.moe,
        b_moe_z3=s.bwd_z3.moe,
        f_moe_cp=s.fwd_cp.moe,
        b_moe_cp=s.bwd_cp.moe,
        f_moe_ep=s.fwd_ep.moe,
        b_moe_ep=s.bwd_ep.moe,
        kept=kept_outputs(ctx, c, s, m),
    )


# ---------------------------------------------------------------------------------------------
# Exact evaluation of a complete configuration


@dataclass
class Evaluation:
    objective_ns: int  # step time
    makespan_ns: int
    end_ns: int  # max over ranks of exposed DP sync + optimizer (+ ZeRO-1/2 parameter all-gather)
    end_rank: int
    memory_bytes: list[int]  # per pipeline rank
    fits: bool
    sim: SimResult

    @property
    def peak_memory_bytes(self) -> int:
        return max(self.memory_bytes)


def chunk_times(cc: ClassCosts, n: Sequence[int], k: Sequence[int] | None = None) -> tuple[list[int], list[int]]:
    """Each chunk's forward and backward per micro-batch at the cut ``n`` (``k``: each chunk's MoE layers,
    counted on the layer sequence when None)."""
    fwd = [n[c] * cc.f_layer + cc.f_extra[c] for c in range(cc.chunks)]
    bwd = [n[c] * cc.b_layer + cc.b_extra[c] for c in range(cc.chunks)]
    k = k if k is not None else cc.moe_counts(n)
    if k is not None:
        fwd = [t + x * cc.f_moe for t, x in zip(fwd, k)]
        bwd = [t + x * cc.b_moe for t, x in zip(bwd, k)]
    return fwd, bwd


def rank_end_terms(cc: ClassCosts, n: Sequence[int], r: int, k: Sequence[int] | None = None) -> EndTerms[int]:
    """(sync, overlap, optimizer, post) of pipeline rank r, ns."""
    return end_terms(cc.shared, cc.cand, n, r, k)


def evaluate(cc: ClassCosts, n: Sequence[int], record: bool = False) -> Evaluation:
    """The exact objective of class + cut: simulated makespan + the slowest rank's end of step (memoised by cut
    without ``record``: ``ClassCosts.evaluations``)."""
    if record:
        return _evaluate(cc, n, True)
    hit = cc.evaluations.get(key := tuple(n))
    if hit is None:
        hit = cc.evaluations[key] = _evaluate(cc, n, False)
    return hit


def _evaluate(cc: ClassCosts, n: Sequence[int], record: bool) -> Evaluation:
    k = cc.moe_counts(n)
    fwd, bwd = chunk_times(cc, n, k)
    c = cc.cand
    sim = simulate(c.schedule, c.pp, c.virtual_stages, cc.m, fwd, bwd, cc.lag, record=record)
    ends = [rank_end(rank_end_terms(cc, n, r, k)) for r in range(c.pp)]
    end_rank = max(range(c.pp), key=lambda r: ends[r])
    mem = [rank_memory(cc, n, r, k) for r in range(c.pp)]
    fits = max(mem) <= cc.usable_bytes
    return Evaluation(sim.makespan + ends[end_rank], sim.makespan, ends[end_rank], end_rank, mem, fits, sim)
