"""The search space: configuration classes (``cost.Candidate``), which ones the pins and the request's training stack
allow (``validate_pins``, ``enumerate_candidates``: only what ``ctx.stack`` runs), the one cut a class may be forced to
(``forced_cut``), why a request leaves no class at all (``explain_no_candidate``), and the order of plans (``plan_key``:
step time, then peak memory, then the simpler configuration)."""

from __future__ import annotations

import functools
import heapq
from collections.abc import Iterator
from itertools import compress, repeat
from operator import attrgetter, eq

from planner.compose.cost import Candidate, ClassCosts, Context, Evaluation, class_costs
from planner.compose.memory import fsdp2_mixed_precision, rank_memory, with_reserve_gib
from planner.compose.recompute_modules import MODULES, modules_fp8_error, searched_recompute
from planner.search.cp_degrees import CP_MIN_SEQ, cp_options, cp_policies, divisors
from planner.search.families import Family
from planner.search.options import expert_options, tp_overlaps
from planner.specs import MULTI_STAGE_SCHEDULES, ParallelPins, SearchOptions, rules
from planner.specs.config import PRICED_SCHEDULES
from planner.specs.errors import MeshplanError
from planner.specs.layout import even_stage_layers
from planner.specs.stacks import STACKS

#: Schedules the planner models (``planner.specs.config.SCHEDULES``: zero-bubble schedules are runtime-only).
SEARCHED_SCHEDULES = PRICED_SCHEDULES
#: Schedules searched when ``parallel.schedule`` is not pinned. Interleaved 1F1B is then searched over the space a
#: pinned ``schedule=interleaved-1f1b`` searches (issue 26): every v the stack runs (``virtual_stage_options``) and
#: every cut it runs (``Stack.even_stages``: the even split only), its cuts solved within a budget (``uneven``).
DEFAULT_SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b")
RECOMPUTE = ("none", "selective", "full")
#: Most virtual stages searched when not pinned, but for a layer a chunk (``virtual_stage_options``).
MAX_VIRTUAL_STAGES = 8


def virtual_stage_options(pp: int, num_layers: int) -> list[int]:
    """The virtual stages searched when ``parallel.virtual_stages`` is not pinned: 2 … ``MAX_VIRTUAL_STAGES``, and the
    finest interleaving, a layer a chunk (v = L/pp where pp divides the L layers; Megatron-LM
    ``--num-layers-per-virtual-pipeline-stage 1``), which NVIDIA ran for MLPerf v3.1 GPT-3 175B (96 layers on PP8 ×
    v12). Megatron-LM bounds v by the layers alone (core_v0.16.1 megatron/training/arguments.py:502-556: ``--num-
    virtual-stages-per-pipeline-rank`` any v, ``--pipeline-model-parallel-layout`` any layers per stage): the v
    between ``MAX_VIRTUAL_STAGES`` and L/pp are reached by a pin only (searching them all costs 1.3–2.8× the planning
    time of bench_plan's cases: Llama 3 70B on 64 H100 0.63 → 1.74 s CPU, DeepSeek-V3 on 2,048 1.18 → 1.84 s). What
    the stack does not run (``Stack.even_stages``, ``interleaved_min_pp``) is left out by ``stack_rules``."""
    finest = num_layers // pp if num_layers % pp == 0 and num_layers // pp > MAX_VIRTUAL_STAGES else None
    return [*range(2, min(num_layers // pp, MAX_VIRTUAL_STAGES) + 1), *([finest] if finest else [])]


def tp_options(ctx: Context, allow_across: bool) -> list[int]:
    """The TP degrees the rules allow on this cluster (``planner.specs.rules``: divides the GPUs and the
    model's heads, kv heads and FFN; inside a node unless ``allow_across``)."""
    gpn = ctx.cluster.gpus_per_node
    return [
        t
        for t in divisors(ctx.num_gpus)
        if rules.tp_within_node(t, gpn, allow_across) is None and rules.tp_divides_model(ctx.model, t) is None
    ]


def validate_pins(ctx: Context, pins: ParallelPins, options: SearchOptions) -> None:
    """Reject pins that no configuration can satisfy, naming the field and the fix (``planner.specs.rules``)."""
    m, n = ctx.model, ctx.num_gpus
    gbs = ctx.training.global_batch_size
    if pins.cp is not None and pins.cp > 1:  # the other degrees share the GPUs left: n ÷ cp
        if n % pins.cp:
            raise MeshplanError("parallel.cp", f"cp={pins.cp} does not divide the {n} GPUs", f"use a cp dividing {n}")
        rules.check(
            rules.cp_splits_seq(pins.cp, ctx.training.seq_len, pins.tp or 1, bool(pins.sequence_parallel)),
            rules.cp_splits_heads(m, pins.tp, pins.cp, pins.cp_comm) if pins.tp and pins.cp_comm else None,
        )
        n //= pins.cp
    if pins.tp is not None:
        rules.check(
            rules.tp_divides_model(m, pins.tp),
            rules.tp_divides_gpus(pins.tp, n),
            rules.tp_within_node(pins.tp, ctx.cluster.gpus_per_node, options.allow_tp_across_nodes),
        )
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
        rules.tp_overlap_needs_sp(pins.tp_comm_overlap, pins.tp, pins.sequence_parallel),
        rules.stack_runs_config(ctx.stack, m, pins, gbs),  # what the request's training stack runs (issue 27)
        rules.expert_parallel_rules(ctx.stack, m, pins),  # ep, etp (issue 23)
        modules_fp8_error(ctx, pins.recompute),  # --recompute-modules under delayed FP8
    )
    rules.check(rules.whole_batch_pins(ctx.stack, pins, gbs, n))  # no accumulation at pp = 1: enough dp for the batch
    if pins.pp is None and pins.tp is not None and pins.dp is not None:  # pp follows from tp and dp
        pp = n // (pins.tp * pins.dp)
        err = rules.stack_runs(ctx.stack, zero_stage=pins.zero_stage, pp=pp, tie_embeddings=m.tie_embeddings)
        if err is not None:
            raise MeshplanError(
                "parallel.dp",
                f"tp={pins.tp} and dp={pins.dp} on {n} GPUs leave pp={pp}: {err.message}",
                f"pin tp and dp with tp × dp = {n} (pp = 1), or: {err.fix}",
            )
    if pins.stage_layers is not None:
        rules.check(
            rules.stage_layers_sum(pins.stage_layers, m.num_layers),
            rules.stage_layers_nonempty(pins.stage_layers, ends_may_be_empty=False),
            rules.stage_layers_count(pins.stage_layers, pins.pp, pins.virtual_stages),
        )


def enumerate_candidates(ctx: Context, pins: ParallelPins, options: SearchOptions) -> list[Candidate]:
    """Every class allowed by the pins (stage cuts are searched per class). Context parallelism (unpinned) below
    ``CP_MIN_SEQ`` tokens only when classes without it exist and none fits, on requests of more than
    ``cp_degrees.CP_FULL_GPUS`` GPUs (``cp_policies``)."""
    return enumerate_classes(ctx, pins, options)[0]


def enumerate_classes(ctx: Context, pins: ParallelPins, options: SearchOptions) -> tuple[list[Candidate], list[Family]]:
    """``enumerate_candidates``, and the classes as families (``families.Family``, every class in one: the queue's)."""
    validate_pins(ctx, pins, options)
    if pins.cp is None and ctx.training.seq_len < CP_MIN_SEQ and cp_policies(ctx):
        plain = _enumerate(ctx, pins, options, with_cp=False)
        if cp1_fits(ctx, pins, plain[0]) is not False:
            return plain
    return _enumerate(ctx, pins, options, with_cp=True)


def _enumerate(
    ctx: Context, pins: ParallelPins, options: SearchOptions, with_cp: bool
) -> tuple[list[Candidate], list[Family]]:
    n, L = ctx.num_gpus, ctx.model.num_layers
    gbs, seq = ctx.training.global_batch_size, ctx.training.seq_len
    out: list[Candidate] = []
    families: list[Family] = []
    runs = functools.cache(lambda **kw: rules.stack_runs(ctx.stack, **kw) is None)  # asked per (mbs, sp, …) loop
    runs_ok: dict[tuple, bool] = {}  # ``stack_runs_ok`` by the class fields it reads (below)
    overlaps_at: dict[tuple, list[bool]] = {}  # ``tp_overlaps``, memoised (below)
    short_1f1b: list[tuple[int, int, int, MeshplanError]] = []  # (pp, dp, -m, why) of 1F1B classes dropped for m < pp
    tps = [pins.tp] if pins.tp is not None else tp_options(ctx, options.allow_tp_across_nodes)
    for tp, pp, cp, cp_comms in degrees(ctx, pins, tps, n, with_cp):
        dp = n // (tp * pp * cp)
        if pins.dp is not None and dp != pins.dp:
            continue
        if rules.batch_divides(gbs, dp, None):
            continue
        mbss = [pins.micro_batch_size] if pins.micro_batch_size is not None else divisors(gbs // dp)
        for mbs in mbss:
            if rules.batch_divides(gbs, dp, mbs) or (cp > 1 and pins.micro_batch_size is None and mbs % cp == 0):
                continue  # cp | mbs: dominated by cp = 1 at dp·cp and mbs / cp (``cp_options``)
            m = gbs // (dp * mbs)
            if not runs(pp=pp, micro_batches=m, tp=tp):  # no accumulation without a pipeline; a fused norm's TP
                continue
            scheds: list[tuple[str, int]] = []
            for s in [pins.schedule] if pins.schedule is not None else list(DEFAULT_SCHEDULES):
                if s in MULTI_STAGE_SCHEDULES:
                    if rules.interleaving_needs_pipeline(pp, 2) or rules.interleaved_microbatches_priced(s, pp, m):
                        continue
                    vs = [pins.virtual_stages] if pins.virtual_stages is not None else virtual_stage_options(pp, L)
                    # pinned or not, the same v (a stack that splits evenly only keeps L % (pp·v) = 0 below)
                    scheds += [
                        (s, v)
                        for v in vs
                        if rules.virtual_stages_fit(s, v) is None and rules.pp_fits_layers(pp, v, L) is None
                    ]
                elif pins.virtual_stages in (None, 1):
                    if pp == 1 and s != "1f1b" and pins.schedule is None:
                        continue  # one stage: every schedule is the same; keep one
                    short = rules.one_f_one_b_microbatches(s, pp, m, gbs, dp)
                    if short is not None:  # GPipe covers those classes
                        short_1f1b.append((pp, dp, -m, short))
                        continue
                    scheds.append((s, 1))
            # what the stack does not run at all at this pp, left out before the inner loops (checked whole below)
            scheds = [(s, v) for s, v in scheds if runs(schedule=s, pp=pp)]
            for s, v in scheds:
                if pins.stage_layers is not None and len(pins.stage_layers) != pp * v:
                    continue
                for rc in [pins.recompute] if pins.recompute is not None else searched_recompute(ctx, RECOMPUTE):
                    sps = (
                        [pins.sequence_parallel]
                        if pins.sequence_parallel is not None
                        else ([False, True] if tp > 1 else [False])
                    )
                    for sp in sps:
                        if sp and (
                            rules.sequence_parallel_needs_tp(sp, tp)
                            or rules.sequence_parallel_splits_seq(sp, tp, seq)
                            or rules.cp_splits_seq(cp, seq, tp, sp)
                        ):
                            continue
                        # the ZeRO group spans dp × cp (FSDP shards over the CP ranks too: torchtitan's dp_shard_cp)
                        zs = [pins.zero_stage] if pins.zero_stage is not None else zero_stages(ctx, dp * cp)
                        zs = [z for z in zs if runs(zero_stage=z, pp=pp, shard_group=dp * cp)]
                        at = (mbs, tp, sp, rc, cp)  # what ``tp_overlaps`` reads of the class (asked per pp, schedule)
                        overlaps = overlaps_at.get(at)
                        if overlaps is None:
                            overlaps = overlaps_at[at] = tp_overlaps(ctx, pins, mbs, tp, sp, rc, cp)
                        pairs = expert_options(ctx, pins, tp, dp, sp)
                        if not pairs:
                            continue
                        (ep, etp), alone = pairs[0], len(pairs) == 1  # alone: ``family`` is the class itself
                        # one class built by ``__init__``, its ZeRO / CP-exchange / overlap siblings copied from it
                        # (``Candidate.variant``: 21k classes on Llama 3 405B at 131K tokens)
                        base = Candidate(tp, pp, dp, mbs, s, v, rc, sp, 0, False, cp=cp, ep=ep, etp=etp)
                        rows: dict[bool, list[list[Candidate]]] = {o: [] for o in overlaps}  # a family per overlap
                        for z in zs:
                            for cm in cp_comms:
                                for o in overlaps:
                                    c = base.variant(zero_stage=z, cp_comm=cm, tp_comm_overlap=o)
                                    # what the stack runs (issue 27: ``stack_runs_ok``) reads of tp and dp only tp > 1
                                    # and dp·cp = 1, none of mbs, ep, etp: memoised by what it reads (``runs_ok``)
                                    ok_key = (pp, cp, s, v, rc, sp, z, cm, o, tp > 1, dp * cp == 1)
                                    ok = runs_ok.get(ok_key)
                                    if ok is None:
                                        ok = runs_ok[ok_key] = rules.stack_runs_ok(ctx.stack, ctx.model, c)
                                    if ok:
                                        rows[o].append(row := [c] if alone else c.family(pairs))
                                        out += row
                        families += [(pairs, r) for r in rows.values() if r]
    if not out and short_1f1b and pins.schedule == "1f1b":
        why = min(short_1f1b, key=lambda x: x[:3])[3]
        raise why if pins.micro_batch_size is not None else rules.with_field(why, "parallel.schedule")
    return out, families


def cp1_fits(ctx: Context, pins: ParallelPins, cands: list[Candidate]) -> bool | None:
    """Whether some class without context parallelism fits (at its forced cut, else the even one), trying the
    leanest first (full recomputation, the highest ZeRO stage, the most model-parallel ranks); None when there is
    no such class (the batch does not split over the GPUs without CP: that is the request's problem to report)."""
    # the filters in C (``itertools.compress``; 95k classes on DeepSeek-V3): the same lists, in order
    plain = list(compress(cands, map(eq, map(attrgetter("cp"), cands), repeat(1))))
    if not plain:
        return None
    full = list(compress(plain, map(eq, map(attrgetter("recompute"), plain), repeat("full"))))  # sorted first
    # ``sorted(…)[:64]`` (``heapq.nsmallest``: the same classes in the same order, without sorting them all)
    key = lambda c: (c.recompute != "full", -c.zero_stage, -c.tp * c.pp, c.virtual_stages)  # noqa: E731
    for c in heapq.nsmallest(64, full if len(full) >= 64 else plain, key=key):
        cc = class_costs(ctx, c)
        if cc.chunks > cc.num_layers:
            continue
        n = forced_cut(ctx, pins, c) or even_stage_layers(cc.num_layers, cc.chunks)
        if max(rank_memory(cc, n, r) for r in range(c.pp)) <= cc.usable_bytes:
            return True
    return False


def degrees(
    ctx: Context, pins: ParallelPins, tps: list[int], n: int, with_cp: bool = True
) -> Iterator[tuple[int, int, int, tuple[str, ...]]]:
    """(tp, pp, cp, the cp exchanges) of every class: pp divides the GPUs left by tp, cp (``cp_options``) those
    left by tp·pp; dp is the rest."""
    L = ctx.model.num_layers
    for tp in tps:
        pps = (
            [pins.pp]
            if pins.pp is not None
            else [p for p in divisors(n // tp) if rules.pp_fits_layers(p, 1, L) is None]
        )
        for pp in pps:
            if (n // tp) % pp == 0:
                for cp, comms in cp_options(ctx, pins, tp, n // (tp * pp), with_cp):
                    yield tp, pp, cp, comms


def zero_stages(ctx: Context, dp: int) -> list[int]:
    """The ZeRO stages the search visits over ``dp`` data-parallel ranks (× the CP ranks, which the ZeRO group spans). ZeRO-2 is left out where the stack holds it as ZeRO-1:
    the bundled runtime under mixed precision (``Stack.param_layout == "fsdp2"``) wraps both in
    ``fully_shard`` kept unsharded after the forward, and ``memory.state_bytes`` and ``terms`` price them
    alike, so it would be the same plan twice. A pinned ``zero_stage: 2`` is still priced."""
    if dp == 1:
        return [0]
    if fsdp2_mixed_precision(ctx.stack.param_layout, ctx.training.precision):
        return [0, 1, 3]
    return [0, 1, 2, 3]


def forced_cut(ctx: Context, pins: ParallelPins, c: Candidate) -> list[int] | None:
    """The one cut a class is evaluated at, or None when its cut is searched: the pinned
    ``stage_layers``; the even split on a stack that runs no other (``Stack.even_stages``); one layer a chunk where
    there are as many chunks as layers (the only cut: Mixtral 8x22B's 56 layers on PP8 × v7, MLPerf GPT-3's 96 on
    PP8 × v12). Interleaved classes of a free schedule have their cut searched too (issue 26; ``uneven``)."""
    if pins.stage_layers is not None:
        return list(pins.stage_layers)
    if ctx.stack.even_stages and c.chunks > 1:  # a stack that splits evenly only (``Stack.even_stages``)
        return [ctx.model.num_layers // c.chunks] * c.chunks
    if c.chunks == ctx.model.num_layers:  # n_c >= 1 and sum n_c = L: every chunk one layer
        return [1] * c.chunks
    return None


def explain_no_candidate(ctx: Context, pins: ParallelPins, allow_tp_across: bool = False) -> tuple[str, str, str]:
    """(field, reason, suggestion) when the pins and the batch leave no class at all."""
    gbs, n = ctx.training.global_batch_size, ctx.num_gpus
    why = rules.interleaved_microbatches_priced(pins.schedule, pins.pp, None)
    if why is not None:
        return why.field, why.message, why.fix
    st = ctx.stack
    tied_on_one_stage = ctx.model.tie_embeddings and not st.pp_with_tied_embeddings
    # the stack keeps a tied model on one pipeline stage: dp = GPUs ÷ tp, and none of those divides the batch
    dps = sorted({n // t for t in tp_options(ctx, allow_tp_across) if pins.tp in (None, t)})
    if tied_on_one_stage and pins.pp in (None, 1) and pins.dp is None and dps:
        nearest = min((-(-gbs // d) * d for d in dps), default=gbs)
        runs = ", ".join(s.id for s in STACKS.values() if s.pp_with_tied_embeddings)
        return (
            "training.global_batch_size",
            f"the training stack {st.id!r} does not run pipeline parallelism on a model with tied embeddings "
            f"(model.tie_embeddings), so pp = 1 and dp = GPUs ÷ tp ∈ {dps}: none divides the global batch size {gbs}",
            f"use a global batch size divisible by one of {dps} (e.g. {nearest}), "
            f"set model.tie_embeddings to false, or plan for a stack that runs pp > 1 on tied models "
            f"(training.stack: {runs})",
        )
    dps = [d for d in divisors(n) if gbs % d == 0]
    better = ((gbs + n - 1) // n) * n
    return (
        "training.global_batch_size",
        f"no data-parallel degree compatible with the pins divides the global batch size {gbs} (usable dp: {dps})",
        f"use a global batch size divisible by the data-parallel degree, e.g. {better}, or pin tp/pp so dp divides {gbs}",
    )


#: ``simplicity``'s ranks of the recomputation modes and schedules (their order in ``RECOMPUTE`` and
#: ``SEARCHED_SCHEDULES``; 1F1B first of all)
_RECOMPUTE_RANK = {r: i for i, r in enumerate((*RECOMPUTE, MODULES))}
_SCHEDULE_RANK = {s: (i if s != "1f1b" else -1) for i, s in enumerate(SEARCHED_SCHEDULES)}


def simplicity(c: Candidate) -> tuple:
    """The last tie-break of ``plan_key`` (equal step time and peak memory): prefer the simpler plan
    (less recomputation, lower ZeRO stage, plainer schedule, fewer pipeline stages, smaller TP)."""
    return (
        _RECOMPUTE_RANK[c.recompute],
        c.zero_stage,
        _SCHEDULE_RANK[c.schedule],
        c.virtual_stages,
        c.pp,
        c.tp,
        c.sequence_parallel,
        c.tp_comm_overlap,
        -c.micro_batch_size,
        c.ep,
        c.etp,
        # the class's other fields, in its own order (``Candidate``'s: tp, pp, dp, cp, cp_comm, …): ties compare
        # as the class itself would, without its dataclass ``__eq__``/``__lt__`` (the search's heap)
        c.dp,
        c.cp,
        c.cp_comm,
        c,
    )


PlanKey = tuple[int, int, tuple]


def plan_key(ev: Evaluation, c: Candidate) -> PlanKey:
    """The order of plans, best first: step time, then peak memory per GPU (of equally fast plans
    the one that leaves the most room), then ``simplicity``. The search and the brute force rank by it."""
    return ev.objective_ns, ev.peak_memory_bytes, simplicity(c)


def min_memory(
    ctx: Context, cands: list[Candidate], pins: ParallelPins | None = None
) -> tuple[Candidate, float] | None:
    """The class and cut (its forced one, else memory-balanced) needing the least memory per GPU
    (GiB, with the reserve): what the infeasibility explanation reports when nothing fits."""
    best: tuple[Candidate, float] | None = None
    for cand in cands:
        cc = class_costs(ctx, cand)
        if cc.chunks > cc.num_layers:
            continue
        n = forced_cut(ctx, pins, cand) if pins is not None else None
        if n is None:
            n = (
                balanced_memory_cut(cc)
                if cc.chunks * cc.num_layers <= 2_000
                else even_stage_layers(cc.num_layers, cc.chunks)
            )
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
