"""``lp_proto``: the interleaved bound's LP (``interleaved._lp_weights``) and ``oneround``'s (``lp_duals``), written as
one proto, against the call-by-call ``pywraplp`` models they replaced (copied here): the same dual values bit for bit
(so the same weights, bounds and rulings) on the seeded classes of ``small_instances`` (their chain families, end of
step rows and memory caps) and on random rows of the bench's shapes."""

from __future__ import annotations

import random

import numpy as np
from ortools.linear_solver import pywraplp
from test_interleaved_bound import small_instances

from planner.compose.cost import class_costs
from planner.search.bounds import layer_caps
from planner.search.chains import as_arrays, initial_counts, price
from planner.search.interleaved import _family, _lp_weights, most_frequent
from planner.search.oneround import end_rows, lp_duals
from planner.search.space import enumerate_candidates
from planner.specs import ParallelPins, SearchOptions


def lp_cut(solver, C, L, caps, p):
    inf = solver.infinity()
    n = [solver.NumVar(1.0, float(L), f"n{c}") for c in range(C)]
    total = solver.Constraint(float(L), float(L))
    for x in n:
        total.SetCoefficient(x, 1.0)
    for r in range(p):
        if caps[r] < L:
            cap = solver.Constraint(-inf, float(caps[r]))
            for x in n[r::p]:
                cap.SetCoefficient(x, 1.0)
    return n


def plain_lp_weights(a, b, caps, p, L):
    """``interleaved._lp_weights`` as it was, one call a coefficient."""
    solver = pywraplp.Solver.CreateSolver("GLOP")
    K, C = a.shape
    inf = solver.infinity()
    n = lp_cut(solver, C, L, caps, p)
    T = solver.NumVar(-inf, inf, "T")
    rows = []
    for k in range(K):
        vals = a[k].tolist()
        mu = most_frequent(vals)
        row = solver.Constraint(float(b[k]) + mu * L, inf)
        row.SetCoefficient(T, 1.0)
        for x, val in zip(n, vals):
            if val != mu:
                row.SetCoefficient(x, mu - val)
        rows.append(row)
    solver.Minimize(T)
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    lam = np.array([max(0.0, r.dual_value()) for r in rows])
    total = lam.sum()
    return lam / total if total > 0 else None


def plain_lp_duals(C, L, caps, p, chains, ends):
    """``oneround.rules_out``'s LP as it was, one call a coefficient: its rows' duals."""
    lp = pywraplp.Solver.CreateSolver("GLOP")
    inf = lp.infinity()
    n = lp_cut(lp, C, L, caps, p)
    M, D = lp.NumVar(-inf, inf, "M"), lp.NumVar(-inf, inf, "D")
    out = []
    for var, rows in ((M, chains), (D, ends)):
        for coef, const in rows:
            row = lp.Constraint(float(const), inf)
            row.SetCoefficient(var, 1.0)
            for x, a in zip(n, coef):
                if a:
                    row.SetCoefficient(x, -float(a))
            out.append(row)
    lp.Minimize(M + D)
    if lp.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    return [r.dual_value() for r in out]


def same(x, y) -> bool:
    if x is None or y is None:
        return x is None and y is None
    return np.asarray(x, dtype=float).tobytes() == np.asarray(y, dtype=float).tobytes()


def test_seeded_classes_same_duals() -> None:
    pins = ParallelPins(schedule="interleaved-1f1b", tp=1, recompute="none", sequence_parallel=False)
    checked = ruled = 0
    for ctx in small_instances():
        for cand in enumerate_candidates(ctx, pins, SearchOptions()):
            if cand.virtual_stages == 1 or cand.pp == 1 or cand.chunks > ctx.model.num_layers:
                continue
            cc = class_costs(ctx, cand)
            L, p, C = cc.num_layers, cand.pp, cand.chunks
            counts, _ = _family(p, cand.virtual_stages, cc.m)
            coef, const = price(cc, as_arrays(counts))
            a, b = coef.astype(float), const.astype(float)
            caps = [min(L, x) for x in layer_caps(cc.shared, cand, cc.live, L, cc.usable_bytes)]
            for use in ([L] * p, caps):
                assert same(_lp_weights(a, b, use, p, L), plain_lp_weights(a, b, use, p, L)), cand
                checked += 1
            first = initial_counts(cand.schedule, p, cand.virtual_stages, cc.m)
            fc, fk = price(cc, as_arrays(first))
            chains = list(zip(fc.tolist(), fk.tolist()))
            ends = end_rows(cc)
            if ends:
                got = lp_duals(C, L, caps, p, chains, ends)
                assert same(got, plain_lp_duals(C, L, caps, p, chains, ends)), cand
                ruled += got is not None
    assert checked >= 40 and ruled >= 20, (checked, ruled)


def test_random_rows_same_duals() -> None:
    rng = random.Random(7)
    solved = 0
    for _ in range(150):
        p, v = rng.choice([2, 3, 4, 6, 7, 8, 12, 16]), rng.randint(2, 8)
        C = p * v
        L = C + rng.randint(0, 2 * C)
        K = p * rng.randint(1, 4)
        base = rng.randint(10**5, 10**7)
        a = np.array([[base if rng.random() < 0.7 else rng.randint(10**5, 10**8) for _ in range(C)] for _ in range(K)])
        b = np.array([rng.randint(0, 10**10) for _ in range(K)])
        caps = [L] * p if rng.random() < 0.4 else [rng.randint(v, L) for _ in range(p)]
        got = _lp_weights(a.astype(float), b.astype(float), caps, p, L)
        assert same(got, plain_lp_weights(a.astype(float), b.astype(float), caps, p, L))
        solved += got is not None
        rows = list(zip(a.tolist(), b.tolist()))
        ends = [([rng.randint(-(10**6), 10**6) if rng.random() < 0.3 else 0 for _ in range(C)], rng.randint(0, 10**9))]
        assert same(lp_duals(C, L, caps, p, rows, ends), plain_lp_duals(C, L, caps, p, rows, ends))
    assert solved >= 100, solved
