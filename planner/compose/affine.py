"""Terms affine in the layer counts of a cut: the vocabulary every formula of the cost model is
written in, so that one function serves a cut given as ints (``cost.evaluate``, the bounds) and one
given as CP-SAT variables (the cut solver's model)."""

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


class Affine(NamedTuple):
    """``const + layer·layers + emb·[holds the embedding] + head·[holds the LM head]``: a term of a
    chunk or a pipeline rank as a function of its layer count (ns or bytes)."""

    const: int = 0
    layer: int = 0
    emb: int = 0
    head: int = 0

    def at(self, layers: Count, emb: bool, head: bool) -> Count:
        fixed = self.const + (self.emb if emb else 0) + (self.head if head else 0)
        return fixed + layers * self.layer if self.layer else fixed  # type: ignore[return-value]

    def plus(self, other: Affine) -> Affine:
        return Affine(self.const + other.const, self.layer + other.layer, self.emb + other.emb, self.head + other.head)

    def per_chunk(self, n: Sequence[Count]) -> list[Count]:
        """The term of every chunk of a cut: chunk 0 holds the embedding, the last one the LM head."""
        out = [self.const + x * self.layer for x in n]
        out[0] += self.emb
        out[-1] += self.head
        return out
