"""The search: best-first over the configuration classes of the space (``planner.search.space``), each ordered by a
valid lower bound (``planner.search.bounds``) and the promising ones solved exactly (``planner.search.cutsolver``).

Exactness. The objective of a complete configuration is ``cost.evaluate``: the simulated pipeline makespan plus the
slowest rank's exposed DP sync and optimizer step, all integers (ns). Classes are solved best bound first until the
next bound exceeds the k-th best plan's step time (a class whose bound equals it may still tie it and rank first on
memory: ``space.plan_key``). Every solved class is OPTIMAL, every skipped one is proven slower, so the answer is proven
optimal for the modeled space.

Interleaved classes of a free schedule are solved within a shared budget (``uneven``; a pinned schedule: the time
limit only), then those it left below the answer once more against it (``uneven.settle``); one-stage classes have one
cut (``one_cut``): memory-screened there and simulated.

Expert-like configurations (``expert_seeds``, Megatron-LM's recipe) are simulated first: real plans of classes the
search visits anyway, so they change no proven answer, but they prune from the start and the answer is never worse
than them when the time limit ends the search (``time_limit_note``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from itertools import chain

from planner.compose.cost import Candidate, ClassCosts, Context, class_costs, evaluate
from planner.search.bounds import fits_at, fitting_bound, may_fit, quick_may_fit
from planner.search.cutsolver import ClassResult, Status, greedy_cut
from planner.search.frontier import Frontier, Key, QueueItem
from planner.search.lift import lifted
from planner.search.portfolio import SIDES
from planner.search.scope import time_limit_note, unsearched
from planner.search.seed_pool import seed_pool
from planner.search.space import MAX_VIRTUAL_STAGES, enumerate_classes, forced_cut, min_memory, plan_key
from planner.search.ties import canonical_plans
from planner.search.uneven import BUDGET, Starts, budget, budget_note, holding, note, polish, remember, settle, solve
from planner.specs import ParallelPins, SearchOptions
from planner.specs.layout import even_stage_layers

#: One-cut classes simulated before the best-first loop (``probe``).
PROBES = 8
#: One-cut classes ``probe`` looks at, at most (most of them may not fit: Llama 3 70B has thousands).
PROBE_SCAN = 256
#: One-stage classes under full recomputation ``probe`` looks at next, at most (Llama 3 405B at 131,072 tokens: its
#: first 256 one-cut classes are ruled out by memory, and the answer, TP8×CP16×PP1, is such a class).
PROBE_SCAN_LEAN = 64


@dataclass
class SearchResult:
    results: list[ClassResult]  # best first (``space.plan_key``), feasible, at most top_k
    status: Status
    objective_ns: int | None
    bound_ns: int | None
    wall_s: float
    classes: int
    classes_solved: int
    cp_sat_solves: int
    notes: list[str] = field(default_factory=list)
    min_memory: tuple[Candidate, float] | None = None  # when nothing fits: the leanest class (cand, GiB per GPU)
    #: the class with the best bound that memory ruled out (cand, bound ns), if any
    memory_blocked: tuple[Candidate, int] | None = None
    #: the classes the budget left unproven with a bound below the answer, lowest first (``uneven.holding``)
    unproven: list[ClassResult] = field(default_factory=list)


def result_key(r: ClassResult) -> tuple:
    assert r.evaluation is not None
    return plan_key(r.evaluation, r.cand)


def search(ctx: Context, pins: ParallelPins, options: SearchOptions, top_k: int = 3) -> SearchResult:
    t0 = time.perf_counter()
    every, families = enumerate_classes(ctx, pins, options)
    cands, profile_notes = restrict_to_profile(ctx, every)
    # Best-first on valid lower bounds (``frontier``: lean, then quick, then a one-cut class's cut bound, each computed
    # when the class nears the front): a class is costed (ClassCosts, memory screen, exact bound) only when its bound
    # can still reach the k-th best plan, pushed back when its exact bound is larger, and solved only when that can
    # reach it too. The first class whose bound exceeds it ends the search: every later one is bounded out.
    queue = Frontier(ctx, pins, cands, families if cands is every else None)
    # Expert-like configurations (``expert_seeds``), evaluated at a balanced cut before the search: real plans of
    # classes the search visits anyway, so the answer is never worse than them even when the time limit ends the search
    # early, and their step times prune from the start. A seed stands for its class until the search solves that class
    # (``admit`` keeps one result per class); its cut is kept for budgeted classes to start from (``uneven.starts``).
    found: list[ClassResult] = expert_seeds(ctx, pins, cands)
    found.sort(key=result_key)
    seeded = {r.cand for r in found}
    kept: Starts = {}  # the best cuts so far by pipeline shape
    remember(kept, *found)
    del found[top_k:]
    # Then the one-cut classes with the best quick bounds (``probe``): exact, a simulation each, and their step times
    # prune the CP-SAT classes before them in the queue (Llama 3 405B: 1.6 → 0.5 s).
    probed = probe(ctx, pins, queue, found, top_k, deadline=t0 + options.time_limit_s)
    costed = pruned_memory = solved = simulated = solves = 0
    all_proven = True
    costs: dict[Candidate, tuple] = {}  # classes costed and re-keyed by their exact bound (``fitting_bound``)
    learned: dict[tuple, dict] = {}  # critical paths shared by classes of one dependency graph (``chains.dag_key``)
    solved_cuts: dict[Candidate, tuple[ClassCosts, ClassResult]] = {}
    blocked: tuple[Candidate, int] | None = None
    open_bound: int | None = None  # smallest bound among classes left unproven (time limit)
    rest: Iterable[QueueItem] = ()  # classes not reached before the time limit (lazily, by bound)
    unsolved: list[QueueItem] = []  # classes the time limit cut short without a plan
    past_budget: list[ClassResult] = []  # interleaved classes of a free schedule left unproven (``uneven``)
    left = [BUDGET, *SIDES]  # their CP-SAT budget and the portfolio search's (``portfolio``), spent in place
    duals: dict[tuple, object] = {}  # the interleaved bound's last LP weights, by chain family
    deadline = t0 + options.time_limit_s

    def leave_open(b: int) -> None:
        nonlocal all_proven, open_bound
        all_proven = False
        open_bound = b if open_bound is None else min(open_bound, b)

    def block(cand: Candidate, b: int) -> None:
        nonlocal blocked
        if blocked is None or b < blocked[1]:
            blocked = (cand, b)

    while (item := queue.pop()) is not None:
        cand = item.cand
        kth_ev = found[top_k - 1].evaluation if len(found) >= top_k else None
        kth = kth_ev.objective_ns if kth_ev is not None else None
        if kth is not None and item.bound > kth:
            break
        if time.perf_counter() >= deadline:
            rest = chain([item], queue.remaining())
            leave_open(item.bound)
            break
        if cand in probed:
            continue  # simulated at its one cut by ``probe``: its plan is already ranked
        fixed = one_cut(ctx, pins, cand)
        if pins.stage_layers is None and not quick_may_fit(ctx, cand, fixed):
            pruned_memory += 1
            block(cand, item.bound)
            continue
        if kth is not None and (up := lifted(ctx, pins, fixed, cand, left)) and queue.quick(cand) + up > kth:
            continue  # ruled out by its bound + the gradient sync's least (``lift``)
        if cand in costs:
            cc, lb = costs.pop(cand)  # re-keyed by its exact bound and back at the front
        else:
            cc = class_costs(ctx, cand)
            costed += 1
            lb = fitting_bound(cc, fixed is None, kth - up if kth is not None and up else kth, duals)  # fitting cuts
            # Memory screen before any simulation: exact for a forced cut, a bound otherwise.
            if pins.stage_layers is None and not (may_fit(cc) if fixed is None else fits_at(cc, fixed)):
                pruned_memory += 1
                block(cand, lb)
                continue
            if lb > item.bound and fixed is None:  # back in the queue by the exact bound: better classes first
                costs[cand] = (cc, lb)
                queue.push(item._replace(bound=lb))
                continue
        if kth is not None and (lb > kth or (up and lb + up > kth)):
            continue
        b = budget(pins, fixed, cand, left)
        res = solve(cc, options, fixed, kth, deadline, learned, b, kept)
        cut_short = b is None or time.perf_counter() >= deadline  # else the budget: named, not left open
        if fixed is None:
            solved += 1
        else:
            simulated += 1
        solves += res.iterations
        if res.status == Status.PRUNED:
            continue
        if res.evaluation is None or not res.evaluation.fits:
            if res.status != Status.INFEASIBLE and not cut_short:  # named, with its bound (``uneven.note``)
                past_budget.append(replace(res, bound=max(res.bound, lb)))
            elif res.status != Status.INFEASIBLE:
                leave_open(lb)
                unsolved.append(QueueItem(lb, item.order, Key.SETTLED))
            else:
                block(cand, lb)
            continue
        if res.status != Status.OPTIMAL and (kth is None or res.bound <= kth):
            past_budget.append(replace(res, bound=max(res.bound, lb))) if not cut_short else leave_open(res.bound)
        admit(found, res, top_k)
        remember(kept, res)
        solved_cuts[cand] = (cc, res)  # a free cut's ties are answered canonically (``ties.canonical_plans``)
    polished = polish(past_budget, found, solved_cuts, deadline)  # the fastest unproven classes, hill-climbed
    exact = options if pins.schedule is None else options.model_copy(update={"prove": True})  # ``uneven.budget``
    past_budget, faster = settle(ctx, past_budget, polished, found, solved_cuts, exact, learned, deadline)
    for res in (*polished, *faster):  # ``settle``: the classes that hold the answer unproven, solved against it
        admit(found, res, top_k)
    if not found and not all_proven:
        found = fallback(ctx, chain(unsolved, rest), top_k, pins)
    found = canonical_plans(found, solved_cuts)
    wall = time.perf_counter() - t0
    notes = [
        (
            f"{len(cands)} configuration classes (every stage cut of each), {costed} costed (the rest bounded out), "
            f"{pruned_memory} ruled out by memory bounds, {solved} solved with CP-SAT ({solves} solves), "
            f"{simulated + len(probed)} simulated at their one allowed cut (pinned, one stage, one layer a chunk, or an even-only stack's), "
            f"{len(seeded)} expert-like configurations evaluated first (their plans are a floor for the answer)"
        )
    ] + profile_notes
    # what an OPTIMAL answer's proof does not cover (policies a pin reaches)
    scope = unsearched(ctx, pins, cands, note(past_budget, found, top_k), families if cands is every else None)
    notes += [scope] if scope else []
    top = found[0].evaluation if found else None
    if top is None:
        return SearchResult(
            [],
            Status.INFEASIBLE if all_proven else Status.UNKNOWN,
            None,
            None,
            wall,
            len(cands),
            solved,
            solves,
            notes,
            min_memory=min_memory(ctx, cands, pins) if all_proven else None,
        )
    best = top.objective_ns
    below = holding(past_budget, best)  # budgeted classes below the answer: not proven (issue 26)
    low = below[0].bound if below else best
    bound = min(low, best if all_proven else min(best, open_bound if open_bound is not None else best))
    if not all_proven or below:
        pinned = pins.schedule is not None
        notes.append(time_limit_note(options, best, bound) if not all_proven else budget_note(best, below, pinned))
    status = Status.OPTIMAL if all_proven and not below else Status.FEASIBLE
    return SearchResult(
        found, status, best, bound, wall, len(cands), solved, solves, notes, memory_blocked=blocked, unproven=below
    )


def one_cut(ctx: Context, pins: ParallelPins, c: Candidate) -> list[int] | None:
    """``space.forced_cut``, and the one cut of a one-stage class (all layers in its one chunk: nothing to
    solve, so it is simulated at that cut rather than handed to CP-SAT — the same answer)."""
    fixed = forced_cut(ctx, pins, c)
    if fixed is None and c.chunks == 1:
        return [ctx.model.num_layers]
    return fixed


def probe(
    ctx: Context, pins: ParallelPins, queue: Frontier, found: list[ClassResult], top_k: int, deadline: float
) -> set[Candidate]:
    """Simulate the one-cut classes (one stage, an even-only stack's split) with the best quick bounds
    that pass the memory screens, at most ``PROBES``, and rank their plans into ``found``: a class with
    one cut is solved exactly by one simulation, so an early good plan costs little and prunes the CP-SAT
    classes queued before it (exactness unchanged: each is the class's optimum, OPTIMAL, and the search
    skips it later). When that finds no plan, the same for the first ``PROBE_SCAN_LEAN`` one-stage classes under full
    recomputation (a long sequence can rule the first scan's out by memory). Returns the classes simulated that fit."""
    if pins.stage_layers is not None:
        return set()
    kth = found[top_k - 1].evaluation.objective_ns if len(found) >= top_k else None  # type: ignore[union-attr]
    done: set[Candidate] = set()
    seen: set[Candidate] = set()  # looked at by an earlier scan
    evals = 0
    # the first scan asks ``one_cut(ctx, pins, c) is not None`` (no pinned cut here) of every queued class without
    # building the cut; the second (``PROBE_SCAN_LEAN``) runs only when the first found no plan
    even = ctx.stack.even_stages  # read once, and one chunk as pp = v = 1: ``keep`` is asked of every queued class
    scans = (
        (lambda c: c.pp == c.virtual_stages == 1 or (even and c.virtual_stages > 1), PROBE_SCAN),
        (lambda c: c.pp == c.virtual_stages == 1 and c.recompute == "full", PROBE_SCAN_LEAN),
    )
    for n, (keep, limit) in enumerate(scans):
        if n and done:
            break  # the first scan found plans: the lean one is for when memory rules all of them out
        for i, item in enumerate(queue.by_quick_bound(keep)):
            if i >= limit or evals >= PROBES or (kth is not None and item.bound > kth):
                break
            if time.perf_counter() >= deadline:
                break
            if item.cand in seen:
                continue
            seen.add(item.cand)
            fixed = one_cut(ctx, pins, item.cand)
            assert fixed is not None
            if not quick_may_fit(ctx, item.cand, fixed):
                continue
            cc = class_costs(ctx, item.cand)
            if not fits_at(cc, fixed):
                continue
            evals += 1
            ev = evaluate(cc, fixed)
            if ev.fits:
                done.add(item.cand)
                admit(found, ClassResult(item.cand, fixed, ev, Status.OPTIMAL, ev.objective_ns, 0, 0.0), top_k)
                if len(found) >= top_k:
                    kth = found[top_k - 1].evaluation.objective_ns  # type: ignore[union-attr]
    return done


def admit(found: list[ClassResult], res: ClassResult, top_k: int) -> None:
    """Insert a class's result into the best-first list, one result per class (a solved class replaces
    its seed unless the seed ranks before it: a time-limited solve may be worse)."""
    same = [r for r in found if r.cand == res.cand]
    if same and result_key(same[0]) <= result_key(res):
        # the seed's cut is as good as the solved one: the class's best, with the solve's status and bound
        found[found.index(same[0])] = replace(same[0], status=res.status, bound=res.bound)
        return
    found[:] = [r for r in found if r.cand != res.cand] + [res]
    found.sort(key=result_key)
    del found[top_k:]


def expert_seeds(ctx: Context, pins: ParallelPins, cands: list[Candidate], max_evals: int = 16) -> list[ClassResult]:
    """Expert-like (Megatron-LM-style) configurations among the classes, simulated: TP = the largest
    degree within a node, sequence parallelism, the distributed optimizer (ZeRO-1) when dp > 1,
    selective recomputation (full when selective fits nowhere, then none), micro-batch 1 (the smallest),
    1F1B, and PP from 1 up until the recipe fits at the even split an expert would type; at that PP
    also the other micro-batch sizes and interleaved (v ≤ ``space.MAX_VIRTUAL_STAGES``). Each at the better
    of the even split and a balanced cut (its forced cut where it has one). At most ``max_evals``
    classes are simulated. Returns those that fit (every one a plan of a class the search visits)."""
    if not cands:
        return []
    pool = seed_pool(cands, ctx.cluster.gpus_per_node)  # by (recompute, pp)
    out: list[ClassResult] = []
    evals = 0

    def seed(c: Candidate) -> bool:
        """Simulate one class at its cut(s); whether the even split (or its one cut) fits."""
        nonlocal evals
        fixed = one_cut(ctx, pins, c)
        if pins.stage_layers is None and not quick_may_fit(ctx, c, fixed):
            return False
        cc = class_costs(ctx, c)
        if not (may_fit(cc) if fixed is None else fits_at(cc, fixed)):
            return False
        evals += 1
        tries = [fixed] if fixed is not None else [even_stage_layers(cc.num_layers, c.chunks), greedy_cut(cc)]
        evs = [(evaluate(cc, n), n) for n in tries[: 1 if tries[-1] == tries[0] else 2]]  # greedy = even: once
        ev, n = min(evs, key=lambda e: (not e[0].fits, e[0].objective_ns, e[0].peak_memory_bytes))
        if ev.fits:
            out.append(ClassResult(c, n, ev, Status.FEASIBLE, 0, 0, 0.0))
        return evs[0][0].fits

    for recompute in ("selective", "full", "none"):
        for pp in sorted(p for r, p in pool if r == recompute):
            at = pool[recompute, pp]
            zero = 1 if any(c.zero_stage == 1 for c in at) else min(c.zero_stage for c in at)
            # 1F1B first, then interleaved; each from the smallest micro-batch size up
            deep = MAX_VIRTUAL_STAGES
            order = sorted(
                (c for c in at if c.zero_stage == zero and c.schedule != "gpipe" and c.virtual_stages <= deep),
                key=lambda c: (c.virtual_stages, c.micro_batch_size),
            )
            if not order or evals >= max_evals or not seed(order[0]):
                continue  # the recipe does not fit at its even split: a deeper pipeline
            for c in order[1:]:
                if evals >= max_evals:
                    break
                seed(c)
            return out
        if out:
            return out
    return out


def restrict_to_profile(ctx: Context, cands: list[Candidate]) -> tuple[list[Candidate], list[str]]:
    """With a profile: only the classes whose (micro-batch size, tp, SP) it measured (a point it lacks would be
    priced for other hardware). When it covers none of them, all are kept and priced by extrapolation
    (``Context.gap_note``), and the notes say so."""
    if ctx.profile is None or not cands:
        return cands, []
    covered = [c for c in cands if ctx.covers(c.micro_batch_size, c.tp, c.sequence_parallel)]
    if len(covered) == len(cands):
        return cands, []
    if covered:
        note = (
            f"search restricted to the points the profile measured ({ctx.profile_points}): "
            f"{len(cands) - len(covered)} of {len(cands)} classes left out; profile more micro-batch sizes "
            "and tp degrees to search them"
        )
        return covered, [note]
    note = (
        f"the profile covers none of the {len(cands)} classes (it covers {ctx.profile_points}): "
        "every plan is extrapolated from it, see each plan's notes"
    )
    return cands, [note]


def fallback(
    ctx: Context, rest: Iterable[QueueItem], top_k: int, pins: ParallelPins, max_classes: int = 64
) -> list[ClassResult]:
    """When the time limit ran out before any class was solved: the best-bound classes not reached,
    each with its balanced (greedy) cut scored by the simulation — valid FEASIBLE plans. (The
    reported bound is already the smallest open lower bound.)"""
    found: list[ClassResult] = []
    tried = 0
    for item in rest:
        if tried >= max_classes or len(found) >= top_k:
            break
        fixed = one_cut(ctx, pins, item.cand)
        if pins.stage_layers is None and not quick_may_fit(ctx, item.cand, fixed):
            continue
        cc = class_costs(ctx, item.cand)
        if fixed is None and not may_fit(cc):
            continue
        if pins.stage_layers is None and fixed is not None and not fits_at(cc, fixed):
            continue
        tried += 1
        n = fixed if fixed is not None else greedy_cut(cc)
        ev = evaluate(cc, n)
        if ev.fits:
            found.append(ClassResult(cc.cand, n, ev, Status.FEASIBLE, item.bound, 0, 0.0))
    found.sort(key=result_key)
    return found
