"""The cut solver's model of a model of two block kinds (dense and MoE blocks: ``compose.blocks``): each chunk's MoE
layers as variables that follow from where the cut puts the chunk (``moe_layer_vars``), and chains with a
coefficient per chunk's MoE layers (``as_chains``). With one block kind none of this is built."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
from ortools.sat.python import cp_model

if TYPE_CHECKING:
    from planner.compose.cost import ClassCosts
    from planner.search.cutsolver import Chain


def as_chains(
    cc: ClassCosts, family: tuple[np.ndarray, ...], coef: np.ndarray, const: np.ndarray, rows: Iterable[int]
) -> list[Chain]:
    """Rows of a priced family (``chains.price``) as chains; with a model of two block kinds, each with its MoE
    layers' coefficients (what a MoE layer adds to each of its forwards and backwards)."""
    from planner.search.cutsolver import Chain

    moe = family[0] * cc.f_moe + family[1] * cc.b_moe if cc.moe_prefix is not None else None
    return [
        Chain(
            tuple(int(x) for x in coef[i].tolist()),
            int(const[i]),
            tuple(int(x) for x in moe[i].tolist()) if moe is not None else (),
        )
        for i in rows
    ]


def sparse(xs: list[cp_model.IntVar], coef: tuple[int, ...], total: int) -> tuple[cp_model.LinearExpr, int]:
    """Σ coef[i]·xs[i] as Σ (coef[i] − λ)·xs[i] + λ·total, given Σ xs = total (λ the most frequent coefficient)."""
    lam = max(set(coef), key=coef.count)
    idx = [i for i, k in enumerate(coef) if k != lam]
    return cp_model.LinearExpr.weighted_sum([xs[i] for i in idx], [coef[i] - lam for i in idx]), lam * total


def moe_layer_vars(model: cp_model.CpModel, n: list[cp_model.IntVar], prefix: tuple[int, ...]) -> list[cp_model.IntVar]:
    """Each chunk's MoE layers as variables: chunk c ends after layer e_c = n_0 + … + n_c, and holds
    prefix[e_c] − prefix[e_{c−1}] of them (``affine.moe_prefix``: the layer sequence, by element constraints)."""
    C, L = len(n), len(prefix) - 1
    at: list[cp_model.IntVar | int] = [0]
    for c in range(C - 1):
        e = model.new_int_var(c + 1, L - (C - 1 - c), f"e{c}")
        model.add(e == sum(n[: c + 1]))
        before = model.new_int_var(0, prefix[-1], f"K{c}")
        model.add_element(e, list(prefix), before)
        at.append(before)
    at.append(prefix[-1])
    k = [model.new_int_var(0, min(prefix[-1], L - C + 1), f"k{c}") for c in range(C)]
    for c in range(C):
        model.add(k[c] == at[c + 1] - at[c])
    return k
