"""Random budgeted cut models of the shape ``cutsolver.solve_class`` builds, and their optimum by brute force, shared
by the portfolio tests: layer counts ``n`` (each ≥ 1) summing to ``L``, a makespan ``M`` above affine chains, an end
of step ``D`` above affine parts, memory rows, sometimes a cutoff on ``M + D``; minimise ``M + D``."""

from __future__ import annotations

import itertools

from ortools.sat.python import cp_model


def build(data: dict) -> tuple[cp_model.CpModel, list[cp_model.IntVar]]:
    """The CP-SAT model of ``data`` (``C``, ``L``, ``chains``, ``ends``, ``mems``, ``usable``, optional ``cutoff``)."""
    C, L = data["C"], data["L"]
    model = cp_model.CpModel()
    n = [model.new_int_var(1, L - C + 1, f"n{c}") for c in range(C)]
    model.add(sum(n) == L)
    M, D = model.new_int_var(0, 1 << 50, "makespan"), model.new_int_var(0, 1 << 50, "end")
    for coef, const in data["chains"]:
        model.add(M >= sum(a * x for a, x in zip(coef, n)) + const)
    for coef, const in data["ends"]:
        model.add(D >= sum(a * x for a, x in zip(coef, n)) + const)
    for m, u in zip(data["mems"], data["usable"]):
        model.add(sum(g * x for g, x in zip(m, n)) <= u)
    if "cutoff" in data:
        model.add(M + D <= data["cutoff"])
    model.minimize(M + D)
    return model, n


def brute_force(data: dict) -> int | None:
    """The least M + D over every cut (None: no cut fits)."""
    C, L, best = data["C"], data["L"], None
    for bars in itertools.combinations(range(1, L), C - 1):  # every composition of L into C positive parts
        cut = [b - a for a, b in zip((0, *bars), (*bars, L))]
        if any(sum(g * x for g, x in zip(m, cut)) > u for m, u in zip(data["mems"], data["usable"])):
            continue
        val = max(sum(a * x for a, x in zip(co, cut)) + k for co, k in data["chains"])
        val += max(sum(a * x for a, x in zip(co, cut)) + k for co, k in data["ends"])
        if val <= data.get("cutoff", val) and (best is None or val < best):
            best = val
    return best
