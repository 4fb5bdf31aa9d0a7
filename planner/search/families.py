"""A mixture of experts' families as the enumeration builds them (issues 23, 26): the queue's one item per family
(``frontier.Key.FAMILY``: classes that differ only in ZeRO stage, CP exchange and (ep, etp)) without regrouping
every class.

``space.enumerate_classes`` hands each family over as ``(pairs, rows)``: its (ep, etp) pairs, and one row per (ZeRO
stage, CP exchange) the stack runs, the row's classes at those pairs in their order (``Candidate.family``). Every row
has the same pairs, so ``frontier.family_chain``'s groups (members by the MoE block floor F + B of their pair, least
first) are the same groups of pair indices in every row: found once per (cp, mbs, tp, SP, recompute, TP overlap,
pairs) and shared by the families of other pp, schedules, v and dp. A family's least member by ``frontier.IN_FAMILY``
(ZeRO stage, ep, etp, CP exchange) over any set of pairs is the least (ZeRO stage, CP exchange) row's class at the
least pair of that set. ``tests/test_moe_families.py`` checks ``chain`` against ``frontier.family_chain`` and the
least members against ``min(…, key=IN_FAMILY)`` on every family of the catalog's mixtures of experts.
"""

from __future__ import annotations

from planner.compose.context import Context
from planner.compose.context_parallel import cp_view
from planner.compose.cost import Candidate
from planner.compose.layer_group import moe_floor

#: A family as the enumeration builds it: its (ep, etp) pairs and its rows (one per ZeRO stage and CP exchange)
Family = tuple[list[tuple[int, int]], list[list[Candidate]]]


def pattern(ctx: Context, c0: Candidate, pairs: list[tuple[int, int]], memo: dict) -> tuple[list[list[int]], list[int]]:
    """(the pair indices of each ``family_chain`` group, least floor first; for each group, the index of the least
    pair of it and every later group) for a family of class ``c0``'s (cp, mbs, tp, SP, recompute, TP overlap) at
    ``pairs``: memoised in ``memo`` by those and the pairs."""
    at = (c0.micro_batch_size, c0.tp, c0.sequence_parallel, c0.recompute, c0.tp_comm_overlap)
    key = (c0.cp, *at, tuple(pairs))
    out = memo.get(key)
    if out is None:
        view = cp_view(ctx, c0.cp)
        groups: dict[int, list[int]] = {}
        for j, pair in enumerate(pairs):
            groups.setdefault(sum(moe_floor(view, *at, *pair)), []).append(j)
        idx = [groups[w] for w in sorted(groups)]
        least: list[int] = []
        best = None
        for g in reversed(idx):
            j = min(g, key=pairs.__getitem__)
            if best is None or pairs[j] < pairs[best]:
                best = j
            least.append(best)
        out = memo[key] = (idx, least[::-1])
    return out


class Chain:
    """A family's ``frontier.family_chain`` as the pair indices of each group (``pattern``) in its rows: group ``i``
    is built when the queue unfolds it (``frontier.Frontier.members``: DeepSeek-V3 on 2,048 GPUs unfolds 7,761 of
    35,790), its members in ``family_chain``'s order (row by row, each row's in pair order)."""

    __slots__ = ("idx", "rows")

    def __init__(self, rows: list[list[Candidate]], idx: list[list[int]]):
        self.rows, self.idx = rows, idx

    def __len__(self) -> int:
        return len(self.idx)

    def __getitem__(self, i: int) -> list[Candidate]:
        return [row[j] for row in self.rows for j in self.idx[i]]

    def first(self, i: int) -> Candidate:
        """``self[i][0]``, without building the group."""
        return self.rows[0][self.idx[i][0]]


def chain(ctx: Context, family: Family, memo: dict) -> tuple[Chain, list[Candidate]]:
    """A family's ``frontier.family_chain`` (``Chain``) and, per group, the least member (``IN_FAMILY``) of that group
    and every later one."""
    pairs, rows = family
    idx, least = pattern(ctx, rows[0][0], pairs, memo)
    first = min(rows, key=lambda row: (row[0].zero_stage, row[0].cp_comm))
    return Chain(rows, idx), [first[j] for j in least]
