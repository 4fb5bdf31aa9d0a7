"""``search.steady``: 1F1B's steady-state chains in whole layers as a lower bound over the fitting cuts. Its min-max
equals an enumeration of every integer cut (an independent computation); the bound never exceeds a class's best
fitting cut (brute force over every cut, memory levels at which the caps bind, one and two block kinds); and it
is tighter than the search's other bounds on some classes (what it is for: DeepSeek-V3's classes)."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from planner.compose.cost import class_costs, evaluate
from planner.compose.memory import rank_memory
from planner.search.bounds import chain_bound, fitting_bound, layer_caps, pipe_bound
from planner.search.bruteforce import compositions
from planner.search.space import enumerate_candidates
from planner.search.steady import steady_bound, steady_load
from planner.specs import SearchOptions
from tests.test_planner_exact import random_instance
from tests.test_planner_hetero import SEQUENCES, mixed_instance


def _enumerated(n, base, a, c, caps, least):
    best = None
    for cut in itertools.product(*(range(least, cap + 1) for cap in caps)):
        if sum(cut) == n:
            t = max(base + ak * nk + ck for ak, nk, ck in zip(a, cut, c))
            best = t if best is None else min(best, t)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_steady_load_is_the_min_max_over_integer_cuts(seed: int) -> None:
    rng = random.Random(seed)
    p = rng.randint(1, 4)
    least = rng.choice([0, 1])
    caps = [rng.randint(0, 5) for _ in range(p)]
    n = rng.randint(0, 12)
    a = [rng.randint(1, 50) for _ in range(p)]
    c = [rng.randint(0, 80) for _ in range(p)]
    base = rng.randint(0, 100)
    assert steady_load(n, base, a, c, caps, least) == _enumerated(n, base, a, c, caps, least)


def _check(ctx, pins) -> tuple[int, int]:
    """(classes checked, classes where ``steady_bound`` beats the other bounds) at several memory levels."""
    checked = tighter = 0
    for cand in enumerate_candidates(ctx, pins, SearchOptions()):
        if cand.schedule != "1f1b" or cand.virtual_stages > 1 or cand.pp == 1:
            continue
        base = class_costs(ctx, cand)
        if base.chunks > base.num_layers:
            continue
        cuts = list(compositions(base.num_layers, base.chunks))
        peaks = sorted({max(rank_memory(base, n, r) for r in range(cand.pp)) for n in cuts})
        for usable in peaks[:: max(1, len(peaks) // 4)]:
            cc = replace(base, usable_bytes=usable)
            fit = [e.objective_ns for e in (evaluate(cc, n) for n in cuts) if e.fits]
            caps = tuple(layer_caps(cc.shared, cand, cc.live, cc.num_layers, cc.usable_bytes, cc.done))
            steady = steady_bound(cc, caps)
            assert steady <= min(fit), (cand, usable, steady, min(fit))
            assert fitting_bound(cc) <= min(fit)
            others = max(
                pipe_bound(cc.shared, cand, cc.m, cc.num_layers, sum(cc.lag), caps), chain_bound(cc, list(caps))
            )
            tighter += steady > others
            checked += 1
    return checked, tighter


def test_steady_bound_is_valid_and_binds_on_dense_models() -> None:
    checked = tighter = 0
    for seed in range(10):
        k, t = _check(*random_instance(seed))
        checked, tighter = checked + k, tighter + t
    assert checked > 50 and tighter > 0, (checked, tighter)


@pytest.mark.parametrize(("seed", "sequence"), [(s, q) for q in SEQUENCES for s in (1, 3, 8)])
def test_steady_bound_is_valid_and_binds_on_mixed_sequences(seed: int, sequence: str) -> None:
    checked, tighter = _check(*mixed_instance(seed, sequence))
    assert checked > 0 and tighter > 0, (checked, tighter)
