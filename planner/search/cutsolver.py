"""The exact stage cut of one class, with OR-Tools CP-SAT (lazy constraint generation).

The model has one integer variable per chunk (its layer count) and

* ``D ≥`` each of ``step_end.end_parts`` per rank (the exact max of the end of step);
* ``memory.peaks ≤ usable`` per rank and activation peak (exact, linear) — the very
  functions ``cost.evaluate`` uses, given CP-SAT variables instead of ints;
* ``M ≥ length(chain)`` for chains of operations of the schedule's dependency graph. Every chain is a
  lower bound of the makespan for *every* cut, so the model's optimum is a lower bound; the solution
  is simulated, and while the simulation is longer than ``M`` the critical path found by the
  simulation is added as a new chain. When they agree the cut is optimal. GPipe starts from its
  exact closed form, so it needs no extra chain.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

import numpy as np
from ortools.sat.python import cp_model

from planner.compose.cost import Candidate, ClassCosts, Evaluation, evaluate
from planner.compose.memory import kept_bytes, memory_terms, peaks
from planner.compose.simulate import Op
from planner.compose.step_end import end_parts, end_terms
from planner.search import chains, columns, portfolio
from planner.search.bounds import may_fit
from planner.search.chains import Counts, as_arrays, dag_key, initial_counts, path_counts, price
from planner.search.hints import best_of, climbs, critical_counts, greedy_cut, local_search
from planner.search.kinds import as_chains, moe_layer_vars, sparse
from planner.search.oneround import one_round
from planner.specs import SearchOptions
from planner.specs.layout import even_stage_layers

# Each lazy round adds the critical paths of the solution's one-layer neighbours too (fewer rounds): all 2(C − 1) of
# them while that costs ≤ NEIGHBOUR_BUDGET simulation steps, else only the moves off the NEIGHBOUR_CHUNKS chunks the
# critical path dwells on most (OPT-175B, pp = 31, m = 256: 50 → 21 rounds, 5.8 → 2.7 s CPU). Only valid chains.
NEIGHBOUR_BUDGET = 100_000
NEIGHBOUR_CHUNKS = 2
#: Each lazy round also adds the window chains (``chains.window_counts``) longest at the solution, at
#: most this many of those longer than the model's makespan there (separation: the model stays small).
SEPARATE = 16
#: From this lazy round on (None: never), separation draws from the window chains of every width
#: (``chains.wide_window_family``), not only those of ≤ ``chains.WINDOW`` stages: a deep pipeline of nearly even
#: stages is bound by a wide cycle (Llama 3 405B at 8,192 tokens, TP4 + SP × CP8 × PP64: 24 rounds, 2.2 s CPU →
#: 4 rounds, 0.7 s). Not earlier: counting every width costs ~0.25 s at p = 64, more than the classes that converge
#: in 2–3 rounds save (gpt-1t on 16,384 H100, DeepSpeed: 0.62 s with 3, 0.86 s with 1, the same answer).
WIDE_AFTER: int | None = 3
#: Deepest pipeline whose windows of every width are counted (p = 64: 8,320 windows, ~0.1–0.2 s and ~12 MB once
#: per (p, m); both grow as p³): deeper ones keep the windows of ≤ ``chains.WINDOW`` stages.
WIDE_MAX_STAGES = 64
PRESOLVE_CHUNKS = 16  # CP-SAT presolve from this many chunks on (measured on the wide benchmark)
#: A model solved without presolve gets this much deterministic time (CP-SAT's own work units, the same on every
#: machine and load); past it the solve starts over with presolve, which proves such models in a few hundred
#: branches (Llama 3 405B at 8,192 tokens, its PP8 class: 17,197 branches and det 0.0625 (0.45 s CPU) without, 386
#: branches and det 0.0008 (0.012 s) with). 7x the longest other such solve on the wide benchmark (det 0.0007)
#: but for DeepSeek-V3's PP8 class (det 0.023, 1,375 branches; 181 with presolve).
PRESOLVE_AFTER_DET = 0.005
#: Models of fewer chunks get one CP-SAT worker unless ``options.num_workers`` is set: 2 cost ~1.3× the CPU and no less
#: wall time on the wide benchmark (OPT-175B's PP31 classes: 0.40–0.44 s CPU, 0.49–0.78 s wall with one; 0.45–0.78 s,
#: 0.72–6.9 s with two). A budgeted class gets one always: parallel workers do not keep deterministic time (a 64-chunk
#: model of Llama 3 405B: det 0.0007 / 0.0061 / 0.0062 in three runs), so the answer would move between runs.
ONE_WORKER_CHUNKS = 64


def workers(options: SearchOptions, chunks: int, budgeted: bool = False) -> int:
    """CP-SAT workers for a class's model: the option when given or for large models, else (or budgeted) 1."""
    explicit = "num_workers" in options.model_fields_set
    return options.num_workers if not budgeted and (explicit or chunks >= ONE_WORKER_CHUNKS) else 1


class Status(StrEnum):
    OPTIMAL = "OPTIMAL"  # the best cut (of the class; of the space for a search)
    FEASIBLE = "FEASIBLE"  # a fitting cut, not proven best (time limit)
    INFEASIBLE = "INFEASIBLE"  # no cut fits
    UNKNOWN = "UNKNOWN"  # the time limit ran out before a fitting cut was found
    PRUNED = "PRUNED"  # proven unable to rank before the incumbent


@dataclass
class ClassResult:
    cand: Candidate
    stage_layers: list[int] | None
    evaluation: Evaluation | None
    status: Status
    bound: int
    iterations: int
    wall_s: float


class Chain(NamedTuple):
    """A chain's length as an affine function of the layer counts: Σ coef[c]·n_c + const (ns), + Σ moe[c]·k_c
    for a model of two block kinds (k_c: chunk c's MoE layers; ``moe`` empty for one kind)."""

    coef: tuple[int, ...]
    const: int
    moe: tuple[int, ...] = ()


def chain(cc: ClassCosts, path: list[Op], lags: list[int]) -> Chain:
    """The length of a chain of operations (crossing the boundaries ``lags``) as a function of the cut."""
    return chains.counts_chain(cc, path_counts(cc.chunks, path, lags))


def critical_chain(cc: ClassCosts, ev: Evaluation) -> Chain:
    return chain(cc, ev.sim.critical_path, ev.sim.critical_lags)


def initial_chains(cc: ClassCosts) -> list[Chain]:
    """Per rank i: F(0) through chunks before i, every op of rank i, B(m-1) back through them (and for
    1F1B the steady-state shapes: ``chains.initial_counts``), priced for the class."""
    c = cc.cand
    return priced(cc, initial_counts(c.schedule, c.pp, c.virtual_stages, cc.m))


def priced(cc: ClassCosts, counts: list[Counts] | tuple[Counts, ...]) -> list[Chain]:
    """``chains.counts_chain`` of each, vectorised."""
    if not counts:
        return []
    family = as_arrays(counts)
    coef, const = price(cc, family)
    return as_chains(cc, family, coef, const, range(len(counts)))


@dataclass
class CutModel:
    """The CP-SAT model of one class: layer counts ``n`` (and MoE layers ``k`` of a model of two block kinds),
    makespan ``M`` (≥ every chain added) and end of step ``D``; the objective ``M + D``."""

    model: cp_model.CpModel
    n: list[cp_model.IntVar]
    makespan: cp_model.IntVar
    end: cp_model.IntVar
    layers: int  # Σ n
    k: list[cp_model.IntVar] | None = None
    moe_layers: int = 0  # Σ k

    def add_chain(self, ch: Chain) -> None:
        # Σ n = L: subtracting λ·(Σ n − L) changes no value; with λ the most frequent coefficient (a
        # chain passes most chunks once each way) the row keeps only the chunks it dwells on. Likewise Σ k.
        expr, const = sparse(self.n, ch.coef, self.layers)
        if self.k is not None and ch.moe:
            more, const_k = sparse(self.k, ch.moe, self.moe_layers)
            expr, const = expr + more, const + const_k
        self.model.add(self.makespan >= expr + (ch.const + const))


def cut_model(cc: ClassCosts) -> CutModel:
    c, C, L, s = cc.cand, cc.chunks, cc.num_layers, cc.shared
    model = cp_model.CpModel()
    n = [model.new_int_var(1, L - C + 1, f"n{ch}") for ch in range(C)]
    model.add(sum(n) == L)
    horizon = 1 << 50  # ns, ~13 days: far above any step
    cm = CutModel(model, n, model.new_int_var(0, horizon, "makespan"), model.new_int_var(0, horizon, "end"), L)
    if cc.moe_prefix is not None:  # dense and MoE blocks: each chunk's MoE layers follow from where it sits
        cm.k, cm.moe_layers = moe_layer_vars(model, n, cc.moe_prefix), cc.moe_prefix[-1]
    for r in range(c.pp):
        for part in end_parts(end_terms(s, c, n, r, cm.k)):
            model.add(cm.end >= part)
        done = None if cc.done is None else cc.done[r]  # the chunks whose gradients exist at each peak
        for peak in peaks(memory_terms(s, c, n, r, cc.live[r], cm.k, done, kept_bytes(cc, r))):  # at every peak
            model.add(peak <= cc.usable_bytes)
    if c.schedule == "gpipe" or columns.applies(cc):  # its exact closed form (simulate.gpipe_makespan); m = p: a bound
        mf = model.new_int_var(0, horizon, "max_f")
        mb = model.new_int_var(0, horizon, "max_b")
        for ch in range(C):
            more_f, more_b = (cm.k[ch] * cc.f_moe, cm.k[ch] * cc.b_moe) if cm.k is not None else (0, 0)
            model.add(mf >= n[ch] * cc.f_layer + more_f + cc.f_extra[ch])
            model.add(mb >= n[ch] * cc.b_layer + more_b + cc.b_extra[ch])
        const = sum(cc.f_extra) + sum(cc.b_extra) + 2 * sum(cc.lag) + L * (cc.f_layer + cc.b_layer)
        const += cm.moe_layers * (cc.f_moe + cc.b_moe)
        model.add(cm.makespan >= const + (cc.m - 1) * (mf + mb))
    for ch_ in initial_chains(cc):
        cm.add_chain(ch_)
    model.minimize(cm.makespan + cm.end)
    return cm


def solve(
    model: cp_model.CpModel,
    num_workers: int,
    presolve: bool,
    deadline: float,
    det: float | None = None,
    budget: list[float] | None = None,
) -> tuple:
    """CP-SAT's status on ``model`` and the solver that holds its solution. Presolve costs tens of ms per solve and buys
    nothing on most small models, but on deep pipelines it pays many times over (OPT-175B on 992 A100, pp = 31, m = 128:
    30 solves in 1.5 s CPU with it, 8.2 s without). Without it, a search past ``PRESOLVE_AFTER_DET`` starts over with
    presolve (``portfolio`` first for a small model of ``solve_class``'s ``budget``). Every way exact, the budget
    deterministic; the cut of the optimal step time a plan answers does not depend on it (``ties.canonical_plans``)."""
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = num_workers
    solver.parameters.cp_model_presolve = presolve
    solver.parameters.max_time_in_seconds = max(deadline - time.perf_counter(), 1e-3)
    if det is not None:  # a budgeted class (``solve_class``): the deterministic time left to it
        solver.parameters.max_deterministic_time = det
    if presolve:
        return solver.solve(model), solver
    solver.parameters.max_deterministic_time = min(PRESOLVE_AFTER_DET, det if det is not None else PRESOLVE_AFTER_DET)
    st = solver.solve(model)
    if st in (cp_model.OPTIMAL, cp_model.INFEASIBLE) or solver.deterministic_time < PRESOLVE_AFTER_DET:
        return portfolio.settled(model, st, solver)  # solved (``portfolio``: its class notes it), or out of time/budget
    left = None if det is None else det - solver.deterministic_time
    if num_workers == 1 and left is not None and (out := portfolio.try_portfolio(model, deadline, budget, left)):
        return out  # a small budgeted model proven by a run ``portfolio`` adds
    return solve(model, num_workers, True, deadline, left)


def neighbours(cc: ClassCosts, sol: list[int], ev: Evaluation, deadline: float) -> list[tuple[list[int], Evaluation]]:
    """The one-layer moves of ``sol`` (simulated at ``ev``) a lazy round simulates for their critical paths, each with
    its evaluation (``NEIGHBOUR_BUDGET``), until ``deadline``."""
    C = cc.chunks
    if 4 * C * cc.m * C <= NEIGHBOUR_BUDGET:  # neighbour simulations cost ~2·m·C steps each
        moves = [m_ for b in range(C - 1) for m_ in ((b, b + 1), (b + 1, b))]
    else:  # too long to simulate them all: move a layer off the chunk the critical path dwells on most
        dwell = Counter(on for _k, _j, on in ev.sim.critical_path)
        top = sorted(range(C), key=lambda i: -dwell[i])[:NEIGHBOUR_CHUNKS]
        moves = [(h, z) for h in top for z in (h - 1, h + 1) if 0 <= z < C]
    out = []
    for a, z in moves:
        if sol[a] > 1 and time.perf_counter() < deadline:
            nb = list(sol)
            nb[a] -= 1
            nb[z] += 1
            out.append((nb, evaluate(cc, nb)))
    return out


def better(a: Evaluation, b: Evaluation | None) -> bool:
    """Whether cut evaluation ``a`` ranks before ``b`` within a class (step time, then peak memory)."""
    return b is None or (a.objective_ns, a.peak_memory_bytes) < (b.objective_ns, b.peak_memory_bytes)


def solve_class(
    cc: ClassCosts,
    options: SearchOptions,
    fixed: list[int] | None = None,
    incumbent: int | None = None,
    deadline: float | None = None,
    learned: dict[tuple, dict[Counts, None]] | None = None,
    budget: list[float] | None = None,
    starts: tuple[list[int], ...] = (),
) -> ClassResult:
    """The class's best cut (``fixed``: that cut only). ``incumbent``: the k-th best step time so far;
    a class that cannot reach it is PRUNED (ties are solved: they may rank first on memory).
    ``learned``: critical paths found by earlier solves, as operation counts by dependency graph
    (``chains.dag_key``: schedule, pp, v, m); this solve starts from those of its graph, priced with
    its own costs, and adds its own (each is a path of that graph: a valid lower bound of the makespan
    of every class that has it, whatever its costs). For 1F1B classes with one chunk per rank each round
    also adds the window chains (``chains.window_counts``) longest at the solution (``SEPARATE``).
    ``budget``: [the CP-SAT deterministic time its solves may spend], spent in place (``uneven.budget``: the
    interleaved classes of a free schedule share one; a first solve that proves the model INFEASIBLE spends none,
    so ``oneround`` may rule the class out before it), its first cut the better of the even split and the greedy
    one and ``starts`` (``uneven.starts``: the best cuts of classes solved before of its pipeline shape); past it, the
    best cut found, FEASIBLE with the bound proven (spent before: the best of those starts, unproven)."""
    t0 = time.perf_counter()
    deadline = deadline if deadline is not None else t0 + options.time_limit_s
    c, C, L = cc.cand, cc.chunks, cc.num_layers
    iterations = 0

    def result(status: Status, n: list[int] | None = None, ev: Evaluation | None = None, bound: int = 0) -> ClassResult:
        return ClassResult(c, n, ev, status, bound, iterations, time.perf_counter() - t0)

    if fixed is not None:
        ev = evaluate(cc, fixed)
        return result(Status.OPTIMAL if ev.fits else Status.INFEASIBLE, fixed, ev, ev.objective_ns)
    if C > L or not may_fit(cc):
        return result(Status.INFEASIBLE)
    if budget is not None:  # a budgeted class: never worse than its even split, greedy cut and ``starts``
        spent = budget[0] <= 0  # then its best start, unproven (or ruled out: ``columns``)
        if spent and incumbent is not None and columns.rules_out(cc, incumbent):
            return result(Status.PRUNED, bound=incumbent)
        hint, hint_ev = best_of(cc, (even_stage_layers(L, C), greedy_cut(cc), *starts))
        if spent:
            return result(Status.FEASIBLE, hint, hint_ev) if hint_ev.fits else result(Status.UNKNOWN)
        seeds = [critical_counts(cc, hint_ev)]
        if incumbent is not None and (out := one_round(cc, incumbent, learned, seeds)):
            return result(Status.PRUNED, bound=out)  # its first model proven INFEASIBLE before the solve
    elif c.virtual_stages > 1 and incumbent is None:  # no plan yet: a good one early prunes the rest
        hint, hint_ev, seeds = local_search(cc, greedy_cut(cc), deadline=deadline)
    elif incumbent is not None:  # the first solve may prune the class: simulate nothing before it
        hint, hint_ev, seeds = greedy_cut(cc), None, []
    else:  # refine by cuts only
        hint = greedy_cut(cc)
        hint_ev = evaluate(cc, hint)
        seeds = [critical_counts(cc, hint_ev)]
    cm = cut_model(cc)
    model, n, M = cm.model, cm.n, cm.makespan
    # Cutoffs (valid): the class optimum is no worse than its hint (then than the best cut simulated);
    # a class slower than the k-th best plan found so far is of no interest. Both shrink CP-SAT's
    # domains a lot.
    cutoff = hint_ev.objective_ns if hint_ev is not None and hint_ev.fits else None
    if incumbent is not None:
        cutoff = incumbent if cutoff is None else min(cutoff, incumbent)
    if cutoff is not None:
        model.add(M + cm.end <= cutoff)
    pool: dict[Counts, None] = {}  # this graph's critical paths, shared with later classes
    in_model: set[Chain] = set()

    def add(chs: list[Chain]) -> None:
        for ch in chs:
            if ch not in in_model:
                in_model.add(ch)
                cm.add_chain(ch)

    def learn(counts: list[Counts]) -> None:
        pool.update(dict.fromkeys(counts))
        add(priced(cc, counts))

    families: dict[bool, tuple] = {}  # the window chains (narrow, or of every width), counted and priced on first use

    def separate(sol: list[int], makespan: int) -> None:
        """Add the window chains longest at ``sol`` among those longer than the model's makespan there: of at
        most ``chains.WINDOW`` stages, and of every width from round ``WIDE_AFTER`` on."""
        if not (c.schedule == "1f1b" and c.virtual_stages == 1 and c.pp > 1):
            return
        wide = WIDE_AFTER is not None and iterations >= WIDE_AFTER and c.pp <= WIDE_MAX_STAGES
        if wide not in families:
            win = chains.wide_window_family(c.pp, cc.m) if wide else chains.window_family(c.pp, cc.m, chains.WINDOW)
            families[wide] = (win, *price(cc, win))
        windows, coef, const = families[wide]
        vals = coef @ np.array(sol, dtype=np.int64) + const
        moe = cc.moe_counts(sol)
        if moe is not None:  # a model of two block kinds: what the MoE layers add
            vals = vals + (windows[0] * cc.f_moe + windows[1] * cc.b_moe) @ np.array(moe, dtype=np.int64)
        top = [int(i) for i in np.argsort(-vals)[:SEPARATE] if vals[i] > makespan]
        add(as_chains(cc, windows, coef, const, top))
        # later classes of this graph start with them
        fc, bc, lc = windows
        pool.update(dict.fromkeys((tuple(fc[i].tolist()), tuple(bc[i].tolist()), tuple(lc[i].tolist())) for i in top))

    if c.schedule != "gpipe":
        if learned is not None:
            pool = learned.setdefault(dag_key(cc), {})
        add(priced(cc, list(pool)))
        learn(seeds)
        separate(hint, 0)  # the window chains longest at the hint: what the first round would add
    presolve, nw = C >= PRESOLVE_CHUNKS, workers(options, C, budget is not None)
    best: tuple[list[int], Evaluation] | None = (hint, hint_ev) if hint_ev is not None and hint_ev.fits else None
    bound = 0
    while True:
        iterations += 1
        if iterations == 2 and budget is None and c.virtual_stages > 1 and best:  # unproven by its first solve: climb
            cut, cev, paths = climbs(cc, (even_stage_layers(L, C), greedy_cut(cc), best[0]), deadline=deadline)
            best = (cut, cev) if cev.fits and better(cev, best[1]) else best  # as ``uneven.polish`` does
            learn(paths)
        left = deadline - time.perf_counter()
        if left <= 0:
            break
        model.clear_hints()
        for x, h in zip(n, best[0] if best else hint):
            model.add_hint(x, h)
        if budget is not None and budget[0] <= 0:
            break
        st, solver = solve(model, nw, presolve, deadline, budget[0] if budget else None, budget)
        if budget is not None and not (iterations == 1 and st == cp_model.INFEASIBLE):
            budget[0] -= solver.deterministic_time  # a first model proven infeasible spends none (``oneround``)
        if st == cp_model.INFEASIBLE:  # no cut reaches the cutoff
            if best is not None and cutoff is not None and best[1].objective_ns <= cutoff:
                return result(Status.OPTIMAL, best[0], best[1], best[1].objective_ns)
            return result(Status.PRUNED, bound=incumbent) if incumbent is not None else result(Status.INFEASIBLE)
        if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        bound = max(bound, int(solver.best_objective_bound))
        if incumbent is not None and bound > incumbent and (best is None or best[1].objective_ns > incumbent):
            return result(Status.PRUNED, bound=bound)  # proven slower than the plans found: no need to simulate
        if best is not None and bound >= best[1].objective_ns:
            break  # a cut simulated earlier (e.g. a neighbour) reaches the bound: it is optimal
        sol = [solver.value(x) for x in n]
        ev = evaluate(cc, sol)
        if better(ev, best[1] if best else None):
            best = (sol, ev)
        if best is not None and (cutoff is None or best[1].objective_ns < cutoff):
            cutoff = best[1].objective_ns  # the class's optimum is no slower (ties kept: memory)
            model.add(M + cm.end <= cutoff)
        if st == cp_model.OPTIMAL and ev.makespan_ns <= solver.value(M):
            bound = ev.objective_ns
            break
        if st != cp_model.OPTIMAL or (incumbent is not None and bound > incumbent):
            break  # not proven, or slower than the plans already found: stop refining
        # Add the critical path of the solution and of its one-layer neighbours (fewer rounds).
        separate(sol, solver.value(M))
        new_chains = {critical_counts(cc, ev): None}
        for nb, nev in neighbours(cc, sol, ev, deadline):
            if nev.fits and better(nev, best[1] if best else None):
                best = (nb, nev)
            new_chains[critical_counts(cc, nev)] = None
        learn(list(new_chains))
    if best is None:
        return result(Status.UNKNOWN, bound=bound)
    proven = best[1].objective_ns <= bound
    return result(Status.OPTIMAL if proven else Status.FEASIBLE, best[0], best[1], bound)
