"""Terms affine in the layer counts of a cut: the vocabulary every formula of the cost model is
written in, so that one function serves a cut given as ints (``cost.evaluate``, the bounds) and one
given as CP-SAT variables (the cut solver's model).

A model whose blocks are of two kinds (a mixture of experts with dense leading layers or alternating MoE
layers, ``ops.block_kinds``) has terms affine in two counts per chunk: its layers ``n`` and, of those, its
MoE layers ``k`` — a function of where the chunk sits in the layer sequence (``moe_counts``), so a stage's
time and memory sum the kinds of the layers it holds."""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, TypeVar

if TYPE_CHECKING:
    from ortools.sat.python.cp_model import LinearExpr

#: A layer count, or a term affine in the layer counts: an int when a cut is evaluated, a CP-SAT
#: linear expression inside the cut solver's model.
Count = TypeVar("Count", int, "LinearExpr")


def total(xs: Sequence[Count]) -> Count:
    """Σ xs (non-empty), typed for ints and CP-SAT expressions alike."""
    return functools.reduce(operator.add, xs)


def moe_prefix(kinds: Sequence[bool]) -> tuple[int, ...]:
    """``prefix[i]`` = MoE layers among the first i layers of the sequence (``kinds[j]``: layer j is MoE)."""
    out = [0]
    for moe in kinds:
        out.append(out[-1] + moe)
    return tuple(out)


def moe_counts(prefix: Sequence[int] | None, n: Sequence[int]) -> list[int] | None:
    """The MoE layers of every chunk of the cut ``n`` (chunks in order over the layer sequence whose
    ``moe_prefix`` is ``prefix``); None for a model of one block kind (``prefix`` None)."""
    if prefix is None:
        return None
    out, at = [], 0
    for x in n:
        out.append(prefix[at + x] - prefix[at])
        at += x
    return out


class Affine(NamedTuple):
    """``const + layer·layers + moe·moe_layers + emb·[holds the embedding] + head·[holds the LM head]``: a
    term of a chunk or a pipeline rank as a function of its layer count (ns or bytes). ``layer`` is the
    coefficient of every layer (of a model with two block kinds: of its dense block), ``moe`` what a MoE
    layer adds to it (0 for a model of one block kind, whose ``layer`` is that block's)."""

    const: int = 0
    layer: int = 0
    emb: int = 0
    head: int = 0
    moe: int = 0

    def at(self, layers: Count, emb: bool, head: bool, moe_layers: Count | int = 0) -> Count:
        fixed = self.const + (self.emb if emb else 0) + (self.head if head else 0)
        out = fixed + layers * self.layer if self.layer else fixed
        return out + moe_layers * self.moe if self.moe else out  # type: ignore[return-value]

    def plus(self, other: Affine) -> Affine:
        return Affine(*(a + b for a, b in zip(self, other)))

    def per_chunk(self, n: Sequence[Count], k: Sequence[Count] | None = None) -> list[Count]:
        """The term of every chunk of a cut (``k``: each chunk's MoE layers, ``moe_counts``): chunk 0
        holds the embedding, the last one the LM head."""
        out = [self.const + x * self.layer for x in n]
        if k is not None and self.moe:
            out = [a + y * self.moe for a, y in zip(out, k)]
        out[0] += self.emb
        out[-1] += self.head
        return out

    @property
    def moe_layer(self) -> int:
        """The coefficient of a MoE layer (``layer + moe``)."""
        return self.layer + self.moe

    @property
    def least_layer(self) -> int:
        """The smaller coefficient of the two block kinds (a bound valid whatever kind a layer is)."""
        return min(self.layer, self.layer + self.moe)


NOTHING = Affine()


def scaled(a: Affine, factor: float) -> Affine:
    """Every coefficient of ``a`` × ``factor``, rounded."""
    if a == NOTHING:
        return a
    return Affine(*(round(x * factor) for x in a))
