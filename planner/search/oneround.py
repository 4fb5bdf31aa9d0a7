"""An interleaved class of a free schedule ruled out before its first CP-SAT solve (issues 24, 26): its first model
(``cutsolver.cut_model`` with the chains it starts from) proven to have no cut within the k-th best plan's step time
by a cheaper exact argument, so that solve would answer INFEASIBLE and the class PRUNED in its one round. Such a
round spends none of the interleaved classes' CP-SAT budget (``cutsolver.solve_class``), so skipping it leaves every
later solve as it was.

The first model minimises M + D with M ≥ each chain it starts from (an affine function of the cut n: n_c ≥ 1,
Σ n_c = L) and D ≥ each rank's ``step_end.end_parts`` (affine in n: read back from a CP-SAT model of them, the very
rows ``cut_model`` adds), over the cuts that fit, which keep each rank within its layer cap (``screens.class_caps``).
For weights λ_i ≥ 0 on the chains and μ_j ≥ 0 on the end rows, each summing to S, every such cut has
S·(M + D) ≥ Σ λ_i·chain_i(n) + Σ μ_j·end_j(n) ≥ V, the least of that linear function over the capped cuts
(``interleaved._least``: one layer a chunk, the rest greedily on the cheapest chunks with room). When V > S·incumbent
no cut of the model reaches the incumbent. The weights are the duals of the LP relaxation (GLOP) made integers; V is
computed in integers, so the check is exact whatever the LP's tolerance, and never stronger than the model (memory
enters only as the caps). Torchtitan Llama 2 13B on 64 A100: 106 of its 117 interleaved classes ruled out so.

``tests/test_oneround.py`` checks, on a table of seeded classes (among them ones where the check is tight), that every
class ruled out here is one whose first CP-SAT model is infeasible.
"""

from __future__ import annotations

from collections.abc import Sequence

from ortools.sat.python import cp_model

from planner.compose.cost import ClassCosts
from planner.compose.step_end import end_parts, end_terms
from planner.search.chains import Counts, as_arrays, dag_key, initial_counts, price
from planner.search.interleaved import _least
from planner.search.lp_proto import add_row, cut_lp, solve_duals
from planner.search.screens import class_caps

#: The LP's dual weights are scaled to integers summing to this, per block of rows (any non-negative weights are valid).
SCALE = 1 << 30

Row = tuple[list[int], int]  # Σ coef[c]·n_c + const


def end_rows(cc: ClassCosts) -> list[Row] | None:
    """Every rank's ``end_parts`` as affine rows of the cut, as ``cut_model`` states them (D ≥ each); None if one is
    not of the form D + Σ a·n ≥ b (not expected: then the class is left to CP-SAT)."""
    c, C, L = cc.cand, cc.chunks, cc.num_layers
    model = cp_model.CpModel()
    n = [model.new_int_var(1, L - C + 1, f"n{j}") for j in range(C)]
    end = model.new_int_var(0, 1 << 50, "end")
    for r in range(c.pp):
        for part in end_parts(end_terms(cc.shared, c, n, r, None)):
            model.add(end >= part)
    rows: list[Row] = []
    for ct in model.proto.constraints:
        lin = ct.linear
        coef = dict(zip(lin.vars, lin.coeffs))
        if len(lin.domain) != 2 or coef.pop(end.index, 0) != 1 or lin.domain[0] <= cp_model.INT_MIN:
            return None  # D + Σ a·n ∈ [lo, ·]: D ≥ lo − Σ a·n
        rows.append(([-int(coef.get(x.index, 0)) for x in n], int(lin.domain[0])))
    return rows


def _weights(duals: list[float]) -> list[int] | None:
    """The rows' dual values (≥ 0) as integers summing to ``SCALE``."""
    lam = [max(0.0, x) for x in duals]
    total = sum(lam)
    if total <= 0:
        return None
    w = [int(x / total * SCALE) for x in lam]
    w[max(range(len(w)), key=w.__getitem__)] += SCALE - sum(w)
    return w


def lp_duals(C: int, L: int, caps: list[int], p: int, chains: Sequence[Row], ends: Sequence[Row]) -> list[float] | None:
    """The LP min M + D s.t. M ≥ each chain, D ≥ each end row, over the capped real cuts: the rows' dual values
    (chains', then the end rows'), or None when GLOP finds no optimum. One proto (``lp_proto``); each row set as
    ``var − coef·n ≥ const``, its variable first, then the chunks of a non-zero coefficient."""
    pr = cut_lp(C, L, caps, p, ["M", "D"])
    first = len(pr.constraint)
    for var, rows in ((C, chains), (C + 1, ends)):
        for coef, const in rows:
            index = [j for j, a in enumerate(coef) if a]
            add_row(pr, float(const), var, index, [-float(coef[j]) for j in index])
    return solve_duals(pr, first)


def rules_out(cc: ClassCosts, chains: Sequence[Row], incumbent: int) -> bool:
    """Whether no cut within the caps has max(chains) + max(end rows) ≤ ``incumbent`` (so the first model, which has
    those rows and more, is infeasible at that cutoff)."""
    L, C, p = cc.num_layers, cc.chunks, cc.cand.pp
    ends = end_rows(cc)
    if cc.moe_prefix is not None or not chains or not ends or C > L:
        return False  # a model of two block kinds (its rows have MoE terms): left to CP-SAT
    caps = [min(L, x) for x in class_caps(cc)]
    duals = lp_duals(C, L, caps, p, chains, ends)
    if duals is None:
        return False
    on_m, on_d = duals[: len(chains)], duals[len(chains) :]
    lam, mu = _weights(on_m), _weights(on_d)
    if lam is None or mu is None:
        return False
    weighted, v = [0] * C, 0
    for w, (coef, const) in [*zip(lam, chains), *zip(mu, ends)]:
        if w:
            v += w * const
            for j, a in enumerate(coef):
                weighted[j] += w * a
    least = _least(weighted, caps, p, L)  # type: ignore[arg-type]  # ints: exact
    if least is None:
        return False  # no cut within the caps: left to CP-SAT (it proves the class INFEASIBLE, not PRUNED)
    return int(least) + v > SCALE * incumbent


def one_round(cc: ClassCosts, incumbent: int, learned: dict | None, seeds: list[Counts]) -> int | None:
    """``rules_out`` on the chains a budgeted class's first model starts from (``cutsolver.initial_chains``, the
    chains its graph learned, ``seeds``): the incumbent when it rules the class out, after learning ``seeds`` as
    ``cutsolver.solve_class`` would have before its solve; else None (solve it)."""
    if cc.moe_prefix is not None:
        return None
    c = cc.cand
    pool = learned.setdefault(dag_key(cc), {}) if learned is not None else {}
    counts = list(dict.fromkeys([*initial_counts(c.schedule, c.pp, c.virtual_stages, cc.m), *pool, *seeds]))
    coef, const = price(cc, as_arrays(counts))
    if not rules_out(cc, list(zip(coef.tolist(), const.tolist())), incumbent):
        return None
    pool.update(dict.fromkeys(seeds))
    return incumbent
