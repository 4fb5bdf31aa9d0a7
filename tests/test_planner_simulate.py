"""The schedule simulator against independent results: the paper's bubble formulas for uniform
stages, GPipe's closed form for uneven ones, critical paths, and activation copies in flight."""

from __future__ import annotations

import random

import pytest

from planner.compose.cost import live_vectors
from planner.compose.simulate import gpipe_makespan, path_length, rank_orders, simulate


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(1, 1), (2, 4), (4, 4), (4, 8), (8, 32), (3, 2)])
def test_uniform_bubble_matches_paper(schedule: str, p: int, m: int) -> None:
    """Narayanan et al. SC'21 §2.2: bubble / ideal = (p − 1) / m."""
    f, b = 30, 60
    sim = simulate(schedule, p, 1, m, [f] * p, [b] * p)
    ideal = m * (f + b)
    assert (sim.makespan - ideal) * m == (p - 1) * ideal


@pytest.mark.parametrize("p,v,m", [(2, 2, 2), (2, 2, 4), (4, 2, 8), (4, 3, 8), (2, 4, 6), (4, 2, 4)])
def test_interleaved_bubble_matches_paper(p: int, v: int, m: int) -> None:
    """Interleaved 1F1B: bubble / ideal = (p − 1) / (v · m) with per-chunk times (f, b) / v."""
    f, b = 20 * v, 40 * v  # per chunk: each rank holds v chunks of 1/v of its layers
    fc, bc = f // v, b // v
    sim = simulate("interleaved-1f1b", p, v, m, [fc] * (p * v), [bc] * (p * v))
    ideal = m * (f + b)
    assert (sim.makespan - ideal) * v * m == (p - 1) * ideal


def _random_case(rng: random.Random, v: int) -> tuple[int, int, list[int], list[int], list[int]]:
    p = rng.randint(2 if v > 1 else 1, 5)
    m = rng.randint(1, 4) * (p if v > 1 else 1) + (0 if v > 1 else rng.randint(0, 5))
    c = p * v
    return (
        p,
        max(m, 1),
        [rng.randint(1, 30) for _ in range(c)],
        [rng.randint(1, 60) for _ in range(c)],
        [rng.randint(0, 9) for _ in range(c - 1)],
    )


@pytest.mark.parametrize("seed", range(5))
def test_gpipe_closed_form_with_uneven_stages(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        p, m, f, b, lag = _random_case(rng, 1)
        assert simulate("gpipe", p, 1, m, f, b, lag).makespan == gpipe_makespan(f, b, lag, m)


@pytest.mark.parametrize("schedule,v", [("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 2), ("interleaved-1f1b", 3)])
def test_critical_path_is_the_makespan_and_a_lower_bound(schedule: str, v: int) -> None:
    """The reported critical path sums to the makespan; re-timed with other durations it stays a
    lower bound (what makes the search's lazy cuts valid)."""
    rng = random.Random(v)
    for _ in range(100):
        p, m, f, b, lag = _random_case(rng, v)
        sim = simulate(schedule, p, v, m, f, b, lag)
        assert path_length(sim.critical_path, sim.critical_lags, f, b, lag) == sim.makespan
        f2 = [rng.randint(1, 30) for _ in f]
        b2 = [rng.randint(1, 60) for _ in b]
        other = simulate(schedule, p, v, m, f2, b2, lag).makespan
        assert path_length(sim.critical_path, sim.critical_lags, f2, b2, lag) <= other


@pytest.mark.parametrize("schedule,v", [("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 2)])
def test_every_operation_runs_once_after_its_dependency(schedule: str, v: int) -> None:
    p, m = 3, 6
    c = p * v
    sim = simulate(schedule, p, v, m, [5] * c, [9] * c, [2] * (c - 1))
    ops = {(k, j, ch): (s, e) for _, k, j, ch, s, e in sim.ops}
    assert len(ops) == len(sim.ops) == 2 * m * c
    for (k, j, ch), (s, _) in ops.items():
        if k == "F" and ch > 0:
            assert s >= ops[("F", j, ch - 1)][1] + 2
        if k == "B":
            dep = ("B", j, ch + 1) if ch < c - 1 else ("F", j, ch)
            assert s >= ops[dep][1]


@pytest.mark.parametrize("p,m", [(4, 8), (4, 2), (1, 3), (6, 6)])
def test_activation_copies_in_flight(p: int, m: int) -> None:
    """1F1B: stage i holds min(p − i, m) micro-batches; GPipe holds m (formulas.md), counted here
    independently from the operation orders."""
    for schedule, expect in (("1f1b", lambda i: min(p - i, m)), ("gpipe", lambda i: m)):
        for i, ops in enumerate(rank_orders(schedule, p, 1, m)):
            alive = peak = 0
            for kind, _, _ in ops:
                alive += 1 if kind == "F" else -1
                peak = max(peak, alive)
            assert peak == expect(i)
            assert live_vectors(schedule, p, 1, m)[i] == [{i: expect(i)}]


def test_interleaved_first_rank_memory_matches_megatron_factor() -> None:
    """Megatron: interleaving raises stage 0's in-flight activations by 1 + (p − 1)/(p·v) over 1F1B's p
    (in units of a full stage's activations)."""
    p, v, m = 4, 2, 8
    peak = max(sum(vec.values()) for vec in live_vectors("interleaved-1f1b", p, v, m)[0])
    # each chunk holds 1/v of the rank's layers
    assert peak / v == pytest.approx(p * (1 + (p - 1) / (p * v)))


def test_interleaved_needs_divisible_microbatches() -> None:
    with pytest.raises(ValueError, match="divisible by pp"):
        rank_orders("interleaved-1f1b", 4, 2, 6)


@pytest.mark.parametrize("seed", range(4))
def test_long_1f1b_extrapolated_from_its_periodic_steady_state_is_exact(seed: int) -> None:
    """``periodic_1f1b`` (used for long 1F1B pipelines when no timeline is recorded) gives the full
    simulation's makespan, rank finishes, critical path and lags exactly; and it is really used: most
    random cases reach a periodic steady state within the probe."""
    from planner.compose.simulate import periodic_1f1b, probe_rounds

    rng = random.Random(seed)
    used = 0
    for _ in range(60):
        p = rng.randint(1, 8)
        m = 2 * (p + probe_rounds(p)) + rng.randint(0, 90)
        hi = rng.choice([5, 1000, 10**7])
        f, b = [rng.randint(1, hi) for _ in range(p)], [rng.randint(1, hi) for _ in range(p)]
        lag = [rng.choice([0, rng.randint(0, hi)]) for _ in range(p - 1)]
        full = simulate("1f1b", p, 1, m, f, b, lag, record=True)  # the timeline: every operation simulated
        fast = simulate("1f1b", p, 1, m, f, b, lag, record=False)
        assert (fast.makespan, fast.rank_finish) == (full.makespan, full.rank_finish)
        assert (fast.critical_path, fast.critical_lags) == (full.critical_path, full.critical_lags)
        used += periodic_1f1b(p, m, f, b, lag) is not None
    assert used >= 45, used


def test_long_1f1b_with_a_period_of_several_rounds() -> None:
    """Ties between the slowest stages (Llama 3 70B, TP4×PP8, cut [8, 9, 10, 11, 11, 10, 11, 10]) make the
    steady state repeat every 3 rounds: still extrapolated, still exact; and uniform stages give the
    paper's bubble (p − 1)/m at m = 512."""
    from planner.compose.simulate import _period, _run, periodic_1f1b, probe_rounds

    f = [59906084, 67003920, 74448800, 81893680, 74448800, 81893680, 81893680, 81537671]
    b = [113034986, 126743886, 140826540, 154909194, 140826540, 154909194, 154909194, 154777850]
    lag = [1032525] * 7
    ms = 8 + probe_rounds(8)
    found = _period(8, ms, _run("1f1b", 8, 1, ms, f, b, lag, False)[0])
    assert found is not None and found[1] == 3
    fast = periodic_1f1b(8, 512, f, b, lag)
    full = simulate("1f1b", 8, 1, 512, f, b, lag, record=True)
    assert fast is not None and (fast.makespan, fast.critical_path) == (full.makespan, full.critical_path)
    uniform = simulate("1f1b", 8, 1, 512, [30] * 8, [60] * 8, record=False)
    assert (uniform.makespan - 512 * 90) * 512 == 7 * 512 * 90
