"""Models whose blocks are not all of one kind (issue 23): dense leading layers then MoE ones (DeepSeek-V3's
``first_dense_layers``) and alternating dense/MoE layers (Llama 4 Maverick's ``moe_layer_freq`` 2). A stage's time
and memory sum the kinds of the layers it holds (checked layer by layer against each kind priced alone); the cut
solver chooses cuts over the real sequence and stays exact (the brute force enumerates cuts over the same sequence);
the bounds and memory screens stay valid; the CP-SAT model with its cut fixed is the evaluation."""

from __future__ import annotations

import random

import pytest
from ortools.sat.python import cp_model

from planner.compose.blocks import block_sequence
from planner.compose.cost import Context, chunk_times, class_costs, evaluate
from planner.compose.memory import rank_memory
from planner.compose.terms import kind_terms, shared_key
from planner.search.bounds import class_bound, fitting_bound, lean_bound, may_fit, quick_bound, quick_may_fit
from planner.search.bruteforce import brute_force, compositions
from planner.search.cutsolver import cut_model
from planner.search.space import enumerate_candidates
from planner.specs import ClusterSpec, GpuSpec, ModelSpec, ParallelPins, SearchOptions, TrainingSpec
from planner.specs.catalog import get_gpu
from planner.workload.ops import MOE_BLOCK, block_kinds
from tests.test_planner_exact import search_against_brute_force

SEQUENCES = ("dense-first", "alternating")


def mixed_instance(seed: int, sequence: str) -> tuple[Context, ParallelPins]:
    """A small MoE model whose dense and MoE blocks differ a lot (dense MLP width 32–512 against 4–8 experts of
    64), with one or two dense leading layers or every other layer MoE; small memories and slow links on some."""
    rng = random.Random(7000 + seed)
    heads = rng.choice([2, 4])
    moe: dict = {"num_experts": rng.choice([4, 8]), "top_k": rng.choice([1, 2]), "expert_ffn_hidden_size": 64}
    if sequence == "dense-first":
        moe["first_dense_layers"] = rng.choice([1, 2, 3])
    else:
        moe["first_dense_layers"] = rng.choice([0, 1])
        moe["moe_layer_freq"] = 2
    model = ModelSpec.model_validate(
        {
            "name": f"mixed-{sequence}-{seed}",
            "family": "llama",
            "num_layers": rng.randint(5, 7),
            "hidden_size": 32 * heads,
            "num_attention_heads": heads,
            "num_kv_heads": heads,
            "ffn_hidden_size": rng.choice([32, 512]),
            "vocab_size": 256,
            "activation": "swiglu",
            "norm": "rmsnorm",
            "max_seq_len": 256,
            "moe": moe,
        }
    )
    gpu = get_gpu("h100-sxm5-80gb").model_copy(
        update={
            "id": f"toy-mixed-{seed}",
            "memory_gib": 1.0 + rng.choice([0.004, 0.008, 0.016, 1.0]),
            "nvlink_bandwidth_GBps": rng.choice([1.0, 50.0]),
            "nic_bandwidth_GBps": rng.choice([0.1, 5.0]),
        }
    )
    cluster = ClusterSpec(gpu=gpu, num_nodes=rng.choice([1, 2]), gpus_per_node=rng.choice([2, 4]))
    training = TrainingSpec(
        global_batch_size=rng.choice([8, 16]),
        seq_len=rng.choice([64, 128]),
        stack=rng.choice(["megatron", "torchtitan"]),
    )
    ctx = Context(model=model, gpu=GpuSpec.model_validate(gpu.model_dump()), cluster=cluster, training=training)
    pins = ParallelPins(schedule="interleaved-1f1b", virtual_stages=2) if rng.random() < 0.25 else ParallelPins()
    return ctx, pins


CASES = [(s, seq) for seq in SEQUENCES for s in range(8)]


@pytest.mark.parametrize(("seed", "sequence"), CASES)
def test_search_over_mixed_sequences_matches_brute_force(seed: int, sequence: str) -> None:
    ctx, pins = mixed_instance(seed, sequence)
    assert block_sequence(ctx)[1] is not None  # really two kinds
    got, ref = search_against_brute_force(ctx, pins)
    if ref:
        assert got.status == "OPTIMAL"
        assert got.objective_ns == got.bound_ns == ref[0][0]


def test_the_mixed_instances_are_not_vacuous() -> None:
    """Most instances have a fitting plan, several with a pipeline (the cut is searched), memory binds on some, and
    on some the best cut of a class is not the one it would be were every block priced as MoE: the layers' kinds,
    where the cut puts them, decide it."""
    feasible = piped = binding = moved = 0
    for seed, sequence in CASES:
        ctx, pins = mixed_instance(seed, sequence)
        ref, _ = brute_force(ctx, pins, SearchOptions())
        if not ref:
            continue
        feasible += 1
        best = ref[0]
        piped += best.cand.pp > 1
        free = Context(
            model=ctx.model,
            gpu=ctx.gpu.model_copy(update={"memory_gib": 1000.0}),
            cluster=ctx.cluster,
            training=ctx.training,
        )
        binding += brute_force(free, pins, SearchOptions())[0][0].objective_ns < best.objective_ns
        uniform = ctx.model.model_copy(
            update={"moe": ctx.model.moe.model_copy(update={"first_dense_layers": 0, "moe_layer_freq": 1})}  # type: ignore[union-attr]
        )
        alike = Context(model=uniform, gpu=ctx.gpu, cluster=ctx.cluster, training=ctx.training)
        for t in ref:
            if t.cand.chunks > 1:
                cc = class_costs(alike, t.cand)
                cuts = [n for n in compositions(cc.num_layers, cc.chunks) if evaluate(cc, n).fits]
                if cuts and min(cuts, key=lambda n: evaluate(cc, n).objective_ns) != t.stage_layers:
                    moved += 1
                    break
    assert feasible >= 10 and piped >= 3 and binding >= 2 and moved >= 3, (feasible, piped, binding, moved)


def layer_by_layer(ctx: Context, cand, n: list[int]) -> tuple[list[int], list[int]]:
    """Each chunk's forward and backward summed layer by layer, each layer at its own kind's coefficient from the
    terms of a model whose every block is that kind (``terms.kind_terms``), + the embedding and the LM head."""
    key = shared_key(cand)
    per = {kind: kind_terms(ctx, key, kind) for kind in ("transformer_block", MOE_BLOCK)}
    kinds = block_kinds(ctx.model)
    fwd, bwd, at = [], [], 0
    for c, size in enumerate(n):
        layers = kinds[at : at + size]
        at += size
        f = sum(per[k].fwd.layer for k in layers) + per["transformer_block"].fwd.const
        b = sum(per[k].bwd.layer for k in layers) + per["transformer_block"].bwd.const
        if c == 0:
            f, b = f + per["transformer_block"].fwd.emb, b + per["transformer_block"].bwd.emb
        if c == len(n) - 1:
            f, b = f + per["transformer_block"].fwd.head, b + per["transformer_block"].bwd.head
        fwd.append(f)
        bwd.append(b)
    return fwd, bwd


@pytest.mark.parametrize(("seed", "sequence"), [(1, "dense-first"), (2, "alternating"), (5, "alternating")])
def test_a_stage_sums_the_kinds_of_its_layers(seed: int, sequence: str) -> None:
    """Chunk times at every cut of every single-stage-per-rank class equal the layer-by-layer sum of each layer's
    own kind (no pipelined host work on a GPU); the two kinds really differ."""
    ctx, pins = mixed_instance(seed, sequence)
    checked = 0
    for cand in enumerate_candidates(ctx, pins, SearchOptions()):
        if cand.cp > 1:  # ``layer_by_layer`` prices the full sequence (a CP class's layers run in the s/cp view)
            continue
        cc = class_costs(ctx, cand)
        if cc.chunks == 1 or cc.chunks > cc.num_layers:
            continue
        assert cc.f_moe != 0 and cc.b_moe != 0
        for n in compositions(cc.num_layers, cc.chunks):
            assert list(chunk_times(cc, n)) == list(layer_by_layer(ctx, cand, n)), (cand, n)
            checked += 1
    assert checked > 20


@pytest.mark.parametrize(("seed", "sequence"), [(s, q) for q in SEQUENCES for s in (0, 3, 6)])
def test_bounds_and_screens_hold_on_mixed_sequences(seed: int, sequence: str) -> None:
    """lean ≤ quick ≤ class bound ≤ every cut; the fitting bound ≤ every fitting cut; the memory screens never
    drop a class with a fitting cut (and agree with each other on one chunk per rank)."""
    ctx, pins = mixed_instance(seed, sequence)
    for cand in enumerate_candidates(ctx, pins, SearchOptions()):
        cc = class_costs(ctx, cand)
        evs = [evaluate(cc, n) for n in compositions(cc.num_layers, cc.chunks)]
        if not evs:
            continue
        assert lean_bound(ctx, cand) <= quick_bound(ctx, cand) <= class_bound(cc) <= min(e.objective_ns for e in evs)
        if any(e.fits for e in evs):
            assert may_fit(cc)
            assert class_bound(cc) <= fitting_bound(cc) <= min(e.objective_ns for e in evs if e.fits)
        if cand.virtual_stages == 1:
            assert quick_may_fit(ctx, cand) == may_fit(cc)


@pytest.mark.parametrize(("seed", "sequence"), [(1, "dense-first"), (3, "alternating")])
def test_cp_sat_model_with_its_cut_fixed_is_the_evaluation(seed: int, sequence: str) -> None:
    """With the layer counts fixed, the MoE-layer variables follow the sequence, the memory rows hold exactly when
    the cut fits, the least end of step is the evaluation's, and every chain is ≤ the simulated makespan with the
    critical path's chain equal to it."""
    from planner.search.cutsolver import critical_chain

    ctx, pins = mixed_instance(seed, sequence)
    checked = 0
    for cand in enumerate_candidates(ctx, pins, SearchOptions())[::2]:
        cc = class_costs(ctx, cand)
        if cc.chunks == 1 or cc.chunks > cc.num_layers:
            continue
        for n in list(compositions(cc.num_layers, cc.chunks))[:4]:
            ev = evaluate(cc, n)
            cm = cut_model(cc)
            for x, v in zip(cm.n, n):
                cm.model.add(x == v)
            cm.model.minimize(cm.end)
            solver = cp_model.CpSolver()
            solver.parameters.num_workers = 1
            st = solver.solve(cm.model)
            assert (st == cp_model.OPTIMAL) == ev.fits, (cand, n)
            if ev.fits:
                assert solver.value(cm.end) == ev.end_ns
                assert [solver.value(k) for k in cm.k] == cc.moe_counts(n)  # type: ignore[union-attr]
            ch = critical_chain(cc, ev)
            k = cc.moe_counts(n)
            length = sum(a * x for a, x in zip(ch.coef, n)) + sum(a * x for a, x in zip(ch.moe, k)) + ch.const  # type: ignore[arg-type]
            assert length == ev.makespan_ns
            checked += 1
            assert max(rank_memory(cc, n, r) for r in range(cand.pp)) == max(ev.memory_bytes)
    assert checked > 0


def test_the_kinds_screen_rules_out_classes_the_layer_caps_let_through() -> None:
    """``screens.kinds_fit`` (each kind's layers within the ranks' rooms) drops classes whose layer count alone fits
    (``layer_caps``) — never one with a fitting cut (``test_bounds_and_screens_hold_on_mixed_sequences``)."""
    from planner.search.screens import caps_fit, kinds_fit, layer_caps

    dropped = 0
    for seed, sequence in CASES:
        ctx, pins = mixed_instance(seed, sequence)
        for cand in enumerate_candidates(ctx, pins, SearchOptions()):
            cc = class_costs(ctx, cand)
            args = (cc.shared, cand, cc.live, cc.num_layers, cc.usable_bytes, cc.done)  # as the search passes them
            if caps_fit(layer_caps(*args), cand.virtual_stages, cc.num_layers) and not kinds_fit(*args):
                assert not any(evaluate(cc, n).fits for n in compositions(cc.num_layers, cc.chunks))
                dropped += 1
    assert dropped > 0
