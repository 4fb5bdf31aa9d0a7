"""Expert parallelism (issue 23): the rules of parallel.ep / parallel.etp, what a MoE block issues and holds under
EP (workload.expert_parallel), its pricing in the breakdown (ep_comm_s), the search over ep and etp matching the
brute force on small MoE instances, the refusal of the meshplan stack, and a mixed layer sequence priced by kind
(tests/test_planner_hetero.py, tests/test_deepseek_maverick.py: the rest of mixed sequences)."""

from __future__ import annotations

import random

import pytest

from planner.api import estimate, plan
from planner.compose.cost import Context
from planner.search.bruteforce import brute_force
from planner.specs import ClusterSpec, GpuSpec, ModelSpec, ParallelPins, SearchOptions, TrainingSpec
from planner.specs.catalog import get_gpu, get_model
from planner.specs.errors import MeshplanError
from planner.workload.expert_parallel import expert_work
from tests.test_planner_exact import search_against_brute_force

MIXTRAL = {
    "model": "mixtral-8x22b",
    "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 16, "gpus_per_node": 8},
    "training": {"global_batch_size": 256, "seq_len": 4096, "stack": "megatron"},
}


def _estimate(**parallel):
    return estimate({**MIXTRAL, "parallel": parallel})


@pytest.mark.parametrize(
    ("parallel", "field"),
    [
        ({"tp": 4, "pp": 8, "ep": 3, "sequence_parallel": True}, "parallel.ep"),  # 8 experts
        ({"tp": 4, "pp": 8, "dp": 4, "ep": 8, "sequence_parallel": True}, "parallel.ep"),  # ep ∤ dp
        ({"tp": 4, "pp": 8, "etp": 2, "sequence_parallel": True}, "parallel.etp"),
        ({"tp": 4, "pp": 8, "ep": 2}, "parallel.sequence_parallel"),  # EP with TP needs SP
        ({"tp": 4, "pp": 8, "etp": 1}, "parallel.sequence_parallel"),
    ],
)
def test_rules_name_the_field(parallel: dict, field: str) -> None:
    with pytest.raises(MeshplanError) as err:
        _estimate(**parallel)
    assert err.value.field == field and err.value.fix


def test_dense_model_refuses_ep() -> None:
    with pytest.raises(MeshplanError) as err:
        estimate({**MIXTRAL, "model": "llama3-8b", "parallel": {"tp": 8, "ep": 2}})
    assert err.value.field == "parallel.ep"


def test_a_stack_without_moe_refuses_it_naming_the_stacks_that_run_it() -> None:
    req = {**MIXTRAL, "training": {**MIXTRAL["training"], "stack": "deepspeed"}}
    with pytest.raises(MeshplanError) as err:
        plan(req)
    assert err.value.field == "training.stack" and "megatron" in err.value.fix and "torchtitan" in err.value.fix
    assert "meshplan" in err.value.fix  # the bundled runtime runs MoE too (runtime/models/moe.py)


def test_meshplan_stack_plans_moe_with_ep_that_its_runtime_runs() -> None:
    """The bundled runtime's stack declares MoE and EP with whole experts (etp 1): its plans carry etp 1 (with SP
    under TP), validate in runtime.validate and export to its target; etp = tp is refused naming parallel.etp."""
    from api.exporters import export
    from api.exporters.options import ExportOptions
    from planner.api import estimate_plan
    from runtime.validate import validate_plan

    req = {**MIXTRAL, "training": {**MIXTRAL["training"], "stack": "meshplan"}, "top_k": 3}
    plans = plan(req).plans
    assert plans and any(p.parallel.ep > 1 for p in plans)
    for p in plans:
        assert p.parallel.etp == 1 and (p.parallel.tp == 1 or p.parallel.sequence_parallel)
        validate_plan(p, p.parallel.num_gpus)
        assert "meshplan run" in export(p, "meshplan", ExportOptions()).content
    with pytest.raises(MeshplanError) as err:
        estimate({**req, "parallel": {"tp": 4, "pp": 8, "ep": 2, "etp": 4, "sequence_parallel": True}})
    assert err.value.field == "parallel.etp"
    # unpinned, the estimate's etp is 1 on this stack (Megatron-core's default etp = tp where the stack runs it)
    pinned = estimate_plan({**req, "parallel": {"tp": 4, "pp": 8, "ep": 2, "sequence_parallel": True}})
    assert pinned.parallel.etp == 1


def test_maverick_alternation_is_priced_by_kind() -> None:
    """Every other layer MoE (Llama 4 Maverick's layout) on Mixtral 8x7B: a stage of two layers holds one of each
    kind wherever it starts, so its time is between the all-dense and the all-MoE model's at the same plan."""
    m = get_model("mixtral-8x7b")
    moe = m.moe.model_copy(update={"moe_layer_freq": 2})  # type: ignore[union-attr]
    dense = m.model_copy(update={"moe": None, "ffn_hidden_size": 14336})
    plan_ = {"tp": 8, "pp": 4, "sequence_parallel": True, "ep": 1, "etp": 8}
    times = [
        estimate({**MIXTRAL, "model": x.model_dump(), "parallel": plan_}).step_time_s
        for x in (dense, m.model_copy(update={"moe": moe}), m)
    ]
    assert times[0] < times[1] < times[2]


@pytest.mark.parametrize(
    ("tp", "sp", "ep", "etp"), [(1, False, 1, 1), (1, False, 8, 1), (4, True, 2, 1), (4, True, 2, 4), (4, False, 1, 4)]
)
def test_expert_flops_and_bytes(tp: int, sp: bool, ep: int, etp: int) -> None:
    """Routed-expert FLOPs per rank do not depend on ep/etp (top-k active parameters); the all-to-all sends
    T·k·h·β per direction (T the SP shard), twice forward and twice backward; experts shard over ep·etp."""
    m = get_model("mixtral-8x22b")
    moe = m.moe
    assert moe is not None
    w = expert_work(m, 1, 4096, tp, sp, ep, etp, 2, "none")
    h, f, k, E = m.hidden_size, moe.expert_ffn_hidden_size, moe.top_k, moe.num_experts
    routed = sum(2.0 * a * b * c * n for a, b, c, n in w.gemms[1:3])
    assert routed == pytest.approx(2.0 * 4096 * k * 3 * h * f / tp)
    assert w.expert_params == E // ep * 3 * h * f // etp
    if ep > 1:
        T = 4096 // tp if sp else 4096
        assert [c.nbytes for c in w.a2a_fwd] == [T * k * h * 2] and w.a2a_fwd[0].count == 2
        assert w.a2a_bwd[0].count == 2
    else:
        assert w.a2a_fwd == () and w.a2a_bwd == ()


@pytest.mark.parametrize(("imbalance", "cf"), [(1.0, 1.25), (1.0, 0.5), (1.5, 1.25), (1.5, 2.0)])
def test_a_capacity_factor_prices_the_kept_tokens_unpadded(imbalance: float, cf: float) -> None:
    """What the runtime and the Megatron export run (Megatron-core's drop without
    ``--moe-pad-expert-input-to-capacity``): the busiest expert keeps min(its load, C) of each source rank's
    assignments, C = ceil(T·k/E × cf) (``moe_utils.get_capacity``), so its rows — and the all-to-all bytes — follow
    the kept tokens, not the capacity: a balanced rank under a capacity above 1 is priced as dropless."""
    import math

    base = get_model("mixtral-8x22b")
    assert base.moe is not None
    m = base.model_copy(
        update={"moe": base.moe.model_copy(update={"load_imbalance": imbalance, "capacity_factor": cf})}
    )
    tp, ep, seq = 4, 2, 4096
    w = expert_work(m, 1, seq, tp, True, ep, 1, 2, "none")
    T, k, E, h = seq // tp, base.moe.top_k, base.moe.num_experts, base.hidden_size
    capacity = math.ceil(T * k / E * cf)  # per source rank and expert
    kept = min(T * k / E * imbalance, capacity)  # the busiest expert's kept rows from one source rank
    rows = w.gemms[1][0]
    assert rows == pytest.approx(ep * kept, abs=1)  # one row of rounding (the planner rounds the product)
    padded = ep * capacity
    assert (rows < padded - 1) == (T * k / E * imbalance < capacity - 1)  # unpadded wherever the load is below C
    assert w.a2a_fwd[0].nbytes == pytest.approx(T * k * h * 2 * min(imbalance, cf))


def test_breakdown_shows_the_all_to_all() -> None:
    with_ep = _estimate(tp=4, pp=8, ep=2, sequence_parallel=True, schedule="interleaved-1f1b", virtual_stages=7)
    without = _estimate(tp=4, pp=8, ep=1, sequence_parallel=True, schedule="interleaved-1f1b", virtual_stages=7)
    assert with_ep.breakdown.ep_comm_s > 0 and without.breakdown.ep_comm_s == 0
    b = with_ep.breakdown
    total = b.compute_s + b.tp_comm_s + b.pp_bubble_s + b.pp_p2p_s + b.dp_sync_s + b.optimizer_s + b.ep_comm_s
    assert total == pytest.approx(with_ep.step_time_s, rel=1e-6)
    # experts sharded over EP: less weight memory per GPU
    assert with_ep.memory_per_stage[0].weights_gib < without.memory_per_stage[0].weights_gib


def test_all_to_all_across_nodes_costs_more() -> None:
    inside = _estimate(tp=1, pp=8, ep=8, dp=16)
    across = estimate(
        {
            **MIXTRAL,
            "cluster": {**MIXTRAL["cluster"], "gpus_per_node": 4, "num_nodes": 32},
            "parallel": {"tp": 1, "pp": 8, "ep": 8, "dp": 16},
        }
    )
    assert across.breakdown.ep_comm_s > inside.breakdown.ep_comm_s


def random_moe_instance(seed: int) -> tuple[Context, ParallelPins]:
    rng = random.Random(1000 + seed)
    heads = rng.choice([2, 4])
    experts = rng.choice([4, 8])
    model = ModelSpec.model_validate(
        {
            "name": f"moe-{seed}",
            "family": "llama",
            "num_layers": rng.randint(4, 6),
            "hidden_size": 32 * heads,
            "num_attention_heads": heads,
            "num_kv_heads": heads,
            "ffn_hidden_size": 128,
            "vocab_size": 256,
            "activation": "swiglu",
            "norm": "rmsnorm",
            "max_seq_len": 256,
            "moe": {"num_experts": experts, "top_k": rng.choice([1, 2]), "expert_ffn_hidden_size": 64},
        }
    )
    base = get_gpu("h100-sxm5-80gb")
    gpu = base.model_copy(
        update={
            "id": f"toy-moe-{seed}",
            "memory_gib": 1.0 + rng.choice([0.003, 0.006, 1.0]),
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
    return ctx, ParallelPins()


@pytest.mark.parametrize("seed", range(8))
def test_search_over_ep_matches_brute_force(seed: int) -> None:
    ctx, pins = random_moe_instance(seed)
    got, ref = search_against_brute_force(ctx, pins)
    if ref:
        assert got.status == "OPTIMAL"
        assert got.objective_ns == ref[0][0]


def test_some_moe_instances_search_ep() -> None:
    """The brute force visits ep > 1 and etp = 1 classes on these instances (the space is really searched)."""
    seen = set()
    for seed in range(8):
        ctx, pins = random_moe_instance(seed)
        ref, _ = brute_force(ctx, pins, SearchOptions())
        seen |= {(t.cand.ep > 1, t.cand.etp) for t in ref}
    assert (True, 1) in seen


def test_plan_explains_ep_and_the_cli_shows_the_all_to_all() -> None:
    r = plan(MIXTRAL)
    best = r.plans[0]
    assert best.parallel.ep > 1  # the search picks expert parallelism for Mixtral 8x22B on 128 H100
    details = " ".join(best.explanation.details)  # type: ignore[union-attr]
    assert "EP all-to-all" in details and f"EP{best.parallel.ep}" in details
    assert f"EP{best.parallel.ep}" in best.explanation.summary  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def mixtral_plan():
    from planner.api import estimate_plan

    return estimate_plan(
        {
            **MIXTRAL,
            "parallel": {
                "tp": 4,
                "pp": 8,
                "ep": 2,
                "sequence_parallel": True,
                "schedule": "interleaved-1f1b",
                "virtual_stages": 7,
            },
        }
    )


def test_exports_carry_expert_parallelism(mixtral_plan) -> None:
    from api.exporters import export
    from api.exporters.options import ExportOptions

    mega = export(mixtral_plan, "megatron", ExportOptions()).content
    for flag in (
        "--num-experts 8",
        "--expert-model-parallel-size 2",
        "--expert-tensor-parallel-size 4",  # Megatron-core's default ETP = TP (estimate's default)
        "--moe-router-topk 2",
        "--moe-grouped-gemm",
        "--moe-token-dispatcher-type alltoall",
    ):
        assert flag in " ".join(mega.split()), flag
    titan = export(mixtral_plan, "torchtitan-toml", ExportOptions()).content  # 0.2.2 runs etp = tp
    assert "expert_parallel_degree = 2" in titan and "expert_tensor_parallel_degree = 4" in titan
    with pytest.raises(MeshplanError) as err:  # 0.3.0 removed expert tensor parallelism
        export(mixtral_plan, "torchtitan", ExportOptions())
    assert err.value.field == "plan.parallel.etp" and "torchtitan-toml" in err.value.fix
    env = export(mixtral_plan, "torchrun", ExportOptions(command="train.py")).content  # your program: the layout
    assert "export MESHPLAN_EP=2" in env and "export MESHPLAN_ETP=4" in env


def test_targets_without_moe_refuse(mixtral_plan) -> None:
    from api.exporters import export
    from api.exporters.options import ExportOptions

    with pytest.raises(MeshplanError) as err:
        export(mixtral_plan, "deepspeed", ExportOptions())
    assert err.value.field == "plan.model.moe" and "megatron" in err.value.fix


def test_meshplan_target_refuses_what_its_runtime_does_not_run(mixtral_plan) -> None:
    """The meshplan target runs EP with whole experts: the Megatron-style plan's etp 4 is refused by name."""
    from api.exporters import export
    from api.exporters.options import ExportOptions

    assert mixtral_plan.parallel.etp == 4
    with pytest.raises(MeshplanError) as err:
        export(mixtral_plan, "meshplan", ExportOptions())
    assert err.value.field == "parallel.etp" and "megatron" in err.value.fix


def test_load_imbalance_slows_the_busiest_rank_and_capacity_caps_it() -> None:
    m = get_model("mixtral-8x22b")
    moe = m.moe
    assert moe is not None
    req = {**MIXTRAL, "parallel": {"tp": 4, "pp": 8, "ep": 2, "sequence_parallel": True}}
    base = estimate(req)
    skewed = m.model_copy(update={"moe": moe.model_copy(update={"load_imbalance": 1.5})})
    slow = estimate({**req, "model": skewed.model_dump()})
    capped = m.model_copy(update={"moe": moe.model_copy(update={"load_imbalance": 1.5, "capacity_factor": 1.0})})
    same = estimate({**req, "model": capped.model_dump()})
    assert slow.step_time_s > base.step_time_s and slow.breakdown.ep_comm_s > base.breakdown.ep_comm_s
    assert same.step_time_s == pytest.approx(base.step_time_s)


@pytest.mark.parametrize(
    ("parallel", "status", "field"),
    [
        ({"tp": 4, "pp": 8, "ep": 2, "sequence_parallel": True}, 200, None),
        ({"tp": 4, "pp": 8, "ep": 3, "sequence_parallel": True}, 422, "parallel.ep"),
    ],
)
def test_rest_estimate_shows_ep_or_names_the_field(tmp_path, parallel: dict, status: int, field: str | None) -> None:
    from fastapi.testclient import TestClient

    from tests.api_support import make_app

    with TestClient(make_app(tmp_path), raise_server_exceptions=False) as client:
        r = client.post("/v1/estimates", json={**MIXTRAL, "parallel": parallel})
    assert r.status_code == status, r.text
    if field is None:
        assert r.json()["parallel"]["ep"] == 2 and r.json()["estimate"]["breakdown"]["ep_comm_s"] > 0
    else:
        assert r.json()["errors"][0]["field"] == field


def test_megatron_export_carries_the_routers_score_function_and_group_limit() -> None:
    """A sigmoid, group-limited router (DeepSeek-V3's kind) is exported as such, not as Megatron's default softmax."""
    from api.exporters import export
    from api.exporters.options import ExportOptions
    from planner.api import estimate_plan

    m = get_model("mixtral-8x22b")
    routed = m.model_copy(
        update={
            "name": "mixtral-sigmoid",
            "moe": m.moe.model_copy(update={"router": "sigmoid", "router_groups": 4, "router_topk_groups": 2}),
        }  # type: ignore[union-attr]
    )
    p = estimate_plan(
        {**MIXTRAL, "model": routed.model_dump(), "parallel": {"tp": 4, "pp": 8, "ep": 2, "sequence_parallel": True}}
    )
    words = export(p, "megatron", ExportOptions()).content.split()
    assert words[words.index("--moe-router-score-function") + 1] == "sigmoid"
    assert words[words.index("--moe-router-num-groups") + 1] == "4"
    assert words[words.index("--moe-router-group-topk") + 1] == "2"
    plain = export(
        estimate_plan({**MIXTRAL, "parallel": {"tp": 4, "pp": 8, "ep": 2, "sequence_parallel": True}}),
        "megatron",
        ExportOptions(),
    )
    assert "--moe-router-score-function" not in plain.content and "--moe-router-num-groups" not in plain.content
