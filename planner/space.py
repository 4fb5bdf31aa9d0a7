"""The search space: configuration classes (``cost.Candidate``), which ones the pins allow
(``validate_pins``, ``enumerate_candidates``), the one cut a class may be forced to (``forced_cut``),
why a request leaves no class at all (``explain_no_candidate``), and the order of plans
(``plan_key``: step time, then peak memory, then the simpler configuration).
"""

from __future__ import annotations

import math

from planner.cost import Candidate, ClassCosts, Context, Evaluation, class_costs
from planner.errors import MeshplanError
from planner.layout import even_stage_layers
from planner.memory import rank_memory, with_reserve_gib
from planner.specs import MULTI_STAGE_SCHEDULES, ParallelPins, SearchOptions

#: Schedules the planner models; zero-bubble schedules are not modeled yet.
SEARCHED_SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b")
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


def tp_options(ctx: Context, allow_across: bool) -> list[int]:
    m = ctx.model
    limit = ctx.num_gpus if allow_across else ctx.cluster.gpus_per_node
    return [t for t in divisors(limit) if t <= ctx.num_gpus and ctx.num_gpus % t == 0
            and m.num_attention_heads % t == 0 and m.num_kv_heads % t == 0 and m.ffn_hidden_size % t == 0]


def validate_pins(ctx: Context, pins: ParallelPins, options: SearchOptions) -> None:
    """Reject pins that no configuration can satisfy, naming the field and the fix."""
    m, n = ctx.model, ctx.num_gpus
    gbs = ctx.training.global_batch_size
    if pins.tp is not None:
        for what, value in (("num_attention_heads", m.num_attention_heads), ("num_kv_heads", m.num_kv_heads),
                            ("ffn_hidden_size", m.ffn_hidden_size)):
            if value % pins.tp:
                raise MeshplanError("parallel.tp", f"tp={pins.tp} does not divide the model's {what} ({value})",
                                    f"choose a tp among {tp_options(ctx, True) or [1]}")
        if n % pins.tp:
            raise MeshplanError("parallel.tp", f"tp={pins.tp} does not divide the {n} GPUs", "choose a divisor of the GPU count")
        if pins.tp > ctx.cluster.gpus_per_node and not options.allow_tp_across_nodes:
            raise MeshplanError("parallel.tp", f"tp={pins.tp} exceeds the {ctx.cluster.gpus_per_node} GPUs of a node",
                                "use tp ≤ gpus_per_node, or set options.allow_tp_across_nodes")
        if ctx.cluster.gpus_per_node % pins.tp and not options.allow_tp_across_nodes and pins.tp <= ctx.cluster.gpus_per_node:
            raise MeshplanError("parallel.tp", f"tp={pins.tp} does not divide gpus_per_node={ctx.cluster.gpus_per_node}, so TP groups would span nodes",
                                "choose a divisor of gpus_per_node")
    if pins.pp is not None and pins.pp > m.num_layers:
        raise MeshplanError("parallel.pp", f"pp={pins.pp} exceeds the model's {m.num_layers} layers", f"use pp ≤ {m.num_layers}")
    degrees = [x for x in (pins.tp, pins.pp, pins.dp) if x is not None]
    prod = math.prod(degrees)
    if len(degrees) == 3 and prod != n:
        raise MeshplanError("parallel.dp", f"tp×pp×dp = {pins.tp}×{pins.pp}×{pins.dp} = {prod} but the cluster has {n} GPUs",
                            f"choose degrees whose product is {n}")
    if degrees and n % prod:
        field_ = "parallel.dp" if pins.dp is not None else ("parallel.pp" if pins.pp is not None else "parallel.tp")
        raise MeshplanError(field_, f"the pinned degrees multiply to {prod}, which does not divide the {n} GPUs",
                            f"choose degrees whose product divides {n}")
    if pins.dp is not None and gbs % pins.dp:
        raise MeshplanError("parallel.dp", f"dp={pins.dp} does not divide the global batch size {gbs}",
                            "choose a dp that divides training.global_batch_size")
    if pins.micro_batch_size is not None:
        if gbs % pins.micro_batch_size:
            raise MeshplanError("parallel.micro_batch_size", f"micro_batch_size={pins.micro_batch_size} does not divide the global batch size {gbs}",
                                "choose a divisor of training.global_batch_size")
        if pins.dp is not None and gbs % (pins.dp * pins.micro_batch_size):
            raise MeshplanError("parallel.micro_batch_size", f"dp × micro_batch_size = {pins.dp * pins.micro_batch_size} does not divide the global batch size {gbs}",
                                "choose dp and micro_batch_size whose product divides training.global_batch_size")
    if pins.schedule is not None and pins.schedule not in SEARCHED_SCHEDULES:
        raise MeshplanError("parallel.schedule", f"schedule {pins.schedule!r} is not modeled by the planner",
                            f"use one of {', '.join(SEARCHED_SCHEDULES)}")
    if pins.virtual_stages is not None:
        if pins.schedule is not None and pins.schedule not in MULTI_STAGE_SCHEDULES and pins.virtual_stages != 1:
            raise MeshplanError("parallel.virtual_stages", f"virtual_stages={pins.virtual_stages} needs an interleaved schedule",
                                "use schedule 'interleaved-1f1b' or virtual_stages 1")
        if pins.schedule in MULTI_STAGE_SCHEDULES and pins.virtual_stages < 2:
            raise MeshplanError("parallel.virtual_stages", f"schedule {pins.schedule!r} needs virtual_stages ≥ 2", "set virtual_stages to 2 or more")
    if pins.sequence_parallel and pins.tp == 1:
        raise MeshplanError("parallel.sequence_parallel", "sequence parallelism needs tp > 1", "set sequence_parallel to false or tp > 1")
    if pins.stage_layers is not None:
        if sum(pins.stage_layers) != m.num_layers:
            raise MeshplanError("parallel.stage_layers", f"stage_layers sum to {sum(pins.stage_layers)} but the model has {m.num_layers} layers",
                                f"give layer counts that add up to {m.num_layers}")
        if min(pins.stage_layers) < 1:
            raise MeshplanError("parallel.stage_layers", "every chunk needs at least one layer", "remove empty chunks (lower pp or virtual_stages)")
        chunks = len(pins.stage_layers)
        if pins.pp is not None and chunks % pins.pp:
            raise MeshplanError("parallel.stage_layers", f"{chunks} entries is not a multiple of pp={pins.pp}",
                                "give pp × virtual_stages layer counts")
        if pins.pp is not None and pins.virtual_stages is not None and chunks != pins.pp * pins.virtual_stages:
            raise MeshplanError("parallel.stage_layers", f"{chunks} entries but pp × virtual_stages = {pins.pp * pins.virtual_stages}",
                                "give pp × virtual_stages layer counts")


def enumerate_candidates(ctx: Context, pins: ParallelPins, options: SearchOptions) -> list[Candidate]:
    """Every class allowed by the pins (stage cuts are searched per class)."""
    validate_pins(ctx, pins, options)
    n, L = ctx.num_gpus, ctx.model.num_layers
    gbs = ctx.training.global_batch_size
    out: list[Candidate] = []
    short_1f1b: list[tuple[int, int]] = []  # (pp, dp) of 1F1B classes dropped for m < pp
    tps = [pins.tp] if pins.tp is not None else tp_options(ctx, options.allow_tp_across_nodes)
    for tp in tps:
        for pp in ([pins.pp] if pins.pp is not None else [p for p in divisors(n // tp) if p <= L]):
            if (n // tp) % pp:
                continue
            dp = n // (tp * pp)
            if pins.dp is not None and dp != pins.dp:
                continue
            if gbs % dp:
                continue
            mbss = [pins.micro_batch_size] if pins.micro_batch_size is not None else divisors(gbs // dp)
            for mbs in mbss:
                if (gbs // dp) % mbs:
                    continue
                m = gbs // (dp * mbs)
                scheds: list[tuple[str, int]] = []
                for s in ([pins.schedule] if pins.schedule is not None else list(DEFAULT_SCHEDULES)):
                    if s in MULTI_STAGE_SCHEDULES:
                        if pp < 2 or m % pp:
                            continue
                        vs = [pins.virtual_stages] if pins.virtual_stages is not None else range(2, MAX_VIRTUAL_STAGES + 1)
                        # Unpinned: Megatron's virtual pipeline needs uniform chunks (L divisible by pp·v).
                        uniform = pins.schedule is None
                        scheds += [(s, v) for v in vs if v >= 2 and pp * v <= L and (not uniform or L % (pp * v) == 0)]
                    elif pins.virtual_stages in (None, 1):
                        if pp == 1 and s != "1f1b" and pins.schedule is None:
                            continue  # one stage: every schedule is the same; keep one
                        if s == "1f1b" and m < pp:
                            # torch.distributed.pipelining's Schedule1F1B (and the runtime) reject
                            # m < pp; GPipe covers those classes.
                            short_1f1b.append((pp, dp))
                            continue
                        scheds.append((s, 1))
                for s, v in scheds:
                    if pins.stage_layers is not None and len(pins.stage_layers) != pp * v:
                        continue
                    for rc in ([pins.recompute] if pins.recompute is not None else RECOMPUTE):
                        sps = [pins.sequence_parallel] if pins.sequence_parallel is not None else ([False, True] if tp > 1 else [False])
                        for sp in sps:
                            if sp and tp == 1:
                                continue
                            zs = [pins.zero_stage] if pins.zero_stage is not None else ([0, 1, 2, 3] if dp > 1 else [0])
                            for z in zs:
                                out.append(Candidate(tp, pp, dp, mbs, s, v, rc, sp, z))
    if not out and short_1f1b and pins.schedule == "1f1b":
        pp, dp = min(short_1f1b)
        most = max(1, gbs // (dp * pp))
        field_ = "parallel.micro_batch_size" if pins.micro_batch_size is not None else "parallel.schedule"
        raise MeshplanError(field_, f"1F1B needs at least as many micro-batches as pipeline stages, but "
                            f"global_batch_size / (dp × micro_batch_size) < pp = {pp} (dp = {dp})",
                            f"use micro_batch_size ≤ {most} (so that the micro-batches are ≥ pp), fewer pipeline stages, "
                            "or schedule 'gpipe'")
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
    if pins.schedule in MULTI_STAGE_SCHEDULES:
        return ("parallel.micro_batch_size", "interleaved 1F1B needs the number of micro-batches divisible by pp",
                "choose a micro_batch_size (or global batch size) so that global_batch_size / (dp × micro_batch_size) is a multiple of pp")
    dps = [d for d in divisors(n) if gbs % d == 0]
    better = ((gbs + n - 1) // n) * n
    return ("training.global_batch_size",
            f"no data-parallel degree compatible with the pins divides the global batch size {gbs} (usable dp: {dps})",
            f"use a global batch size divisible by the data-parallel degree, e.g. {better}, or pin tp/pp so dp divides {gbs}")


def simplicity(c: Candidate) -> tuple:
    """The last tie-break of ``plan_key`` (equal step time and peak memory): prefer the simpler plan
    (less recomputation, lower ZeRO stage, plainer schedule, fewer pipeline stages, smaller TP)."""
    return (RECOMPUTE.index(c.recompute), c.zero_stage, SEARCHED_SCHEDULES.index(c.schedule) if c.schedule != "1f1b" else -1,
            c.virtual_stages, c.pp, c.tp, c.sequence_parallel, -c.micro_batch_size, c)


PlanKey = tuple[int, int, tuple]


def plan_key(ev: Evaluation, c: Candidate) -> PlanKey:
    """The order of plans, best first: step time, then peak memory per GPU (of equally fast plans
    the one that leaves the most room), then ``simplicity``. The search and the brute force rank by it."""
    return ev.objective_ns, ev.peak_memory_bytes, simplicity(c)


def min_memory(ctx: Context, cands: list[Candidate], pins: ParallelPins | None = None) -> tuple[Candidate, float] | None:
    """The class and cut (its forced one, else memory-balanced) needing the least memory per GPU
    (GiB, with the reserve): what the infeasibility explanation reports when nothing fits."""
    best: tuple[Candidate, float] | None = None
    for cand in cands:
        cc = class_costs(ctx, cand)
        if cc.chunks > cc.num_layers:
            continue
        n = forced_cut(ctx, pins, cand) if pins is not None else None
        if n is None:
            n = balanced_memory_cut(cc) if cc.chunks * cc.num_layers <= 2_000 else even_stage_layers(cc.num_layers, cc.chunks)
        gib = with_reserve_gib(max(rank_memory(cc, n, r) for r in range(cand.pp)))
        if best is None or gib < best[1]:
            best = (cand, gib)
    return best


def balanced_memory_cut(cc: ClassCosts) -> list[int]:
    """Layers added one by one to the chunk whose rank's memory stays smallest."""
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
