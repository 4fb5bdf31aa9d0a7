"""The cost model: per-chunk times and per-rank memory of one configuration class, and the exact
objective of a complete configuration (class + stage cut).

A *class* (``Candidate``) fixes everything but the stage cut: tp, pp, dp, micro-batch size,
schedule, virtual stages, recomputation, sequence parallelism and ZeRO stage. Given the class,
every quantity the objective needs is an integer affine function of the layer counts ``n_c`` of
the chunks (``ClassCosts``), so the simulation (``evaluate``), the brute force and the CP-SAT
model compute the very same integers: times in nanoseconds, memory in bytes.

Compute per layer and micro-batch (see ``docs/planner.md`` for every constant):
  time = FLOPs / (peak × efficiency(shapes)) + elementwise bytes / HBM bandwidth,
  efficiency = Σ GEMM FLOPs / Σ roofline time of each GEMM at ``GEMM_EFFICIENCY`` of the peak;
measured ``fwd_time_s``/``bwd_time_s`` from a ``Profile`` replace the formula when present.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Callable

from planner import comm as comm_mod
from planner import config
from planner.specs import (
    BYTES_PER_ELEMENT,
    ClusterSpec,
    GpuSpec,
    LayerProfile,
    ModelSpec,
    NetworkProfile,
    Profile,
    TrainingSpec,
)

NS = 1e9
GIB = 1024**3

#: Fraction of the dense datasheet peak a large GEMM reaches (cuBLAS, "maximum achievable matmul
#: FLOPS" microbenchmarks: stas00/ml-engineering ``compute/accelerator`` table, mamf-finder:
#: A100 SXM bf16 ≈ 268 of 312 TFLOPS, H100 SXM bf16 ≈ 792 of 989). Used for every GPU without a
#: measured profile; shapes below the roofline ridge are charged by their bytes instead.
GEMM_EFFICIENCY = {"a100": 0.86, "h100": 0.80, "h200": 0.80, "b200": 0.80}
DEFAULT_GEMM_EFFICIENCY = 0.80
#: Fixed device memory not available to tensors: CUDA context, NCCL and cuBLAS workspaces.
FIXED_RESERVE_BYTES = 1 * GIB
#: Caching-allocator fragmentation allowance, as a fraction of the tensor bytes.
FRAGMENTATION = 0.05
#: Bytes of optimizer-state per parameter beyond weights and gradients (ZeRO paper's K).
OPTIMIZER_STATE_BYTES = {("adam", True): 12, ("adam", False): 8, ("sgd", True): 8, ("sgd", False): 4}
#: HBM bytes touched per parameter by one optimizer step (read grad, read+write master weights and
#: states, write the 16-bit copy): Adam mixed = 2 + 8 + 8 + 8 + 2; SGD with momentum = 2 + 8 + 8 + 2.
OPTIMIZER_STEP_BYTES = {("adam", True): 28, ("adam", False): 28, ("sgd", True): 20, ("sgd", False): 20}


@dataclass(frozen=True, order=True)
class Candidate:
    """A configuration class: a complete ParallelConfig minus ``stage_layers`` (the fields of
    ``planner.config.FIELDS``, checked below). A plain frozen dataclass: hashed and sorted in the search."""

    tp: int
    pp: int
    dp: int
    micro_batch_size: int
    schedule: str
    virtual_stages: int
    recompute: str
    sequence_parallel: bool
    zero_stage: int

    @property
    def chunks(self) -> int:
        return self.pp * self.virtual_stages

    def describe(self) -> str:
        return config.describe(self)


config.check_fields(Candidate, class_only=True)


LayerFn = Callable[[str, int, int, bool], LayerProfile]


@dataclass
class Context:
    """Everything fixed across candidates: model, hardware, training setup, measurements."""

    model: ModelSpec
    gpu: GpuSpec
    cluster: ClusterSpec
    training: TrainingSpec
    profile: Profile | None = None
    network: NetworkProfile | None = None
    #: (kind, micro_batch_size, tp, sequence_parallel) -> LayerProfile; default: profile, else analytic.
    layer_fn: LayerFn | None = None
    _layers: dict = field(default_factory=dict, repr=False)
    _costs: dict = field(default_factory=dict, repr=False)

    @cached_property
    def comm(self) -> comm_mod.CommModel:
        return comm_mod.CommModel.for_cluster(self.cluster, self.gpu, self.network)

    @property
    def num_gpus(self) -> int:
        return self.cluster.num_gpus

    @property
    def elt(self) -> int:
        return BYTES_PER_ELEMENT[self.training.precision]

    @cached_property
    def peak(self) -> float:
        return self.gpu.peak_flops(self.training.precision)

    @cached_property
    def gemm_efficiency(self) -> float:
        gid = self.gpu.id.lower()
        for prefix, eff in GEMM_EFFICIENCY.items():
            if gid.startswith(prefix):
                return eff
        return DEFAULT_GEMM_EFFICIENCY

    def layer(self, kind: str, mbs: int, tp: int, sp: bool) -> LayerProfile:
        key = (kind, mbs, tp, sp)
        if key not in self._layers:
            lp = None
            if self.profile is not None:
                lp = self.profile.find(kind, mbs, self.training.seq_len, tp, sp)
            if lp is None and self.layer_fn is not None:
                lp = self.layer_fn(kind, mbs, tp, sp)
            if lp is None:
                from planner.analytic import layer_profile

                lp = layer_profile(self.model, kind, micro_batch_size=mbs, seq_len=self.training.seq_len, tp=tp,
                                   sequence_parallel=sp, precision=self.training.precision)
            self._layers[key] = lp
        return self._layers[key]


# ---------------------------------------------------------------------------------------------
# Compute time of one layer (seconds, one micro-batch, one GPU)


def gemm_shapes(model: ModelSpec, kind: str, tokens: int, seq: int, mbs: int, tp: int) -> list[tuple[int, int, int, int]]:
    """Forward GEMMs (M, N, K, count) of one layer on one TP rank."""
    h, hd = model.hidden_size, model.head_dim
    if kind == "transformer_block":
        q, kv, f = model.num_attention_heads * hd // tp, model.num_kv_heads * hd // tp, model.ffn_hidden_size // tp
        heads = mbs * model.num_attention_heads // tp
        out = [(tokens, q, h, 1), (tokens, kv, h, 2), (tokens, h, q, 1), (tokens, f, h, 1), (tokens, h, f, 1),
               (seq, seq, hd, heads), (seq, hd, seq, heads)]
        if model.activation == "swiglu":
            out.append((tokens, f, h, 1))
        return out
    if kind == "lm_head":
        vocab = model.vocab_size // tp if model.vocab_size % tp == 0 else model.vocab_size
        return [(tokens, vocab, h, 1)]
    return []


def gemm_efficiency(ctx: Context, shapes: list[tuple[int, int, int, int]]) -> float:
    """Achieved fraction of peak over a list of GEMMs, each on its roofline."""
    flops = time = 0.0
    for mm, nn, kk, count in shapes:
        fl = 2.0 * mm * nn * kk * count
        by = (mm * kk + kk * nn + mm * nn) * ctx.elt * count
        flops += fl
        time += max(fl / (ctx.peak * ctx.gemm_efficiency), by / (ctx.gpu.hbm_bandwidth_GBps * 1e9))
    return flops / time / ctx.peak if time > 0 else ctx.gemm_efficiency


def elementwise_bytes(ctx: Context, kind: str, mbs: int, tp: int, sp: bool) -> float:
    """HBM bytes moved by the memory-bound (non-GEMM) ops of one forward pass."""
    m, e = ctx.model, ctx.elt
    tokens = mbs * ctx.training.seq_len
    stream = tokens // tp if sp else tokens  # residual-stream tokens on this rank
    h = m.hidden_size
    if kind == "embedding":
        return 2.0 * stream * h * e  # gather + write
    if kind == "lm_head":
        vocab = m.vocab_size // tp if m.vocab_size % tp == 0 else m.vocab_size
        return 2.0 * stream * h * e + 3.0 * tokens * vocab * 4  # final norm; fp32 softmax cross-entropy
    f = m.ffn_hidden_size // tp
    b = 2 * 2 * stream * h * e + 2 * 3 * stream * h * e  # two norms, two residual adds
    b += (3 if m.activation == "swiglu" else 2) * tokens * f * e
    if m.family == "llama":
        b += 2 * tokens * (m.num_attention_heads + m.num_kv_heads) * m.head_dim // tp * e  # RoPE on q, k
    return float(b)


def attention_core_flops(model: ModelSpec, mbs: int, seq: int, tp: int) -> float:
    return 4.0 * mbs * seq * seq * model.head_dim * model.num_attention_heads / tp


@dataclass(frozen=True)
class LayerTimes:
    fwd: float
    bwd: float  # including recomputation
    flops_fwd: float
    flops_bwd: float


def layer_times(ctx: Context, kind: str, mbs: int, tp: int, sp: bool, recompute: str) -> LayerTimes:
    key = ("times", kind, mbs, tp, sp, recompute)
    if key not in ctx._layers:
        ctx._layers[key] = _layer_times(ctx, kind, mbs, tp, sp, recompute)
    return ctx._layers[key]


def _layer_times(ctx: Context, kind: str, mbs: int, tp: int, sp: bool, recompute: str) -> LayerTimes:
    lp = ctx.layer(kind, mbs, tp, sp)
    seq = ctx.training.seq_len
    hbm = ctx.gpu.hbm_bandwidth_GBps * 1e9
    if lp.fwd_time_s is not None and lp.bwd_time_s is not None:
        fwd, bwd = lp.fwd_time_s, lp.bwd_time_s
    else:
        eff = gemm_efficiency(ctx, gemm_shapes(ctx.model, kind, mbs * seq, seq, mbs, tp))
        elem = elementwise_bytes(ctx, kind, mbs, tp, sp)
        fwd = lp.fwd_flops / (ctx.peak * eff) + elem / hbm
        bwd = lp.bwd_flops / (ctx.peak * eff) + 2 * elem / hbm
    extra = 0.0
    if kind == "transformer_block" and recompute == "full":
        extra = fwd
    elif kind == "transformer_block" and recompute == "selective" and lp.fwd_flops > 0:
        extra = fwd * min(1.0, attention_core_flops(ctx.model, mbs, seq, tp) / lp.fwd_flops)
    flops_extra = lp.fwd_flops * (extra / fwd) if fwd > 0 else 0.0
    return LayerTimes(fwd, bwd + extra, lp.fwd_flops, lp.bwd_flops + flops_extra)


# ---------------------------------------------------------------------------------------------
# Placement helpers (the mesh layout of planner.layout: dims (pp, dp, tp), TP innermost)


def block_crosses(ctx: Context, block: int, i: int, j: int) -> bool:
    """Whether some pair (r, r + (j-i)·block) of pipeline ranks i → j sits on different nodes."""
    return _block_crosses(ctx.cluster.gpus_per_node, block, i, j)


@lru_cache(maxsize=65536)
def _block_crosses(g: int, block: int, i: int, j: int) -> bool:
    if g % block == 0:
        return (i * block) // g != (j * block) // g
    if block % g == 0:
        return True
    return any((i * block + x) // g != (j * block + x) // g for x in range(block))


def dp_group_intra(ctx: Context, c: Candidate) -> bool:
    """Whether every DP group (stride tp inside a pipeline rank's block of dp·tp GPUs) is inside a node."""
    return _dp_group_intra(ctx.cluster.gpus_per_node, ctx.num_gpus, c.dp, c.tp)


@lru_cache(maxsize=65536)
def _dp_group_intra(g: int, num_gpus: int, dp: int, tp: int) -> bool:
    span = dp * tp
    if dp == 1:
        return True
    if g % span == 0:
        return True
    if span > g:
        return False
    return all((b * span) // g == (b * span + span - 1) // g for b in range(num_gpus // span))


# ---------------------------------------------------------------------------------------------
# The integer affine cost model of one class


@dataclass
class ClassCosts:
    cand: Candidate
    m: int
    num_layers: int
    chunk_rank: list[int]
    # Per micro-batch, ns: chunk time = n_c·layer + extra[c]
    f_layer: int
    b_layer: int
    f_extra: list[int]
    b_extra: list[int]
    lag: list[int]
    # Parts of the above, for the breakdown (ns per layer / per chunk)
    f_layer_tp: int
    b_layer_tp: int
    f_extra_tp: list[int]
    b_extra_tp: list[int]
    # Memory, bytes: states n_c·state_layer + state_extra[c]; activations per live copy
    state_layer: int
    state_extra: list[int]
    act_layer: int
    act_extra: list[int]
    #: per rank: distinct vectors {chunk: copies alive} at the peaks of its schedule
    live: list[list[dict[int, int]]]
    #: per rank: buffers that do not scale with the cut (bytes) and per-layer temporaries flag
    buffer_const: list[int]
    usable_bytes: int
    # End of step, ns: sync/opt/post = const + Σ_c n_c·layer + extra[c] over the rank's chunks
    sync_const: int
    sync_layer: int
    sync_extra: list[int]
    opt_layer: int
    opt_extra: list[int]
    post_const: int
    post_layer: int
    post_extra: list[int]
    # Reporting
    flops_layer: float  # model FLOPs (fwd+bwd incl. recompute) per layer per micro-batch, per GPU
    flops_extra: list[float]
    elt: int = 2
    optimizer: str = "adam"
    notes: list[str] = field(default_factory=list)

    @property
    def chunks(self) -> int:
        return len(self.chunk_rank)

    def rank_chunks(self, r: int) -> list[int]:
        return self.ranks[r]

    @cached_property
    def ranks(self) -> list[list[int]]:
        """Per pipeline rank, its chunks (rank r holds chunks r, r + pp, r + 2·pp, …)."""
        return [list(range(r, self.chunks, self.cand.pp)) for r in range(self.cand.pp)]


def _ns(seconds: float) -> int:
    return int(round(seconds * NS))


@lru_cache(maxsize=4096)
def _live_vectors_cached(schedule: str, pp: int, v: int, m: int) -> tuple[tuple[tuple[tuple[int, int], ...], ...], ...]:
    if v == 1:  # closed forms: GPipe keeps all m, 1F1B keeps min(p - i, m) on rank i
        return tuple(((((i, m if schedule == "gpipe" else min(pp - i, m)),),)) for i in range(pp))
    from planner.simulate import rank_orders

    out = []
    for ops in rank_orders(schedule, pp, v, m):
        alive: dict[int, int] = {}
        peaks: set[tuple[tuple[int, int], ...]] = set()
        for idx, (kind, _, c) in enumerate(ops):
            if kind == "F":
                alive[c] = alive.get(c, 0) + 1
                if idx + 1 == len(ops) or ops[idx + 1][0] == "B":  # a local maximum
                    peaks.add(tuple(sorted(alive.items())))
            else:
                alive[c] -= 1
        dicts = [dict(p) for p in peaks]
        keep = [p for p in dicts
                if not any(q != p and all(q.get(c, 0) >= k for c, k in p.items()) for q in dicts)]
        out.append(tuple(tuple(sorted(p.items())) for p in keep))
    return tuple(out)


def _live_vectors(schedule: str, pp: int, v: int, m: int) -> list[list[dict[int, int]]]:
    """Per rank, the non-dominated sets {chunk: activation copies alive} at the peaks of its order."""
    return [[dict(p) for p in rank] for rank in _live_vectors_cached(schedule, pp, v, m)]


@dataclass(frozen=True)
class SharedTerms:
    """The parts of a class's costs that do not depend on pp, the schedule or the cut: computed once
    per (micro-batch size, tp, sequence parallelism, recomputation, ZeRO stage, dp) and shared by
    every class with those (``shared_terms``). Times in seconds, memory in bytes."""

    f_blk: float
    b_blk: float
    f_emb: float
    b_emb: float
    f_head: float
    b_head: float
    blk_tp_f: float
    blk_tp_b: float
    emb_tp_f: float
    emb_tp_b: float
    head_tp_f: float
    head_tp_b: float
    act: int  # one residual-stream tensor, bytes
    state_blk: int
    state_emb: int
    state_head: int
    act_layer: int
    act_emb: int
    act_head: int
    logits_fp32: int
    recompute_tmp: int
    z3_tmp: int
    sync: tuple[int, int, int, int]  # const, per layer, embedding, head (ns)
    post: tuple[int, int, int, int]
    opt_layer: int
    opt_emb: int
    opt_head: int
    flops_layer: float
    flops_emb: float
    flops_head: float


def shared_terms(ctx: Context, mbs: int, tp: int, sp: bool, recompute: str, zero_stage: int, dp: int) -> SharedTerms:
    key = ("shared", mbs, tp, sp, recompute, zero_stage, dp)
    if key not in ctx._layers:
        ctx._layers[key] = _shared_terms(ctx, mbs, tp, sp, recompute, zero_stage, dp)
    return ctx._layers[key]


def _shared_terms(ctx: Context, mbs: int, tp: int, sp: bool, recompute: str, zero_stage: int, dp: int) -> SharedTerms:
    model, tr, cm = ctx.model, ctx.training, ctx.comm
    seq, e = tr.seq_len, ctx.elt
    g = ctx.cluster.gpus_per_node

    # --- compute
    blk = layer_times(ctx, "transformer_block", mbs, tp, sp, recompute)
    emb = layer_times(ctx, "embedding", mbs, tp, sp, "none")
    head = layer_times(ctx, "lm_head", mbs, tp, sp, "none")
    lp_blk = ctx.layer("transformer_block", mbs, tp, sp)
    lp_emb = ctx.layer("embedding", mbs, tp, sp)
    lp_head = ctx.layer("lm_head", mbs, tp, sp)

    # --- tensor-parallel communication (blocking, on the compute stream, Megatron-style)
    act = mbs * seq * model.hidden_size * e  # one residual-stream tensor
    tp_link = "intra_node" if (tp <= g and g % tp == 0) else "inter_node"
    ar = cm.time("all_reduce", act, tp, tp_link)
    half = cm.time("reduce_scatter", act, tp, tp_link)  # = all-gather
    full_recompute = recompute == "full"
    blk_tp_f = 2 * ar
    blk_tp_b = 2 * ar + (2 * ar if full_recompute else 0.0)
    vocab_parallel = model.vocab_size % tp == 0
    if tp > 1 and vocab_parallel:
        emb_tp_f, emb_tp_b = (half, half) if sp else (ar, 0.0)
        head_tp_f, head_tp_b = (half, half) if sp else (0.0, ar)
        head_tp_f += cm.time("all_reduce", mbs * seq * 3 * 4, tp, tp_link)  # max/sum/target
    else:
        emb_tp_f = emb_tp_b = 0.0
        head_tp_f = head_tp_b = (half if sp else 0.0)

    # --- ZeRO-3: parameters gathered per micro-batch (fwd and bwd), gradients reduce-scattered
    dp_link = "intra_node" if _dp_group_intra(g, ctx.num_gpus, dp, tp) else "inter_node"
    zero3 = zero_stage == 3 and dp > 1

    def z3(params: int, fwd: bool) -> float:
        if not zero3:
            return 0.0
        t = cm.time("all_gather", params * e, dp, dp_link)
        return t if fwd else t + cm.time("reduce_scatter", params * e, dp, dp_link)

    def exposed(compute: float, comm_: float) -> float:
        return max(compute, comm_)  # prefetched on a side stream: only the excess shows

    # --- memory (bytes per GPU)
    mixed = tr.precision != "fp32"
    w, gr = e, e
    k = OPTIMIZER_STATE_BYTES[(tr.optimizer, mixed)]
    per_param = {0: w + gr + k, 1: w + gr + k / dp, 2: w + (gr + k) / dp, 3: (w + gr + k) / dp}[zero_stage]

    def states(params: int) -> int:
        return int(math.ceil(params * per_param))

    vocab_local = model.vocab_size // tp if vocab_parallel else model.vocab_size
    recompute_tmp = {"none": 0, "selective": max(0, lp_blk.saved_activation_bytes.none - lp_blk.saved_activation_bytes.selective),
                     "full": lp_blk.saved_activation_bytes.none}[recompute]

    # --- end of step: DP gradient sync (overlapped with the rank's last backward), optimizer step
    hbm = ctx.gpu.hbm_bandwidth_GBps * 1e9
    upd = OPTIMIZER_STEP_BYTES[(tr.optimizer, mixed)]

    def affine(collective: str, nbytes_per_param: float) -> tuple[int, int, int, int]:
        if dp == 1:
            return 0, 0, 0, 0
        one = cm.time(collective, 1.0, dp, dp_link)
        two = cm.time(collective, 2.0, dp, dp_link)
        per_byte = two - one
        return (_ns(one - per_byte), _ns(per_byte * lp_blk.param_count * nbytes_per_param),
                _ns(per_byte * lp_emb.param_count * nbytes_per_param), _ns(per_byte * lp_head.param_count * nbytes_per_param))

    if zero_stage == 0:
        sync, post = affine("all_reduce", gr), (0, 0, 0, 0)
    elif zero_stage in (1, 2):
        sync, post = affine("reduce_scatter", gr), affine("all_gather", w)
    else:
        sync = post = (0, 0, 0, 0)
    shard = dp if zero_stage >= 1 else 1

    return SharedTerms(
        f_blk=exposed(blk.fwd + blk_tp_f, z3(lp_blk.param_count, True)),
        b_blk=exposed(blk.bwd + blk_tp_b, z3(lp_blk.param_count, False)),
        f_emb=exposed(emb.fwd + emb_tp_f, z3(lp_emb.param_count, True)),
        b_emb=exposed(emb.bwd + emb_tp_b, z3(lp_emb.param_count, False)),
        f_head=exposed(head.fwd + head_tp_f, z3(lp_head.param_count, True)),
        b_head=exposed(head.bwd + head_tp_b, z3(lp_head.param_count, False)),
        blk_tp_f=blk_tp_f, blk_tp_b=blk_tp_b, emb_tp_f=emb_tp_f, emb_tp_b=emb_tp_b, head_tp_f=head_tp_f, head_tp_b=head_tp_b,
        act=act, state_blk=states(lp_blk.param_count), state_emb=states(lp_emb.param_count), state_head=states(lp_head.param_count),
        act_layer=int(lp_blk.saved_activation_bytes.for_mode(recompute)),
        act_emb=lp_emb.saved_activation_bytes.none, act_head=lp_head.saved_activation_bytes.none,
        logits_fp32=mbs * seq * vocab_local * 4,  # fp32 upcast for the loss
        recompute_tmp=recompute_tmp, z3_tmp=2 * lp_blk.param_count * (w + gr) if zero3 else 0,  # two gathered layers
        sync=sync, post=post,
        opt_layer=_ns(lp_blk.param_count / shard * upd / hbm), opt_emb=_ns(lp_emb.param_count / shard * upd / hbm),
        opt_head=_ns(lp_head.param_count / shard * upd / hbm),
        flops_layer=blk.flops_fwd + blk.flops_bwd, flops_emb=emb.flops_fwd + emb.flops_bwd, flops_head=head.flops_fwd + head.flops_bwd,
    )


def class_costs(ctx: Context, c: Candidate) -> ClassCosts:
    """Build (and cache) the integer cost coefficients of one class from its ``shared_terms``."""
    if c in ctx._costs:
        return ctx._costs[c]
    s = shared_terms(ctx, c.micro_batch_size, c.tp, c.sequence_parallel, c.recompute, c.zero_stage, c.dp)
    m = ctx.training.global_batch_size // (c.dp * c.micro_batch_size)
    chunks, last = c.chunks, c.chunks - 1
    from planner.simulate import chunk_ranks

    where = chunk_ranks(c.pp, c.virtual_stages)
    block = c.dp * c.tp  # GPUs per pipeline rank
    tied_head = ctx.model.tie_embeddings and chunks == 1

    def ends(emb_: float, head_: float, head_counted: bool = True) -> list:
        out = [0] * chunks
        out[0] += emb_
        if head_counted:
            out[last] += head_
        return out

    f_extra = ends(_ns(s.f_emb), _ns(s.f_head))
    b_extra = ends(_ns(s.b_emb), _ns(s.b_head))
    f_extra_tp = ends(_ns(s.emb_tp_f), _ns(s.head_tp_f))
    b_extra_tp = ends(_ns(s.emb_tp_b), _ns(s.head_tp_b))

    # --- pipeline point-to-point: one activation (sequence-sharded with SP) per boundary
    p2p_bytes = s.act // c.tp if c.sequence_parallel else s.act
    lag = []
    if chunks > 1:
        cm = ctx.comm
        t_intra = _ns(cm.time("send_recv", p2p_bytes, 2, "intra_node"))
        t_inter = _ns(cm.time("send_recv", p2p_bytes, 2, "inter_node"))
        g = ctx.cluster.gpus_per_node
        for b in range(chunks - 1):
            i, j = where[b], where[b + 1]
            lag.append(0 if i == j else (t_inter if _block_crosses(g, block, i, j) else t_intra))

    base = s.recompute_tmp + s.z3_tmp + (2 * p2p_bytes if c.pp > 1 else 0)
    buffer_const = [int(base)] * c.pp
    buffer_const[where[last]] = int(base + s.logits_fp32)
    usable = int((ctx.gpu.memory_gib * GIB - FIXED_RESERVE_BYTES) / (1 + FRAGMENTATION))

    cc = ClassCosts(
        cand=c, m=m, num_layers=ctx.model.num_layers, chunk_rank=where,
        f_layer=_ns(s.f_blk), b_layer=_ns(s.b_blk), f_extra=f_extra, b_extra=b_extra, lag=lag,
        f_layer_tp=_ns(min(s.blk_tp_f, s.f_blk)), b_layer_tp=_ns(min(s.blk_tp_b, s.b_blk)),
        f_extra_tp=f_extra_tp, b_extra_tp=b_extra_tp,
        state_layer=s.state_blk, state_extra=ends(s.state_emb, s.state_head, not tied_head),
        act_layer=s.act_layer, act_extra=ends(s.act_emb, s.act_head),
        live=_live_vectors(c.schedule, c.pp, c.virtual_stages, m),
        buffer_const=buffer_const, usable_bytes=usable,
        sync_const=s.sync[0], sync_layer=s.sync[1], sync_extra=ends(s.sync[2], s.sync[3], not tied_head),
        opt_layer=s.opt_layer, opt_extra=ends(s.opt_emb, s.opt_head, not tied_head),
        post_const=s.post[0], post_layer=s.post[1], post_extra=ends(s.post[2], s.post[3], not tied_head),
        flops_layer=s.flops_layer, flops_extra=[float(x) for x in ends(s.flops_emb, s.flops_head)], elt=ctx.elt, optimizer=ctx.training.optimizer,
    )
    ctx._costs[c] = cc
    return cc


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
    sim: object  # planner.simulate.SimResult


def chunk_times(cc: ClassCosts, n: list[int]) -> tuple[list[int], list[int]]:
    fwd = [n[c] * cc.f_layer + cc.f_extra[c] for c in range(cc.chunks)]
    bwd = [n[c] * cc.b_layer + cc.b_extra[c] for c in range(cc.chunks)]
    return fwd, bwd


def rank_end_terms(cc: ClassCosts, n: list[int], r: int) -> tuple[int, int, int, int]:
    """(sync, overlap, optimizer, post) of pipeline rank r, ns."""
    own = cc.rank_chunks(r)
    layers = sum(n[c] for c in own)
    sync = cc.sync_const + layers * cc.sync_layer + sum(cc.sync_extra[c] for c in own) if cc.cand.dp > 1 else 0
    overlap = n[r] * cc.b_layer + cc.b_extra[r]  # chunk r is the rank's last backward
    opt = layers * cc.opt_layer + sum(cc.opt_extra[c] for c in own)
    post = cc.post_const + layers * cc.post_layer + sum(cc.post_extra[c] for c in own) if cc.cand.dp > 1 and cc.post_layer + cc.post_const > 0 else 0
    return sync, overlap, opt, post


def rank_end(cc: ClassCosts, n: list[int], r: int) -> int:
    sync, overlap, opt, post = rank_end_terms(cc, n, r)
    return max(0, sync - overlap) + opt + post


def rank_memory(cc: ClassCosts, n: list[int], r: int) -> int:
    own = cc.rank_chunks(r)
    states = sum(n[c] * cc.state_layer + cc.state_extra[c] for c in own)
    acts = max(sum(k * (n[c] * cc.act_layer + cc.act_extra[c]) for c, k in vec.items()) for vec in cc.live[r])
    return states + acts + cc.buffer_const[r]


def evaluate(cc: ClassCosts, n: list[int], record: bool = False) -> Evaluation:
    """The exact objective of class + cut: simulated makespan + the slowest rank's end of step."""
    from planner.simulate import simulate

    fwd, bwd = chunk_times(cc, n)
    c = cc.cand
    sim = simulate(c.schedule, c.pp, c.virtual_stages, cc.m, fwd, bwd, cc.lag, record=record)
    ends = [rank_end(cc, n, r) for r in range(c.pp)]
    end_rank = max(range(c.pp), key=lambda r: ends[r])
    mem = [rank_memory(cc, n, r) for r in range(c.pp)]
    fits = max(mem) <= cc.usable_bytes
    return Evaluation(sim.makespan + ends[end_rank], sim.makespan, ends[end_rank], end_rank, mem, fits, sim)


def reserve_bytes(tensor_bytes: int) -> float:
    return FIXED_RESERVE_BYTES + FRAGMENTATION * tensor_bytes
