"""``interleaved.interleaved_bound``, the bound over every cut of an interleaved-1F1B class, checked against every cut.

* Its chains are paths of the schedule's dependency graph: each one's length, priced with random chunk durations and
  lags, never exceeds the simulated makespan (the simulation is the independent computation); at uniform chunks the
  longest equals it, and on random durations it is longer than the cut solver's per-rank chains on some.
* The bound never exceeds the best cut found by enumerating every cut (``bruteforce.compositions``), over every cut
  and over the fitting ones (with the memory caps); ``rank_bound`` and the LP never exceed min over cuts of the max of
  the chains (enumerated).
* Teeth: it is above ``bounds.class_bound`` on most classes, and close to the best cut on some (within 3 % where
  m = 8–16: a bound 3 % higher would fail there); the uniform split is slower than the best cut on some class of
  every instance (a bound taken from it would be invalid).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from test_planner_interleaved import interleaved_instance

from planner.compose.cost import Context, class_costs, evaluate
from planner.compose.simulate import simulate
from planner.search.bounds import class_bound, fitting_bound, layer_caps
from planner.search.bruteforce import compositions
from planner.search.chains import as_arrays, initial_counts, price
from planner.search.interleaved import _family, _least, _lp_weights, interleaved_bound, interleaved_counts, rank_bound
from planner.search.space import enumerate_candidates
from planner.specs import ClusterSpec, ModelSpec, ParallelPins, SearchOptions, TrainingSpec
from planner.specs.catalog import get_gpu
from planner.specs.layout import even_stage_layers

SHAPES = [(2, 2, 2), (2, 2, 4), (2, 3, 6), (3, 2, 3), (3, 2, 9), (4, 2, 4), (4, 3, 8), (2, 4, 8), (4, 2, 12)]


@pytest.mark.parametrize("p,v,m", SHAPES)
def test_chains_never_exceed_the_simulated_makespan(p: int, v: int, m: int) -> None:
    rng = random.Random(p * 100 + v * 10 + m)
    C = p * v
    counts = interleaved_counts(p, v, m)
    fam = as_arrays(counts)
    rank_chains = as_arrays(initial_counts("interleaved-1f1b", p, v, m))  # the cut solver's per-rank chains
    longer = 0
    for _ in range(20):
        fwd = [rng.randint(1, 1000) for _ in range(C)]
        bwd = [rng.randint(1, 2000) for _ in range(C)]
        lag = [rng.randint(0, 300) for _ in range(C - 1)]
        span = simulate("interleaved-1f1b", p, v, m, fwd, bwd, lag, record=False).makespan
        best, old = (
            int((f @ np.array(fwd) + b @ np.array(bwd) + g @ np.array(lag)).max()) for f, b, g in (fam, rank_chains)
        )
        assert old <= best <= span, (p, v, m)
        longer += best > old
    assert longer > 0  # the fill and drain chains are longer than the per-rank ones on some durations
    for f, b in ((100, 200), (100, 100), (100, 300)):  # uniform chunks, no lags: a chain is the critical path
        span = simulate("interleaved-1f1b", p, v, m, [f] * C, [b] * C, [0] * (C - 1), record=False).makespan
        assert int((fam[0].sum(axis=1) * f + fam[1].sum(axis=1) * b).max()) == span


def small_instances() -> list[Context]:
    """``test_planner_interleaved``'s instances (m = 2–8, slow and fast links, memory from roomy to nothing fits),
    and a 8-layer model on 4 GPUs with 8–16 micro-batches (where the fill and drain are a small part of the step)."""
    out = [interleaved_instance(seed)[0] for seed in range(0, 24, 3)]
    gpu = get_gpu("h100-sxm5-80gb")
    for layers, gbs in ((8, 8), (8, 16), (6, 12)):
        model = ModelSpec(
            name=f"t{layers}",
            family="gpt",
            num_layers=layers,
            hidden_size=512,
            num_attention_heads=8,
            num_kv_heads=8,
            ffn_hidden_size=2048,
            vocab_size=32000,
            activation="gelu",
            norm="layernorm",
            max_seq_len=1024,
        )
        out.append(
            Context(
                model=model,
                gpu=gpu,
                cluster=ClusterSpec(gpu=gpu, num_nodes=1, gpus_per_node=4),
                training=TrainingSpec(global_batch_size=gbs, seq_len=1024),
            )
        )
    return out


PINS = ParallelPins(schedule="interleaved-1f1b", tp=1, recompute="none", sequence_parallel=False, zero_stage=0)


@pytest.mark.parametrize("i", range(11))
def test_bound_never_exceeds_the_best_cut(i: int) -> None:
    ctx = small_instances()[i]
    rows = []
    for cand in enumerate_candidates(ctx, PINS, SearchOptions()):
        if cand.chunks > 8:
            continue
        cc = class_costs(ctx, cand)
        caps = list(layer_caps(cc.shared, cand, cc.live, cc.num_layers, cc.usable_bytes))
        counts, ranks = _family(cand.pp, cand.virtual_stages, cc.m)
        coef, const = price(cc, as_arrays(counts))
        best = best_fit = best_chain = None
        for n in compositions(cc.num_layers, cc.chunks):
            ev = evaluate(cc, n)
            best = ev.objective_ns if best is None else min(best, ev.objective_ns)
            if ev.fits:
                best_fit = ev.objective_ns if best_fit is None else min(best_fit, ev.objective_ns)
            ch = int((coef @ np.array(n) + const).max())
            best_chain = ch if best_chain is None else min(best_chain, ch)
        assert best is not None and best_chain is not None
        free = interleaved_bound(cc)
        assert free <= best, cand
        if best_fit is not None:
            assert interleaved_bound(cc, caps) <= best_fit and fitting_bound(cc) <= best_fit, cand
        # each relaxation alone, over every cut (no caps), never above the chains' own min-max
        L, p = cc.num_layers, cand.pp
        a, b = coef.astype(float), const.astype(float)
        whole = rank_bound(a, b, ranks, [L] * p, p, L)
        assert whole is not None and whole <= best_chain * (1 + 1e-9)
        lam = _lp_weights(a, b, [L] * p, p, L)
        assert lam is not None
        least = _least((lam @ a).tolist(), [L] * p, p, L)
        assert least is not None and float(lam @ b) + least <= best_chain * (1 + 1e-9)
        even = evaluate(cc, even_stage_layers(L, cand.chunks)).objective_ns
        rows.append((free, class_bound(cc), best, even))
    assert rows
    assert sum(f > c for f, c, _, _ in rows) * 2 > len(rows)  # tighter than ``class_bound`` on most classes
    # close to the best cut on some class (a bound 25 % higher would be invalid there; 3 % with 8–16 micro-batches)
    assert any(f * (1.03 if i >= 8 else 1.25) > b for f, _, b, _ in rows)
    assert any(e > b for _, _, b, e in rows)  # the uniform split is slower than the best cut on some class


def test_most_frequent_is_np_unique_mode() -> None:
    """``interleaved.most_frequent`` (the LP rows' common coefficient) is ``np.unique``'s value at the first argmax of
    its counts, ties included."""
    import random

    import numpy as np

    from planner.search.interleaved import most_frequent

    rng = random.Random(3)
    for _ in range(2000):
        row = [float(rng.choice([0, 1, 2, 5, 7, -3, 2.5, 1e9])) for _ in range(rng.randint(1, 40))]
        vals, counts = np.unique(np.array(row), return_counts=True)
        assert most_frequent(row) == float(vals[np.argmax(counts)])


def _rank_bound_reference(a, b, ranks, caps, p, L):  # type: ignore[no-untyped-def]
    """``rank_bound`` as first written (every line's slope sign tested in ``feasible``'s loop)."""
    import math

    import numpy as np

    K, C = a.shape
    v = C // p
    if any(cap < v for cap in caps) or sum(caps) < L:
        return None
    lines: list[list[tuple[float, float]]] = [[] for _ in range(p)]
    for i in range(K):
        r = ranks[i]
        own, off = a[i, r::p], np.delete(a[i], np.arange(r, C, p))
        lo = float(off.min()) if off.size else 0.0
        lines[r].append((float(own.min()) - lo, float(b[i]) + float(off.sum()) + lo * (L - (C - v))))

    def feasible(T: float) -> bool:
        least = most = 0
        for r in range(p):
            lo_n, hi_n = v, caps[r]
            for slope, const in lines[r]:
                if slope > 0:
                    hi_n = min(hi_n, math.floor((T - const) / slope + 1e-9))
                elif slope < 0:
                    lo_n = max(lo_n, math.ceil((T - const) / slope - 1e-9))
                elif const > T:
                    return False
            if lo_n > hi_n:
                return False
            least, most = least + lo_n, most + hi_n
        return least <= L <= most

    def top(r: int, n: int) -> float:
        return max(slope * n + const for slope, const in lines[r])

    lo_t, hi_t = 0.0, max(max(top(r, v), top(r, caps[r])) for r in range(p))
    if feasible(lo_t):
        return lo_t
    for _ in range(200):
        if hi_t - lo_t <= 1e-12 * hi_t:
            break
        mid = (lo_t + hi_t) / 2
        lo_t, hi_t = (lo_t, mid) if feasible(mid) else (mid, hi_t)
    return lo_t


def test_rank_bound_as_first_written() -> None:
    """``rank_bound`` (its lines grouped by slope sign once) returns the same float as the first version, on random
    chains with rising, falling and flat lines."""
    import random

    import numpy as np

    from planner.search.interleaved import rank_bound

    rng = random.Random(5)
    for _ in range(300):
        p, v = rng.choice([2, 3, 4, 8]), rng.choice([1, 2, 3])
        C, L = p * v, rng.randint(p * v, 4 * p * v)
        K = rng.randint(p, 4 * p)
        a = np.array([[float(rng.choice([0, 1, 2, 3, 7, 50])) for _ in range(C)] for _ in range(K)])
        b = np.array([float(rng.randint(-100, 1000)) for _ in range(K)])
        ranks = tuple(list(range(p)) + [rng.randrange(p) for _ in range(K - p)])  # every rank's chains
        caps = [rng.randint(v - 1 if rng.random() < 0.05 else v, L) for _ in range(p)]
        assert rank_bound(a, b, ranks, caps, p, L) == _rank_bound_reference(a, b, ranks, caps, p, L)


def test_rank_bound_rank_by_rank_lines() -> None:
    """``rank_bound`` building each rank's lines from all its chains at once returns the same float as the first
    version's chain-by-chain loop (``np.delete`` per chain), on fractional coefficients and on real chains of
    interleaved classes (integers: their row sums exact in any order)."""
    import random

    from planner.search.bounds import class_caps
    from planner.search.interleaved import rank_bound

    rng = random.Random(11)
    for _ in range(300):
        p, v = rng.choice([2, 3, 4, 7, 8]), rng.choice([1, 2, 3, 5])
        C, L = p * v, rng.randint(p * v, 4 * p * v)
        K = rng.randint(p, 4 * p)
        a = np.array([[rng.uniform(-3.0, 60.0) for _ in range(C)] for _ in range(K)])
        b = np.array([rng.uniform(-100.0, 1000.0) for _ in range(K)])
        # every rank has a chain, in shuffled order
        ranks = tuple(rng.sample(list(range(p)) + [rng.randrange(p) for _ in range(K - p)], K))
        caps = [rng.randint(v, L) for _ in range(p)]
        assert rank_bound(a, b, ranks, caps, p, L) == _rank_bound_reference(a, b, ranks, caps, p, L)
    for ctx in small_instances():
        for c in enumerate_candidates(ctx, ParallelPins(schedule="interleaved-1f1b"), SearchOptions()):
            cc = class_costs(ctx, c)
            if c.chunks > cc.num_layers:
                continue
            counts, ranks = _family(c.pp, c.virtual_stages, cc.m)
            coef, const = price(cc, as_arrays(counts))
            a, b, L = coef.astype(float), const.astype(float), cc.num_layers
            for caps in (list(class_caps(cc)), [L] * c.pp):
                assert rank_bound(a, b, ranks, caps, c.pp, L) == _rank_bound_reference(a, b, ranks, caps, c.pp, L)
