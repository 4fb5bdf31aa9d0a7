"""Chains as operation counts (``planner.search.chains``, issue 12): the window chains are real paths of the
1F1B dependency graph, so their lengths never exceed the simulated makespan of any cut; the fast
counting equals the operation-by-operation walk; pricing counts equals ``cutsolver.chain`` of the
operations; and the cut solver, seeded with them and sharing critical paths across classes of one
graph whatever their costs, returns the brute-force optimum of every class on a table of seeded
instances larger than ``test_planner_exact``'s (up to 6 stages and 12 layers, memory binding or not,
slow or fast links, the embedding and the LM head on the first and last stages)."""

from __future__ import annotations

import random

import pytest
from test_planner_exact import random_instance

from planner.compose.cost import Candidate, Context, class_costs, evaluate
from planner.compose.simulate import rank_orders, simulate
from planner.search.bruteforce import compositions
from planner.search.chains import (
    counts_chain,
    dag_key,
    fast_window_counts,
    initial_counts,
    path_counts,
    wide_window_family,
    window_counts,
    window_family,
    window_path,
    window_walk,
)
from planner.search.cutsolver import Status, chain, critical_counts, priced, solve_class
from planner.specs import ClusterSpec, GpuSpec, ModelSpec, SearchOptions, TrainingSpec
from planner.specs.catalog import get_gpu


def edges_ok(p: int, m: int, path: list, lags: list[int]) -> bool:
    """Every step of the path is the next operation of its rank or a data dependency, and the data
    steps between ranks are exactly the crossings listed."""
    orders = rank_orders("1f1b", p, 1, m)
    pos = {op: (c, i) for c in range(p) for i, op in enumerate(orders[c])}
    crossings = []
    for (k, j, c), (k2, j2, c2) in zip(path, path[1:]):
        rank, i = pos[(k, j, c)]
        on_rank = i + 1 < len(orders[rank]) and orders[rank][i + 1] == (k2, j2, c2)
        data = (
            (k == "F" and k2 == "F" and j2 == j and c2 == c + 1)
            or (k == "B" and k2 == "B" and j2 == j and c2 == c - 1)
            or (k == "F" and k2 == "B" and j2 == j and c2 == c == p - 1)
        )
        if not (on_rank or data):
            return False
        if data and c2 != c:
            crossings.append(min(c, c2))
    return sorted(crossings) == sorted(lags)


@pytest.mark.parametrize("p,m", [(2, 2), (2, 5), (3, 3), (3, 8), (4, 4), (4, 9), (5, 12), (6, 6), (7, 20)])
def test_window_chains_are_paths_and_fast_counts_match(p: int, m: int) -> None:
    """Windows of every width (``wide_window_family`` uses them all)."""
    for a in range(p):
        for b in range(a, p):
            for deep in (False, True):
                for down in (False, True):
                    path, lags = window_path(p, m, a, b, deep, down)
                    assert path[0] == ("F", 0, 0) and path[-1] == ("B", m - 1, 0)
                    assert edges_ok(p, m, path, lags)
                    assert fast_window_counts(p, m, a, b, deep, down) == path_counts(p, path, lags)


@pytest.mark.parametrize("p,m", [(31, 128), (16, 64)])
def test_fast_counts_match_on_deep_pipelines(p: int, m: int) -> None:
    """The turns skipped at once (the steady state) on the sizes the wide benchmark meets."""
    rng = random.Random(p * m)
    for _ in range(12):
        a = rng.randrange(p)
        b = min(p - 1, a + rng.randrange(3))
        deep, down = rng.random() < 0.5, rng.random() < 0.5
        path, lags = window_path(p, m, a, b, deep, down)
        assert fast_window_counts(p, m, a, b, deep, down) == path_counts(p, path, lags)


@pytest.mark.parametrize(
    "p,m,width",
    [(2, 1, 2), (3, 2, 3), (4, 4, 4), (4, 8, 2), (5, 3, 5), (6, 12, 6), (7, 20, 3), (8, 5, 8), (9, 9, 9)]
    + [(12, 100, 12), (16, 64, 16), (16, 64, 2), (31, 128, 2), (31, 128, 31), (40, 160, 40)],
)
def test_window_walk_matches_fast_counts(p: int, m: int, width: int) -> None:
    """The lockstep walk (``window_walk``) gives ``fast_window_counts`` of every window, row by row, and the
    families keep each distinct chain once in the order of its first window (as the dictionary of
    ``fast_window_counts`` did before the walk): fewer micro-batches than stages, deep pipelines, every width."""
    windows = [(a, b, d, dn) for a in range(p) for b in range(a, min(p, a + width)) for d in (0, 1) for dn in (0, 1)]
    ref = [fast_window_counts(p, m, a, b, bool(d), bool(dn)) for a, b, d, dn in windows]
    fc, bc, lc = window_walk(p, m, width)
    assert [(tuple(f), tuple(b), tuple(x)) for f, b, x in zip(fc.tolist(), bc.tolist(), lc.tolist())] == ref
    distinct = list(dict.fromkeys(ref))
    assert list(window_counts(p, m, width)) == distinct
    family = window_family(p, m, width)
    assert [(tuple(f), tuple(b), tuple(x)) for f, b, x in zip(*(a.tolist() for a in family))] == distinct
    if width == p:
        assert all((x == y).all() for x, y in zip(wide_window_family(p, m), family))


@pytest.mark.parametrize("seed", range(6))
def test_chain_lengths_bound_the_simulated_makespan(seed: int) -> None:
    """Every window and initial chain, priced with random stage times and lags, is at most the
    simulated makespan, and pricing counts equals summing the operations (``cutsolver.chain``)."""
    rng = random.Random(seed)
    p, m = rng.randint(2, 6), rng.randint(6, 14)
    m = max(m, p)
    fwd = [rng.randint(1, 50) for _ in range(p)]
    bwd = [rng.randint(1, 90) for _ in range(p)]
    lag = [rng.randint(0, 30) for _ in range(p - 1)]
    sim = simulate("1f1b", p, 1, m, fwd, bwd, lag, record=False)
    for counts in window_counts(p, m, p) + initial_counts("1f1b", p, 1, m):
        fc, bc, lc = counts
        length = sum(f * x for f, x in zip(fc, fwd)) + sum(b * x for b, x in zip(bc, bwd))
        assert length + sum(x * g for x, g in zip(lc, lag)) <= sim.makespan


def moderate_instance(seed: int) -> Context:
    """Up to 12 layers on up to 6 stages; memory from binding to roomy; slow or fast links."""
    rng = random.Random(1000 + seed)
    heads = rng.choice([2, 4])
    model = ModelSpec(
        name=f"mod-{seed}",
        family="gpt",
        num_layers=rng.randint(8, 12),
        hidden_size=32 * heads,
        num_attention_heads=heads,
        num_kv_heads=heads,
        ffn_hidden_size=rng.choice([128, 256]),
        vocab_size=rng.choice([256, 4000]),
        activation="gelu",
        norm="layernorm",
        max_seq_len=256,
    )
    base = get_gpu("a100-sxm4-80gb")
    gpu = base.model_copy(
        update={
            "id": f"toy-m{seed}",
            "memory_gib": 1.0 + rng.choice([0.006, 0.01, 0.02, 1.0]),
            "nvlink_bandwidth_GBps": rng.choice([1.0, 50.0]),
            "nic_bandwidth_GBps": rng.choice([0.05, 5.0]),
        }
    )
    cluster = ClusterSpec(gpu=gpu, num_nodes=rng.choice([3, 5, 6]), gpus_per_node=rng.choice([1, 2]))
    training = TrainingSpec(global_batch_size=rng.choice([6, 12, 24]), seq_len=rng.choice([64, 128]))
    return Context(model=model, gpu=GpuSpec.model_validate(gpu.model_dump()), cluster=cluster, training=training)


SOLVED: dict[int, tuple[int, int]] = {}  # seed → (classes checked, of them with a cut that does not fit)


@pytest.mark.parametrize("seed", range(10))
def test_solver_matches_brute_force_on_deeper_1f1b_pipelines(seed: int) -> None:
    """1F1B classes with one chunk per rank (where the window chains apply) solved one after the other
    in one shared pool (chains learned under one recomputation/ZeRO reused by the others), each
    against the brute force over its cuts: same optimum (step time, then memory), OPTIMAL, or
    INFEASIBLE exactly when no cut fits."""
    ctx = moderate_instance(seed)
    p = ctx.cluster.num_nodes
    options = SearchOptions(time_limit_s=30, num_workers=1)
    learned: dict = {}
    checked = binding = 0
    dp = ctx.num_gpus // p
    for recompute in ("none", "full"):
        for zero in (0, 1) if dp > 1 else (0,):
            cand = Candidate(1, p, dp, 1, "1f1b", 1, recompute, False, zero)
            cc = class_costs(ctx, cand)
            if cc.m < p:
                continue
            res = solve_class(cc, options, learned=learned)
            evs = [evaluate(cc, list(n)) for n in compositions(cc.num_layers, p)]
            fitting = sorted((e.objective_ns, e.peak_memory_bytes) for e in evs if e.fits)
            if not fitting:
                assert res.status == Status.INFEASIBLE
                continue
            assert res.status == Status.OPTIMAL
            assert res.evaluation is not None
            assert res.evaluation.objective_ns == fitting[0][0]
            checked += 1
            binding += len(fitting) < len(evs)
            # critical paths of this graph are kept as counts, priced for any class of the graph
            for counts in learned[dag_key(cc)]:
                (ch,) = priced(cc, [counts])
                assert ch == counts_chain(cc, counts)
    SOLVED[seed] = (checked, binding)


def test_the_deeper_table_exercises_memory() -> None:
    """Most seeds have fitting classes, and on some memory rules out cuts (else the check is weak)."""
    for seed in range(10):
        if seed not in SOLVED:
            test_solver_matches_brute_force_on_deeper_1f1b_pipelines(seed)
    assert sum(c for c, _ in SOLVED.values()) >= 12
    assert sum(b for _, b in SOLVED.values()) >= 3


def test_counts_price_like_the_operations() -> None:
    """``cutsolver.chain`` of a path of operations (``counts_chain`` of its counts, and the vectorised form) is,
    at a cut, the sum of those operations' simulated durations and the lags they cross: the critical path's is
    the makespan."""
    from planner.compose.cost import chunk_times

    ctx, _ = random_instance(3)
    cand = Candidate(1, 2, ctx.num_gpus // 2, 1, "1f1b", 1, "none", False, 0)
    cc = class_costs(ctx, cand)
    n = [cc.num_layers // 2, cc.num_layers - cc.num_layers // 2]
    ev = evaluate(cc, n)
    fwd, bwd = chunk_times(cc, n)

    def ops(path, lags) -> int:
        return sum((fwd if k == "F" else bwd)[c] for k, _, c in path) + sum(cc.lag[b] for b in lags)

    def at(ch) -> int:
        return sum(a * x for a, x in zip(ch.coef, n)) + ch.const

    counts = critical_counts(cc, ev)
    crit = chain(cc, ev.sim.critical_path, ev.sim.critical_lags)
    assert at(crit) == ops(ev.sim.critical_path, ev.sim.critical_lags) == ev.makespan_ns
    assert crit == counts_chain(cc, counts)
    assert priced(cc, [counts]) == [counts_chain(cc, counts)]
    for a in range(2):
        path, lags = window_path(2, cc.m, a, 1, True, False)
        assert at(chain(cc, path, lags)) == ops(path, lags)


@pytest.mark.parametrize(
    "options,chunks,expected",
    [
        (SearchOptions(), 31, 1),  # default: one worker on the lazy loop's small models
        (SearchOptions.model_validate({"time_limit_s": 5}), 8, 1),
        (SearchOptions(num_workers=2), 31, 2),  # given explicitly: honoured
        (SearchOptions.model_validate({"num_workers": 4}), 8, 4),
        (SearchOptions(), 64, 2),  # large models: the option's default
        ((SearchOptions(), True), 64, 1),  # a budgeted class: one, whatever the size ...
        ((SearchOptions(num_workers=4), True), 8, 1),  # ... or the option (its budget is deterministic time)
    ],
)
def test_cp_sat_workers(options: SearchOptions | tuple[SearchOptions, bool], chunks: int, expected: int) -> None:
    from planner.search.cutsolver import workers

    opts, budgeted = options if isinstance(options, tuple) else (options, False)
    assert workers(opts, chunks, budgeted) == expected
