"""The cut LPs of the interleaved bound (``interleaved._lp_weights``) and of ``oneround.rules_out``, written as one
``MPModelProto`` and loaded into GLOP at once (issue 26).

Setting the rows' coefficients one ``pywraplp`` call at a time cost ~0.7 ms an LP (K chains × C chunks calls); the
proto holds the very same model — variables, bounds, rows and each row's coefficients in the order the calls set
them — so GLOP solves the same LP and answers the same duals (``tests/test_lp_proto.py`` compares them bit for bit
with the call-by-call model on seeded classes). MLPerf v3.1 GPT-3 on 1,344 nodes: 106 LPs, ~0.15 → ~0.08 s CPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ortools.linear_solver import linear_solver_pb2, pywraplp

INF = math.inf


def cut_lp(C: int, L: int, caps: Sequence[int], p: int, free: Sequence[str]) -> linear_solver_pb2.MPModelProto:
    """A cut's layer counts as LP variables n0 … n{C−1} (n_c ≥ 1, Σ n = L, Σ_{c on rank r} n_c ≤ caps[r] where
    caps[r] < L), then the variables ``free`` (unbounded, objective coefficient 1:
    the LP minimises their sum)."""
    pr = linear_solver_pb2.MPModelProto()
    var = pr.variable
    for c in range(C):
        var.add(lower_bound=1.0, upper_bound=float(L), name=f"n{c}")
    for name in free:
        var.add(lower_bound=-INF, upper_bound=INF, name=name, objective_coefficient=1.0)
    pr.constraint.add(lower_bound=float(L), upper_bound=float(L), var_index=range(C), coefficient=[1.0] * C)
    for r in range(p):
        if caps[r] < L:
            own = range(r, C, p)
            pr.constraint.add(lower_bound=-INF, upper_bound=float(caps[r]), var_index=own, coefficient=[1.0] * len(own))
    return pr


def add_row(pr: linear_solver_pb2.MPModelProto, lo: float, first: int, index: list[int], coef: list[float]) -> None:
    """The row ``x_first + Σ coef·x_index ≥ lo`` (``first`` set before the others, as the call-by-call model sets it)."""
    pr.constraint.add(lower_bound=lo, upper_bound=INF, var_index=[first, *index], coefficient=[1.0, *coef])


def solve_duals(pr: linear_solver_pb2.MPModelProto, first: int) -> list[float] | None:
    """GLOP on ``pr``: the dual values of its rows from ``first`` on, or None when it finds no optimum."""
    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver.LoadModelFromProto(pr) or solver.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    out = linear_solver_pb2.MPSolutionResponse()
    solver.FillSolutionResponseProto(out)
    return list(out.dual_value[first:])
