"""Padding every expert's input to its capacity (``MoeSpec.pad_to_capacity``, Megatron-core core_v0.16.1
``--moe-pad-expert-input-to-capacity``; issue 23): what the planner prices (expert GEMM rows, FLOPs, all-to-all and
ETP bytes, permutes, saved activations at C = ⌈T·k/E × cf⌉ rows per expert and source rank, whatever the load)
against hand formulas written here in exact arithmetic; the fields' rules and the stacks that refuse it by name
(REST 422 and CLI exit 2 included); the expert floor below the exact terms and the search equal to the brute force
on padded instances; the Megatron export's flag. The runtime's padded rows are in tests/test_runtime_moe_capacity.py
(one process) and tests/test_runtime_equivalence_moe_capacity.py (EP2, EP2×TP2 against the unpadded reference)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from pydantic import ValidationError

from planner.api import estimate, plan
from planner.compose.context import Context
from planner.specs import MoeSpec, ParallelPins, SearchOptions
from planner.specs.catalog import get_model
from planner.specs.errors import MeshplanError
from planner.workload.expert_parallel import expert_work
from tests.test_expert_floor import check_floors
from tests.test_expert_floor import random_instance as floor_instance
from tests.test_expert_parallel import random_moe_instance
from tests.test_planner_exact import search_against_brute_force

MIXTRAL = {
    "model": "mixtral-8x22b",
    "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 16, "gpus_per_node": 8},
    "training": {"global_batch_size": 256, "seq_len": 4096, "stack": "megatron"},
    "parallel": {"tp": 4, "pp": 8, "ep": 2, "sequence_parallel": True},
}


def _moe(name: str = "mixtral-8x22b", **update):
    m = get_model(name)
    assert m.moe is not None
    return m.model_copy(update={"moe": m.moe.model_copy(update=update)})


# (tp, sp, ep, etp, mbs, seq, capacity factor, load imbalance): Mixtral 8x22B, E 8, k 2, h 6144, f 16384
PRICED = [
    (1, False, 1, 1, 1, 4096, 1.25, 1.0),  # one rank routes everything
    (1, False, 8, 1, 1, 4096, 1.0, 1.0),  # padded = a balanced dropless rank
    (4, True, 2, 1, 1, 4096, 1.25, 1.0),  # EP over the SP shards
    (4, True, 2, 1, 2, 4096, 0.5, 1.5),  # a factor below 1, and the load does not matter
    (4, True, 2, 4, 1, 4096, 1.25, 1.0),  # etp = tp: the padded rows gathered over TP
    (4, False, 1, 4, 1, 4096, 1.1, 1.0),  # no SP: every TP rank routes all tokens
    (2, True, 4, 1, 1, 1000, 1.3, 2.0),  # ⌈500·2/8 × 1.3⌉ = ⌈162.5⌉ = 163: the ceiling binds
]


@pytest.mark.parametrize(("tp", "sp", "ep", "etp", "mbs", "seq", "cf", "imb"), PRICED)
def test_padded_work_is_priced_at_capacity(tp, sp, ep, etp, mbs, seq, cf, imb) -> None:
    m = _moe(capacity_factor=cf, pad_to_capacity=True, load_imbalance=imb)
    h, E, k, f = m.hidden_size, 8, 2, 16384
    elt = 2
    w = expert_work(m, mbs, seq, tp, sp, ep, etp, elt, "none")
    T = mbs * seq // tp if (sp and tp > 1) else mbs * seq  # tokens a rank routes
    C = math.ceil(Fraction(T * k, E) * Fraction(str(cf)))  # get_capacity, exactly (no row where float parts)
    gathered = etp if (etp > 1 and sp) else 1  # rows of the ETP group's ranks, all-gathered
    rows = C * ep * gathered  # per local expert: C from each EP (and ETP) source rank
    local = E // ep
    assert w.gemms[1] == (rows, f // etp, h, 2 * local) and w.gemms[2] == (rows, h, f // etp, local)
    routed_flops = sum(2.0 * a * b * c * n for a, b, c, n in w.gemms[1:3])
    assert routed_flops == 2.0 * (C * E * gathered) * 3 * h * (f // etp)  # every slot computed, padded or not
    if ep > 1:  # dispatch and combine: C rows for each of the E experts, even splits
        assert [(c.nbytes, c.count) for c in w.a2a_fwd] == [(C * E * h * elt, 2)]
        assert [(c.nbytes, c.count) for c in w.a2a_bwd] == [(C * E * h * elt, 2)]
    else:
        assert w.a2a_fwd == ()
    if etp > 1 and sp:  # the ETP all-gather / reduce-scatter of the dispatched rows
        assert [c.nbytes for c in w.tp_fwd] == [C * E * gathered * h * elt]
    # saved for backward: permuted input, fc1 output, activation, combine copy per padded row; router scores
    assert w.saved == elt * C * E * gathered * (2 * h + 3 * (f // etp)) + 4.0 * T * E  # (no shared experts)


@pytest.mark.parametrize(("tp", "sp", "ep", "etp", "mbs", "seq", "cf", "imb"), PRICED)
def test_padded_is_the_unpadded_drop_at_a_full_load(tp, sp, ep, etp, mbs, seq, cf, imb) -> None:
    """Unpadded, a rank whose every expert takes cf × its share keeps exactly C (when T·k/E·cf is whole): the padded
    pricing is that load's, whatever the real load; below it padding costs more, never less."""
    padded = expert_work(
        _moe(capacity_factor=cf, pad_to_capacity=True, load_imbalance=imb), mbs, seq, tp, sp, ep, etp, 2, "none"
    )
    at_cf = expert_work(_moe(capacity_factor=cf, load_imbalance=max(cf, 1.0)), mbs, seq, tp, sp, ep, etp, 2, "none")
    light = expert_work(_moe(capacity_factor=cf, load_imbalance=1.0), mbs, seq, tp, sp, ep, etp, 2, "none")
    T = mbs * seq // tp if (sp and tp > 1) else mbs * seq
    if cf >= 1 and (Fraction(T * 2, 8) * Fraction(str(cf))).denominator == 1:
        assert padded.gemms == at_cf.gemms and padded.saved == pytest.approx(at_cf.saved, rel=1e-12)
    assert padded.flops >= light.flops and padded.saved >= light.saved


def test_padding_costs_time_and_memory_at_a_balanced_load() -> None:
    m = _moe(capacity_factor=1.25)
    unpadded = estimate({**MIXTRAL, "model": m.model_dump()})
    padded = estimate({**MIXTRAL, "model": _moe(capacity_factor=1.25, pad_to_capacity=True).model_dump()})
    dropless = estimate(MIXTRAL)
    assert unpadded.step_time_s == pytest.approx(dropless.step_time_s)  # balanced: nothing dropped, nothing padded
    assert padded.step_time_s > unpadded.step_time_s
    assert padded.breakdown.ep_comm_s == pytest.approx(1.25 * unpadded.breakdown.ep_comm_s, rel=0.25)
    assert padded.breakdown.ep_comm_s > unpadded.breakdown.ep_comm_s
    assert padded.peak_memory_gib > unpadded.peak_memory_gib


@pytest.mark.parametrize(
    ("moe", "needle"),
    [
        ({"pad_to_capacity": True}, "no capacity_factor"),
        ({"pad_to_capacity": True, "capacity_factor": 4.5}, "capacity_factor ≤ num_experts / top_k"),  # 2 × 4.5 > 8
    ],
)
def test_bad_combinations_name_the_field(moe: dict, needle: str, tmp_path) -> None:
    from fastapi.testclient import TestClient

    from tests.api_support import make_app

    spec = {**get_model("mixtral-8x22b").model_dump(), "moe": {**get_model("mixtral-8x22b").moe.model_dump(), **moe}}  # type: ignore[union-attr]
    with pytest.raises(ValidationError) as err:
        MoeSpec.model_validate(spec["moe"])
    assert "pad_to_capacity" in str(err.value) and needle in str(err.value)
    MoeSpec(num_experts=8, top_k=2, expert_ffn_hidden_size=64, capacity_factor=4.0, pad_to_capacity=True)  # = E/k
    with TestClient(make_app(tmp_path), raise_server_exceptions=False) as client:
        r = client.post("/v1/estimates", json={**MIXTRAL, "model": spec})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "model.moe.pad_to_capacity", r.text
    assert needle in str(r.json()["errors"][0]) and "Traceback" not in r.text  # the message and its fix


def test_a_stack_without_padding_refuses_it_by_name(tmp_path) -> None:
    """torchtitan routes dropless (no capacity factor in 0.2.2 / 0.3.0 models/moe/moe.py): ``Stack.unbuilt`` names
    ``moe.capacity_factor`` and ``moe.pad_to_capacity``, the request is refused naming training.stack, the first part
    it does not build and the stacks that run it, before any search (the search never returns it there)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    m = _moe(capacity_factor=1.25, pad_to_capacity=True)
    req = {**MIXTRAL, "model": m.model_dump(), "training": {**MIXTRAL["training"], "stack": "torchtitan"}}
    for call in (estimate, plan):
        with pytest.raises(MeshplanError) as err:
            call(req if call is estimate else {k: v for k, v in req.items() if k != "parallel"})
        assert err.value.field == "training.stack" and "moe.capacity_factor" in err.value.message
        assert "megatron" in err.value.fix and "meshplan" in err.value.fix and "torchtitan" not in err.value.fix
    path = tmp_path / "req.json"
    path.write_text(json.dumps(req))
    proc = subprocess.run(
        [sys.executable, "-m", "api.cli", "estimate", "--request", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 2 and "training.stack" in proc.stderr and "Traceback" not in proc.stderr


def test_megatron_and_meshplan_plan_it() -> None:
    m = _moe(capacity_factor=1.25, pad_to_capacity=True)
    for stack in ("megatron", "meshplan"):
        req = {k: v for k, v in MIXTRAL.items() if k != "parallel"}
        got = plan({**req, "model": m.model_dump(), "training": {**MIXTRAL["training"], "stack": stack}})
        assert got.plans and all(p.model.moe.pad_to_capacity for p in got.plans)  # type: ignore[union-attr]


def _padded(ctx: Context) -> Context:
    moe = ctx.model.moe
    assert moe is not None
    cf = min(1.25, moe.num_experts / moe.top_k)
    model = ctx.model.model_copy(
        update={"moe": moe.model_copy(update={"capacity_factor": cf, "pad_to_capacity": True})}
    )
    training = ctx.training.model_copy(update={"stack": "megatron"})
    return Context(model=model, gpu=ctx.gpu, cluster=ctx.cluster, training=training)


@pytest.mark.parametrize("seed", range(12))
def test_floor_is_below_the_padded_layer_group(seed: int) -> None:
    assert check_floors(_padded(floor_instance(seed)), ParallelPins(), SearchOptions()) > 0


@pytest.mark.parametrize("seed", range(6))
def test_search_matches_brute_force_when_padded(seed: int) -> None:
    ctx, pins = random_moe_instance(seed)
    got, ref = search_against_brute_force(_padded(ctx), pins)
    if ref:
        assert got.status == "OPTIMAL" and got.objective_ns == ref[0][0]


def test_random_padded_instances_pad() -> None:
    """The instances above really pad: some class's expert rows differ from the unpadded drop's."""
    seen = False
    for seed in range(6):
        ctx, _ = random_moe_instance(seed)
        p = _padded(ctx)
        mbs, seq = 1, ctx.training.seq_len
        a = expert_work(p.model, mbs, seq, 1, False, 1, 1, 2, "none")
        b = expert_work(ctx.model, mbs, seq, 1, False, 1, 1, 2, "none")
        seen |= a.gemms[1] != b.gemms[1]
    assert seen
