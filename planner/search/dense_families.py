"""A model of one block kind queued one item a family (``frontier.Frontier``; issues 24, 26): the classes the
enumeration hands over as one family (``families.Family``: rows of one class each, its ZeRO stage and CP exchange;
every other field the same, and so ``frontier.lean_key`` and the first key each class would enter the queue at, a
CP class's FLOOR key ``floor_bound``) enter as one FAMILY item at that key and the least member's order
(``IN_FAMILY``: the least ``simplicity``). At the front the item is raised to the members' lean bound
(one, their ``lean_key`` being one) and, at the front again, unfolded into its classes at their LEAN keys: what each
member's own item became there, since the queue leaves its classes in the order of their final keys however lazily
they are raised (a raise only raises a key, and the family's key and order are ≤ each member's). Llama 3 405B at
131K tokens queues 6,660 items instead of 40,320, and unfolds only the families whose lean bound the search reaches.
A family without a FLOOR key (no CP, or no FLOP floor: ``floors.layer_floor``, e.g. TP overlap) enters class by class at its
lean bound, as before: there the family's item would defer nothing (measured: Llama 3 70B FP8 on torchtitan 1.34 →
1.37 s CPU with it).
``tests/test_dense_families.py`` checks the pops, ``remaining`` and ``by_quick_bound`` against the class-by-class
queue.
"""

from __future__ import annotations

from collections.abc import Callable

from planner.compose.context import Context
from planner.compose.cost import Candidate
from planner.search.bounds import floor_bound
from planner.search.families import Chain, Family


def dense_families(
    ctx: Context,
    families: list[Family],
    floors: dict[tuple, int | None],
    layer_floors: dict[tuple, tuple[int, int] | None],
    lean_key: Callable[[Candidate], tuple],
) -> tuple[list[tuple[int, Candidate, Chain]], list[Candidate]]:
    """(FLOOR key, least member, ``Chain`` of one group) of each family of one (ep, etp) pair with a FLOOR key, and
    the classes of the others, to be queued one by one. ``floors``/``layer_floors``: the frontier's
    memos of ``floor_bound`` (by ``lean_key``)."""
    out: list[tuple[int, Candidate, Chain]] = []
    rest: list[Candidate] = []
    for pairs, rows in families:
        if len(pairs) != 1:
            rest += [c for row in rows for c in row]
            continue
        c0, b = rows[0][0], None
        if c0.cp > 1:
            k = lean_key(c0)
            b = floors[k] if k in floors else floors.setdefault(k, floor_bound(ctx, c0, layer_floors))
        if b is None:  # keyed by its lean bound at once: as many items, the family's would only add a pop and pushes
            rest += [c for row in rows for c in row]
            continue
        least = min(rows, key=lambda row: (row[0].zero_stage, row[0].cp_comm))[0]
        out.append((b, least, Chain(rows, [[0]])))
    return out, rest
