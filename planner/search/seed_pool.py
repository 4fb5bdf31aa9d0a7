"""The classes ``driver.expert_seeds`` draws its expert-like configurations from, grouped once: TP the largest degree
within a node (else the smallest), sequence parallelism where that TP has it, by (recompute, pp), each group in the
order of ``cands``. The former code filtered the pool again for every recompute level and every pp (DeepSeek-V3 on
2,048 H100: 95,440 classes, three levels × its pp degrees, none fitting: ~35 ms a plan); ``tests/test_search_fast_paths.py``
checks the groups against those filters.
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import attrgetter, eq

from planner.compose.cost import Candidate

_TP = attrgetter("tp")


def seed_pool(cands: list[Candidate], gpus_per_node: int) -> dict[tuple[str, int], list[Candidate]]:
    """The pool of ``cands`` (not empty) by (recompute, pp): ``[c for c in pool if c.recompute == r and c.pp == pp]``
    for each key, where pool is the classes at that TP and sequence parallelism."""
    tps = set(map(_TP, cands))
    tp = max((t for t in tps if t <= gpus_per_node), default=min(tps))
    pool = list(compress(cands, map(eq, map(_TP, cands), repeat(tp))))  # in C: ~3× faster than a comprehension
    sp = any(map(attrgetter("sequence_parallel"), pool))
    groups: dict[tuple[str, int], list[Candidate]] = {}
    for c in pool:
        if c.sequence_parallel == sp:
            groups.setdefault((c.recompute, c.pp), []).append(c)
    return groups
