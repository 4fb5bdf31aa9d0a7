"""``grad_peaks.undominated`` (the vectorised dominance filter of ``schedule_peaks``) against the pairwise
definition (``_dominates`` over every other peak), and ``schedule_peaks`` against a plain walk of the orders."""

from __future__ import annotations

import pytest

from planner.compose.grad_peaks import Peak, _both_peaks, _dominates, periodic_m, schedule_peaks, undominated
from planner.compose.peak_walk import all_rank_states, rank_arrays, vector_states, walk_states
from planner.compose.simulate import rank_orders

SHAPES = [
    (s, pp, v, m)
    for s, vs in (("gpipe", (1,)), ("1f1b", (1,)), ("interleaved-1f1b", (2, 3, 4, 7)))
    for pp in (1, 2, 3, 4, 8)
    for v in vs
    for m in (1, 3, 8, 16, 24)
    if s != "interleaved-1f1b" or m % pp == 0
]


def _walk(schedule: str, pp: int, v: int, m: int, r: int) -> list[Peak]:
    """Rank r's peaks with the chunks done at each, by a plain walk (every local maximum, every first backward)."""
    ops, alive, done, out = rank_orders(schedule, pp, v, m)[r], {}, set(), []
    for i, (kind, _, c) in enumerate(ops):
        alive[c] = alive.get(c, 0) + (1 if kind == "F" else -1)
        first_b = kind == "B" and c not in done
        done |= {c} if kind == "B" else set()
        if (kind == "F" and (i + 1 == len(ops) or ops[i + 1][0] == "B")) or first_b:
            out.append((tuple(sorted(alive.items())), tuple(sorted(done))))
    return sorted(set(out))


@pytest.mark.parametrize("shape", SHAPES)
def test_schedule_peaks_against_pairwise(shape: tuple[str, int, int, int]) -> None:
    schedule, pp, v, m = shape
    live, done = schedule_peaks(schedule, pp, v, m, True)
    assert done is not None
    for r in range(pp):
        peaks = _walk(schedule, pp, v, m, r)
        keep = sorted(p for p in peaks if not any(q != p and _dominates(q, p) for q in peaks))
        assert list(zip(live[r], done[r])) == keep
        assert undominated(peaks, pp, v) == [not any(q != p and _dominates(q, p) for q in peaks) for p in peaks]


@pytest.mark.parametrize("shape", [*SHAPES, ("interleaved-1f1b", 4, 5, 64), ("1f1b", 8, 1, 200)])
def test_rank_arrays_and_both_walks(shape: tuple[str, int, int, int]) -> None:
    """``peak_walk.rank_arrays`` is ``rank_orders`` op by op; its loop and its numpy walk give the same states."""
    schedule, pp, v, m = shape
    for r, ops in enumerate(rank_orders(schedule, pp, v, m)):
        fwd, chunks = rank_arrays(schedule, pp, v, m, r)
        assert list(zip(fwd.tolist(), chunks.tolist())) == [(k == "F", c // pp) for k, _, c in ops]
        assert walk_states(schedule, pp, v, m, r) == vector_states(schedule, pp, v, m, r)


@pytest.mark.parametrize(
    "shape",
    [
        *SHAPES,
        ("interleaved-1f1b", 4, 5, 64),
        ("interleaved-1f1b", 16, 4, 48),
        ("interleaved-1f1b", 16, 7, 16),
        ("interleaved-1f1b", 32, 3, 96),
        ("interleaved-1f1b", 8, 8, 8),
        ("interleaved-1f1b", 2, 8, 16),  # 256 ops: the first numpy walk
        ("interleaved-1f1b", 8, 2, 64),
        ("interleaved-1f1b", 32, 8, 64),  # codes past 62 bits: the row-wise unique
        ("interleaved-1f1b", 2, 61, 4),  # the widest bit mask
        ("interleaved-1f1b", 2, 62, 4),  # past it: rank by rank (v = 63 broke the bit masks: 126 layers, pp 2)
        ("interleaved-1f1b", 2, 63, 4),
        ("1f1b", 8, 1, 200),
        ("1f1b", 64, 1, 128),
        ("gpipe", 4, 1, 200),
    ],
)
def test_all_ranks_walk(shape: tuple[str, int, int, int]) -> None:
    """``peak_walk.all_rank_states`` (every rank's numpy walk at once) is the loop's, rank by rank: the same states
    in the same order."""
    schedule, pp, v, m = shape
    assert all_rank_states(schedule, pp, v, m) == tuple(walk_states(schedule, pp, v, m, r) for r in range(pp))


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved-1f1b"])
@pytest.mark.parametrize("pp", [1, 2, 3, 4, 5, 8])
def test_periodic_m_keeps_the_peaks(schedule: str, pp: int) -> None:
    """``schedule_peaks`` walks ``periodic_m``'s fewer micro-batches: the same peaks, chunks done and order as a walk
    of all m (``_both_peaks``, unmemoised), on every m up to well past the reduction's threshold."""
    walk = _both_peaks
    for v in (1,) if schedule == "1f1b" else (1, 2, 3, 5, 8):
        reduced = 0
        for m in range(pp if schedule != "1f1b" else 1, 4 * (2 * v + 3) * pp + 1, pp if schedule != "1f1b" else 1):
            m2 = periodic_m(schedule, pp, v, m)
            assert m2 <= m and (m - m2) % pp == 0
            if m2 < m:
                reduced += 1
                assert walk(schedule, pp, v, m) == walk(schedule, pp, v, m2), (schedule, pp, v, m, m2)
        assert reduced > 0
    assert periodic_m("gpipe", pp, 1, 64) == 64


@pytest.mark.parametrize(
    "shape", [("interleaved-1f1b", 8, 7, 512), ("interleaved-1f1b", 16, 3, 80), ("1f1b", 32, 1, 512)]
)
def test_periodic_m_on_the_search_shapes(shape: tuple[str, int, int, int]) -> None:
    """As above on shapes the bench's searches walk (Llama 3 70B on 64 H100, DeepSeek-V3 on 2,048)."""
    schedule, pp, v, m = shape
    assert periodic_m(schedule, pp, v, m) < m
    assert _both_peaks(schedule, pp, v, m) == _both_peaks(schedule, pp, v, periodic_m(schedule, pp, v, m))


@pytest.mark.parametrize(
    "shape", [("interleaved-1f1b", 2, 63, 2), ("interleaved-1f1b", 2, 63, 6), ("interleaved-1f1b", 2, 64, 4)]
)
def test_wide_undominated_against_pairwise(shape: tuple[str, int, int, int]) -> None:
    """v > 62 (the chunks done as boolean rows, not an int64 mask; torchtitan's 405B CP rows at pp 2, v 63): the
    filter and ``schedule_peaks`` against the pairwise definition on every rank's peaks."""
    schedule, pp, v, m = shape
    live, done = schedule_peaks(schedule, pp, v, m, True)
    assert done is not None
    for r in range(pp):
        peaks = _walk(schedule, pp, v, m, r)
        pairwise = [not any(q != p and _dominates(q, p) for q in peaks) for p in peaks]
        assert undominated(peaks, pp, v) == pairwise
        assert list(zip(live[r], done[r])) == sorted(p for p, ok in zip(peaks, pairwise) if ok)


def _former_peaks(schedule: str, pp: int, v: int, m: int, grads: bool) -> tuple:
    """``grad_peaks._peaks`` as it was before it filtered the walk's states as rows (every peak made items first, then
    ``undominated`` over them): what the row filter must reproduce, order included."""
    from planner.compose.grad_peaks import _items, _walks

    lives, dones = [], []
    for r, (with_done, acts) in enumerate(_walks(schedule, pp, v, m)):
        as_items: dict = {}
        if not grads:
            act_set = {_items(as_items, pp, r, counts, sn) for sn, counts in acts}
            plain = [(p, ()) for p in act_set]
            lives.append(tuple(p[0] for p, ok in zip(plain, undominated(plain, pp, v)) if ok))
            continue
        peak_set = {
            (_items(as_items, pp, r, counts, sn), tuple(x * pp + r for x in dn)) for sn, counts, dn in with_done
        }
        peaks = list(peak_set)
        keep = sorted(p for p, ok in zip(peaks, undominated(peaks, pp, v)) if ok)
        lives.append(tuple(p[0] for p in keep))
        dones.append(tuple(p[1] for p in keep))
    return tuple(lives), (tuple(dones) if grads else None)


@pytest.mark.parametrize(
    "shape",
    [
        *SHAPES,
        ("interleaved-1f1b", 16, 7, 32),
        ("interleaved-1f1b", 16, 6, 48),
        ("interleaved-1f1b", 32, 3, 64),
        ("interleaved-1f1b", 32, 3, 96),
        ("interleaved-1f1b", 8, 8, 16),
        ("interleaved-1f1b", 2, 63, 6),  # the chunks done as boolean rows
        ("1f1b", 64, 1, 128),
        ("gpipe", 4, 1, 24),
    ],
)
def test_row_filter_is_the_former_filter(shape: tuple[str, int, int, int]) -> None:
    """``_peaks`` (the dominance filter over the walk's states as rows, items made only of the peaks kept where the
    order is sorted) gives the former code's peaks, chunks done and order, both variants."""
    from planner.compose.grad_peaks import _peaks

    schedule, pp, v, m = shape
    for grads in (False, True):
        assert _peaks.__wrapped__(schedule, pp, v, m, grads) == _former_peaks(schedule, pp, v, m, grads)


@pytest.mark.parametrize("seed", range(12))
def test_packed_rows_are_the_chunk_by_chunk_comparison(seed: int) -> None:
    """``rows_undominated``'s packed copies (one int64 a peak, a guard bit a chunk) against the chunk-by-chunk
    comparison, on random rows: copies up to 2^k − 1 for widths that fit and that do not (the fallback), ties and
    duplicates included, with and without chunks done."""
    import numpy as np

    from planner.compose.grad_peaks import rows_undominated

    rng = np.random.default_rng(seed)
    for v in (1, 2, 3, 5, 7, 8, 12):
        for top in (1, 3, 40, 255, 1000):
            n = int(rng.integers(1, 60))
            vecs = rng.integers(0, top + 1, size=(n, v)).astype(np.int64)
            vecs[rng.integers(0, n, size=n // 3)] = vecs[rng.integers(0, n, size=n // 3)]  # some equal rows
            masks = rng.integers(0, 1 << v, size=n).astype(np.int64) if seed % 2 else np.zeros(n, dtype=np.int64)
            assert rows_undominated(vecs, masks, False) == rows_undominated(vecs, masks, False, pack=False)
