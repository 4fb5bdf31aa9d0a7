"""Issue 27 §1: the ``megatron-2021`` preset (Megatron-LM v2.5, ``planner.specs.stack_eras``) says what that release
runs — ZeRO-0, 1F1B and interleaved 1F1B (pp > 2), full recompute, no SP, even stages, fp16/bf16, tied GPT models —
and prices its scatter-gather pipeline sends (``Stack.p2p_scatter_gather``, ``compose.cost.boundary_lags``): each TP
rank sends act / tp over its own link and the receiving stage all-gathers act over TP, only with tp > 1 and no SP.
Its export target writes v2.5 flags (``--num-layers-per-virtual-pipeline-stage``) and refuses what v2.5 cannot run,
naming the field. The ``megatron-2020`` and ``megatron`` presets price as before (their fingerprint)."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

import planner
from api.exporters import ExportOptions, export
from planner.answer.request import complete_pins, context
from planner.compose.cost import boundary_lags, class_costs
from planner.specs import PlanRequest
from planner.specs.errors import MeshplanError
from planner.specs.stacks import STACKS
from tests.p2p_support import assert_scattered_sends, assert_whole_sends

H, S = 4096, 2048  # gpt3-6.7b's hidden size; the sequence


def body(stack: str = "megatron-2021", precision: str = "fp16", nodes: int = 4, **pins) -> dict:
    return {
        "model": "gpt3-6.7b",
        "cluster": {"gpu": "a100-sxm4-80gb", "num_nodes": nodes, "gpus_per_node": 8},
        "training": {"global_batch_size": 512, "seq_len": S, "stack": stack, "precision": precision},
        "parallel": {"micro_batch_size": 1, "zero_stage": 0, **pins} if pins else {},
    }


# ---- what v2.5 runs: each field against the code fact at the tag ------------------------------------------------

#: (Stack field, value, the fact at NVIDIA/Megatron-LM v2.5, e269e20064)
CAPABILITIES = [
    ("zero_stages", (0,), "no distributed optimizer; training.py asserts --DDP-impl local with pp > 1"),
    ("pipeline_zero_stages", (0,), "the same"),
    ("overlap_grad_reduce", False, "local DDP: allreduce_gradients() after forward_backward_func returns"),
    ("grad_accumulation", "megatron", "one all-reduce per step, after the last micro-batch"),
    ("reduce_dtype", "fp32_bf16", "--bf16 forces accumulate_allreduce_grads_in_fp32; fp16 reduces in fp16"),
    ("schedules", ("1f1b", "interleaved-1f1b"), "schedules.py: without and with interleaving"),
    ("interleaved_min_pp", 3, "arguments.py: 'pipeline-model-parallel size should be greater than 2'"),
    ("even_stages", True, "transformer.py: num_layers % pp == 0, then num_layers / pp / v per chunk"),
    ("p2p_blocking", ("1f1b", "interleaved-1f1b"), "_communicate: batch_isend_irecv, wait, torch.cuda.synchronize"),
    ("p2p_scatter_gather", True, "--scatter-gather-tensors-in-pipeline on unless --no-scatter-gather-…"),
    ("sequence_parallel", False, "no --sequence-parallel (2022)"),
    ("recompute", ("none", "full"), "--checkpoint-activations only; no --recompute-granularity"),
    ("pp_with_tied_embeddings", True, "train_step all-reduces word_embeddings' grad over the embedding group"),
    ("precisions", ("fp16", "bf16", "fp32"), "--fp16, --bf16 (b4bc51b1e7), neither = fp32"),
    ("attention", "unfused", "ParallelAttention: baddbmm into the s×s scores, FusedScaleMaskSoftmax, bmm"),
    ("dropout", True, "--attention-dropout 0.1, --hidden-dropout 0.1"),
    ("kernels", "fused", "bias_gelu_impl, bias_dropout_add_fused_train, apex FusedLayerNorm"),
    ("cp_comms", (), "no context parallelism"),
    ("fp8_recipes", (), "no FP8"),
    ("moe", False, "GPT only"),
    ("nccl", "2.10", "README: NGC PyTorch 20.12 (NCCL 2.8.3); the 2.7–2.10 tuner"),
]


@pytest.mark.parametrize("field,value,fact", CAPABILITIES, ids=[c[0] for c in CAPABILITIES])
def test_what_v25_runs(field: str, value: object, fact: str) -> None:
    assert getattr(STACKS["megatron-2021"], field) == value, fact


def test_which_presets_scatter() -> None:
    """Megatron-core core_v0.16.1 parses --no-scatter-gather-tensors-in-pipeline but its p2p_communication.py never
    reads it; v2.0 predates it (72e4230bb5, 2021-02-16). megatron-2021 sets the field, and megatron-2022, whose
    52e636888c still scatters without SP (tests/test_megatron_2022.py); DeepSpeed's PipelineEngine partitions its
    sends over TP (cost model 41, tests/test_deepspeed_pipe_partition.py)."""
    assert [s.id for s in STACKS.values() if s.p2p_scatter_gather] == ["deepspeed", "megatron-2021", "megatron-2022"]


# ---- the scatter-gather lag = hand formula ----------------------------------------------------------------------


def _lags(stack: str, nodes: int, precision: str = "fp16", **pins) -> tuple:
    req = PlanRequest.model_validate(body(stack, precision, nodes, **pins))
    ctx = context(req)
    cand, _ = complete_pins(ctx, req)
    return ctx, cand, class_costs(ctx, cand)


#: (pins, nodes, the link of every boundary): a stage of dp·tp GPUs on one node or more
LAG_CASES = [
    ({"tp": 2, "pp": 4, "dp": 4}, 4, "inter_node"),  # 8 GPUs a stage: one node each
    ({"tp": 2, "pp": 4, "dp": 1}, 1, "intra_node"),  # 2 GPUs a stage: the pipeline inside a node
    ({"tp": 4, "pp": 2, "dp": 4}, 4, "inter_node"),  # 16 GPUs a stage
    ({"tp": 8, "pp": 4, "dp": 1, "schedule": "interleaved-1f1b", "virtual_stages": 2}, 4, "inter_node"),
    ({"tp": 4, "pp": 4, "dp": 2, "micro_batch_size": 2}, 4, "inter_node"),
]


@pytest.mark.parametrize("pins,nodes,link", LAG_CASES)
def test_a_scattered_send_is_act_over_tp_on_each_link_plus_the_all_gather(pins: dict, nodes: int, link: str) -> None:
    """Each boundary: the send of act / tp (act = s·b·h fp16 bytes) over the boundary's link + the all-gather of act
    over the tp ranks of a node (NVLink), on the sending action (v2.5 blocks both ends, both schedules); megatron-2020
    sends act whole over the same link."""
    assert_scattered_sends("megatron-2021", nodes, link, "fp16", **pins)
    if pins.get("virtual_stages", 1) == 1:  # v2.0 runs no interleaving
        assert_whole_sends("megatron-2020", nodes, link, "fp16", **pins)


def test_no_scatter_with_one_tp_rank_or_with_sequence_parallelism() -> None:
    """tp = 1: the send of act alone. SP (a class on this stack's pricing, whatever it runs): the tensor is already
    split, the send of act / tp alone, no all-gather."""
    ctx, cand, cc = _lags("megatron-2021", 4, tp=1, pp=4, dp=8)
    act = S * H * 2
    one = ctx.comm.time("send_recv", act, 2, "inter_node")
    assert all(abs(t - one * 1e9) <= 1 for t in boundary_lags(ctx, cand, cc.shared.p2p_bytes))
    ctx, cand, _ = _lags("megatron-2021", 4, tp=4, pp=4, dp=2)
    sp = dataclasses.replace(cand, sequence_parallel=True)
    split = ctx.comm.time("send_recv", act / 4, 2, "inter_node")
    assert all(abs(t - split * 1e9) <= 1 for t in boundary_lags(ctx, sp, act // 4))


def test_scattering_shortens_the_pipeline_sends_of_a_2021_run() -> None:
    """The same 1F1B configuration priced on v2.0 and v2.5: the p2p share of the step drops, nothing else moves but
    the residual row v2.0 carries (``residuals_builtin``: none is fitted for megatron-2021)."""
    pins = {"tp": 8, "pp": 4, "dp": 1, "recompute": "full"}
    old, new = (planner.estimate(body(s, **pins)).breakdown for s in ("megatron-2020", "megatron-2021"))
    assert 0 < new.pp_p2p_s < old.pp_p2p_s
    assert new.tp_comm_s == pytest.approx(old.tp_comm_s) and new.dp_sync_s == pytest.approx(old.dp_sync_s)


# ---- the search stays inside v2.5; pins outside are refused naming the field ---------------------------------------


def test_free_plans_stay_inside_v25_and_export_to_its_flags() -> None:
    plans = planner.plan({**body(), "top_k": 8}).plans
    assert plans and any(p.parallel.virtual_stages > 1 for p in plans)
    for p in plans:
        c, L = p.parallel, p.model.num_layers
        assert c.zero_stage == 0 and not c.sequence_parallel and c.recompute in ("none", "full"), c
        assert len(set(c.stage_layers)) == 1 and (c.virtual_stages == 1 or c.pp > 2), c
        words = export(p, "megatron-2021", ExportOptions()).content.split()
        assert words[words.index("--tensor-model-parallel-size") + 1] == str(c.tp)
        assert words[words.index("--pipeline-model-parallel-size") + 1] == str(c.pp)
        if c.virtual_stages > 1:  # v2.5's arguments.py: v = (num_layers // pp) // layers per virtual stage
            per = int(words[words.index("--num-layers-per-virtual-pipeline-stage") + 1])
            assert L % per == 0 and (L // c.pp) // per == c.virtual_stages
        else:
            assert "--num-layers-per-virtual-pipeline-stage" not in words
        assert (
            "--fp16" in words
            and "--DDP-impl" in words
            and ("--checkpoint-activations" in words) is (c.recompute == "full")
        )


@pytest.mark.parametrize(
    ("pins", "field"),
    [
        ({"zero_stage": 1}, "parallel.zero_stage"),
        ({"tp": 2, "sequence_parallel": True}, "parallel.sequence_parallel"),
        ({"recompute": "selective"}, "parallel.recompute"),
        ({"pp": 2, "schedule": "interleaved-1f1b", "virtual_stages": 2}, "parallel.pp"),
        ({"pp": 4, "schedule": "gpipe"}, "parallel.schedule"),
        ({"pp": 2, "stage_layers": [15, 17]}, "parallel.stage_layers"),
    ],
)
def test_a_pin_outside_v25_is_refused_naming_the_field(pins: dict, field: str) -> None:
    with pytest.raises(MeshplanError) as err:
        planner.estimate({**body(), "parallel": {"micro_batch_size": 1, **pins}})
    assert err.value.field == field and "megatron-2021" in err.value.message


def test_interleaving_on_two_stages_is_refused_and_offered_elsewhere() -> None:
    """v2.5 asserts pp > 2 with --num-layers-per-virtual-pipeline-stage; Megatron-core interleaves 2 stages."""
    with pytest.raises(MeshplanError) as err:
        planner.estimate({**body(), "parallel": {"pp": 2, "schedule": "interleaved-1f1b", "virtual_stages": 2}})
    assert err.value.field == "parallel.pp" and "pp ≥ 3" in err.value.message
    assert "megatron" in err.value.fix.split("training.stack: ")[1].rstrip(")").split(" / ")
    e = planner.estimate(
        {**body(), "parallel": {"pp": 4, "tp": 2, "schedule": "interleaved-1f1b", "virtual_stages": 2}}
    )
    assert e.step_time_s > 0


def test_v25_trains_in_bf16_and_exports_it() -> None:
    plan = planner.plan({**body(precision="bf16"), "top_k": 1}).plans[0]
    text = export(plan, "megatron-2021", ExportOptions()).content
    assert "--bf16" in text and "--fp16" not in text


@pytest.mark.parametrize(
    ("stack", "pins", "field"),
    [
        ("megatron", {"zero_stage": 1, "tp": 1, "pp": 1}, "plan.parallel.zero_stage"),
        ("megatron", {"tp": 2, "pp": 2, "schedule": "interleaved-1f1b", "virtual_stages": 2}, "plan.parallel.pp"),
        ("megatron", {"tp": 2, "pp": 1, "sequence_parallel": True}, "plan.parallel.sequence_parallel"),
        ("megatron", {"recompute": "selective", "tp": 4, "pp": 1}, "plan.parallel.recompute"),
    ],
)
def test_the_export_refuses_what_v25_cannot_run(stack: str, pins: dict, field: str) -> None:
    """Plans priced for Megatron-core that v2.5 cannot run are refused by the megatron-2021 target, naming the field."""
    pins = {"zero_stage": 0, "sequence_parallel": False, "recompute": "none", **pins}  # all else what v2.5 runs
    plan = planner.plan({**body(stack, "bf16"), "parallel": pins, "top_k": 1}).plans[0]
    with pytest.raises(MeshplanError) as err:
        export(plan, "megatron-2021", ExportOptions())
    assert err.value.field == field and "Megatron-LM v2.5" in err.value.message


# ---- the other presets price as before ------------------------------------------------------------------------------


def test_the_megatron_2020_and_megatron_presets_price_as_before() -> None:
    """Estimates (step and breakdown) of tp > 1 pipelines without SP on the two presets that do not scatter: the
    fingerprint main (852a43c, cost model 30) gives them; scatter-gather moves nothing they price."""
    cases = [
        body("megatron-2020", tp=2, pp=4, dp=4, recompute="full"),
        body("megatron-2020", tp=8, pp=4, dp=1),
        body("megatron", "bf16", tp=4, pp=4, dp=2, sequence_parallel=False),
        body("megatron", "bf16", tp=4, pp=4, dp=2, schedule="interleaved-1f1b", virtual_stages=2),
        body("megatron", tp=2, pp=2, dp=8, sequence_parallel=True),
    ]
    vals = []
    for r in cases:
        e = planner.estimate(r)
        floats = {k: float(f"{v:.9g}") for k, v in e.breakdown.model_dump().items() if isinstance(v, float)}
        vals.append([float(f"{e.step_time_s:.9g}"), floats])
    assert (
        hashlib.sha256(json.dumps(vals, sort_keys=True).encode()).hexdigest()[:16] == "f8e412d446bbbe16"
    )  # megatron's residual refitted with the MLPerf and NeMo rows (1.016 -> 1.117 -> 1.171 -> 1.091; cost models 50-56); the padded vocabulary (cost model 54); megatron on A100 takes the (*, ampere) row, 1.087 (cost model 70)


# ---- the search stays exact with blocking interleaved sends and scattered sends -----------------------------------


@pytest.mark.parametrize("seed", range(0, 24, 3))
def test_search_matches_brute_force_on_v25(seed: int) -> None:
    """``test_planner_interleaved``'s instances priced for megatron-2021 with tp free: blocking sends on both schedules,
    scattered ones with tp = 2, interleaving on pp = 4 only. The search's optimum is the brute force's, and every
    bound it proves with (``search.bounds``: the same ``boundary_lags``) holds."""
    from planner.compose.cost import Context, evaluate
    from planner.search import search
    from planner.search.bounds import cut_bound, quick_bound
    from planner.search.bruteforce import brute_force
    from planner.search.space import enumerate_candidates, forced_cut
    from planner.specs import ParallelPins, SearchOptions
    from tests.test_planner_interleaved import interleaved_instance

    ctx, _ = interleaved_instance(seed)
    training = ctx.training.model_copy(update={"stack": "megatron-2021", "precision": "fp16"})
    model = ctx.model.model_copy(update={"tie_embeddings": True})

    def fresh() -> Context:
        return Context(model=model, gpu=ctx.gpu, cluster=ctx.cluster, training=training)

    pins = ParallelPins(recompute="none", sequence_parallel=False, zero_stage=0)
    options = SearchOptions(num_workers=1)
    ref, scored = brute_force(fresh(), pins, options)
    got = search(fresh(), pins, options, top_k=3)
    assert scored > 0
    if not ref:
        assert got.results == [] and got.status == "INFEASIBLE"
        return
    assert got.status == "OPTIMAL" and got.objective_ns == got.bound_ns == ref[0][0]
    assert [r.evaluation.objective_ns for r in got.results] == [t[0] for t in ref[:3]]
    c = fresh()
    cands = enumerate_candidates(c, pins, options)
    assert not any(x.virtual_stages > 1 and x.pp < 3 for x in cands)
    for cand in cands:
        cut = forced_cut(c, pins, cand)
        if cut is not None:
            ev = evaluate(class_costs(c, cand), cut)
            assert cut_bound(c, cand, cut) <= ev.objective_ns and quick_bound(c, cand) <= ev.objective_ns
