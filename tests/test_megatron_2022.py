"""Issue 27 §1: the ``megatron-2022`` preset (Megatron-LM main 52e636888c, 2022-11-29, the last commit before
FlashAttention; ``planner.specs.stack_eras``) says what that code runs — ZeRO-0 and the distributed optimizer (ZeRO-1),
1F1B and interleaved 1F1B (pp > 2), sequence parallelism, full and selective recompute, even stages, fp16/bf16, tied GPT
models, unfused attention — and prices it with the mechanisms the other presets already price: its blocking sends, its
scatter-gather sends without SP only (``compose.cost.boundary_lags``), Korthikanti et al.'s activation memory. Its
export target writes that commit's flags and refuses what it cannot run, naming the field. The other presets price
as before (their fingerprint)."""

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
from planner.specs.catalog import MODELS
from planner.specs.errors import MeshplanError
from planner.specs.stacks import STACKS
from planner.workload.activations import saved_activation_bytes

H, S = 4096, 2048  # gpt3-6.7b's hidden size; the sequence


def body(stack: str = "megatron-2022", precision: str = "bf16", nodes: int = 4, **pins) -> dict:
    return {
        "model": "gpt3-6.7b",
        "cluster": {"gpu": "a100-sxm4-80gb", "num_nodes": nodes, "gpus_per_node": 8},
        "training": {"global_batch_size": 512, "seq_len": S, "stack": stack, "precision": precision},
        "parallel": {"micro_batch_size": 1, "zero_stage": 0, **pins} if pins else {},
    }


# ---- what 52e636888c runs: each field against the code fact at the commit ------------------------------------------

#: (Stack field, value, the fact at NVIDIA/Megatron-LM 52e636888c)
CAPABILITIES = [
    ("zero_stages", (0, 1), "--DDP-impl local (L795); --use-distributed-optimizer (L831) asserts local DDP (L174)"),
    ("pipeline_zero_stages", (0, 1), "training.py L377: local DDP with pp > 1, the distributed optimizer is local DDP"),
    ("overlap_grad_reduce", False, "train_step: optimizer.reduce_model_grads after forward_backward_func returns"),
    ("grad_accumulation", "megatron", "one all-reduce / reduce-scatter per step, after the last micro-batch"),
    ("reduce_dtype", "fp32_bf16", "--bf16 forces accumulate_allreduce_grads_in_fp32 (L151-160); fp16 reduces fp16"),
    ("schedules", ("1f1b", "interleaved-1f1b"), "schedules.py get_forward_backward_func: without / with interleaving"),
    ("interleaved_min_pp", 3, "arguments.py L134: 'pipeline-model-parallel size should be greater than 2'"),
    ("even_stages", True, "transformer.py L771: num_layers % pp == 0; then num_layers / pp / v per chunk"),
    ("p2p_blocking", ("1f1b", "interleaved-1f1b"), "_communicate: batch_isend_irecv, wait, torch.cuda.synchronize"),
    ("p2p_scatter_gather", True, "--no-scatter-gather-tensors-in-pipeline off by default; not with SP (L149)"),
    ("sequence_parallel", True, "--sequence-parallel (L632), off at tp = 1 (L315)"),
    ("recompute", ("none", "selective", "full"), "--recompute-granularity full|selective (L553)"),
    ("pp_with_tied_embeddings", True, "optimizer.py allreduce_word_embedding_grads over the embedding group"),
    ("finalize_grads", "megatron", "allreduce_layernorm_grads (SP) and the word-embedding all-reduce"),
    ("precisions", ("fp16", "bf16", "fp32"), "--fp16, --bf16, neither = fp32"),
    ("attention", "unfused", "CoreAttention: baddbmm into the s×s scores, FusedScaleMaskSoftmax, bmm"),
    ("dropout", True, "--attention-dropout 0.1, --hidden-dropout 0.1"),
    ("kernels", "fused", "bias_gelu_impl, bias_dropout_add_fused_train, apex / persistent fused LayerNorm"),
    ("activations", "te", "Korthikanti et al. (arXiv 2205.05198), the paper of this code: 34·s·b·h + 5·a·s²·b"),
    ("cp_comms", (), "no context parallelism"),
    ("fp8_recipes", (), "no FP8"),
    ("tp_overlap", None, "no userbuffers (Transformer Engine)"),
    ("moe", False, "SwitchMLP (--num-experts) is a top-1 loop over whole experts on each rank, not priced"),
    ("nccl", "2.10", "NGC 22.0x: NCCL 2.11–2.15, v2.10.3-1's A100 tuner constants (tuning.cc)"),
]


@pytest.mark.parametrize("field,value,fact", CAPABILITIES, ids=[c[0] for c in CAPABILITIES])
def test_what_2022_runs(field: str, value: object, fact: str) -> None:
    assert getattr(STACKS["megatron-2022"], field) == value, fact


def test_it_builds_what_v25_builds() -> None:
    """No GQA, SwiGLU, RMSNorm or RoPE at 52e636888c (transformer.py: ParallelMLP with GeLU, LayerNorm, learned
    positions in language_model.py): the same unbuilt parts as Megatron-LM v2.5."""
    assert STACKS["megatron-2022"].unbuilt == STACKS["megatron-2021"].unbuilt
    assert "norm=rmsnorm" in STACKS["megatron-2022"].unbuilt and "activation=swiglu" in STACKS["megatron-2022"].unbuilt


# ---- activation memory = Korthikanti et al. Table 2 (the paper of this code) ----------------------------------------


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("sp", [False, True])
def test_activation_bytes_are_korthikanti_table_2(tp: int, sp: bool) -> None:
    """Per layer, 16-bit: no recompute s·b·h·(10 + 24/t + 5·a·s/(h·t)) (SP: (34 + 5·a·s/h)/t); selective drops the
    5·a·s/(h·t) term (the attention core: softmax output, its dropout mask and output); full keeps the layer's input
    (SP: /t). Plus the two LayerNorms' fp32 mean and rstd (16 B a token, /t with SP), which the table leaves out."""
    m = MODELS["gpt3-6.7b"]
    s, b, h, a = S, 1, m.hidden_size, m.num_attention_heads
    got = saved_activation_bytes(m, "transformer_block", b, s, tp, sp, "bf16", STACKS["megatron-2022"])
    t = tp if sp else 1
    stats = 16 * s * b / t
    core = 5 * a * s / (h * tp)
    sel = s * b * h * 34 / tp if sp else s * b * h * (10 + 24 / tp)
    assert got.none == pytest.approx(sel + s * b * h * core + stats, abs=1)
    assert got.selective == pytest.approx(sel + stats, abs=1)
    assert got.full == 2 * s * b * h / t


# ---- scatter-gather: without SP only -------------------------------------------------------------------------------


def _lags(stack: str, nodes: int, precision: str = "bf16", **pins) -> tuple:
    req = PlanRequest.model_validate(body(stack, precision, nodes, **pins))
    ctx = context(req)
    cand, _ = complete_pins(ctx, req)
    return ctx, cand, class_costs(ctx, cand)


@pytest.mark.parametrize(
    "pins",
    [
        {"tp": 4, "pp": 4, "dp": 2, "sequence_parallel": True},
        {"tp": 8, "pp": 4, "dp": 1, "sequence_parallel": True, "schedule": "interleaved-1f1b", "virtual_stages": 2},
    ],
)
def test_with_sp_the_send_is_the_sp_shard_whole_on_the_action(pins: dict) -> None:
    """``_communicate`` scatters only ``not args.sequence_parallel``; with SP the tensor is (s/tp)·b·h already
    (``schedules.py`` L276-280): one send of act/tp across the node boundary, no all-gather, blocking (on the action)."""
    ctx, cand, cc = _lags("megatron-2022", 4, **pins)
    act = S * H * 2
    hand = ctx.comm.time("send_recv", act / pins["tp"], 2, "inter_node")
    sends = boundary_lags(ctx, cand, cc.shared.p2p_bytes)
    assert cc.shared.p2p_bytes == act // pins["tp"]
    assert sends and all(abs(t - hand * 1e9) <= 1 for t in sends), (sends, hand)
    assert cc.lag == [0] * len(sends) and cc.f_extra_pp == sends + [0] and cc.b_extra_pp == [0] + sends


def test_without_sp_it_scatters_as_v25() -> None:
    """Without SP the send is act/tp + the receiver's TP all-gather of act, as v2.5."""
    ctx, cand, cc = _lags("megatron-2022", 4, tp=4, pp=4, dp=2, sequence_parallel=False)
    act = S * H * 2
    hand = ctx.comm.time("send_recv", act / 4, 2, "inter_node") + ctx.comm.time("all_gather", act, 4, "intra_node", 4)
    assert all(abs(t - hand * 1e9) <= 1 for t in boundary_lags(ctx, cand, cc.shared.p2p_bytes))
    sp = dataclasses.replace(cand, sequence_parallel=True)
    assert boundary_lags(ctx, sp, act // 4)[0] < boundary_lags(ctx, cand, act)[0]


def test_what_v25_runs_is_priced_as_on_v25() -> None:
    """A configuration both run (ZeRO-0, no SP, full recompute, bf16) prices the same on megatron-2021 and
    megatron-2022 — the same kernels, sends, DDP, NCCL era and residual row (``RESIDUAL_LINEAGE``) — but for the
    gradient-accumulation pass (cost model 37): v2.5 adds every bf16 gradient into its fp32 main grad by hook,
    52e636888c accumulates the linears' in their (compute-bound) wgrad GEMMs, so its compute and bubble are lower."""
    for pins in (
        {"tp": 8, "pp": 4, "dp": 1, "recompute": "full", "sequence_parallel": False},
        {"tp": 4, "pp": 4, "dp": 2, "schedule": "interleaved-1f1b", "virtual_stages": 2, "sequence_parallel": False},
    ):
        old, new = (planner.estimate(body(s, **pins)) for s in ("megatron-2021", "megatron-2022"))
        same = ("tp_comm_s", "pp_p2p_s", "dp_sync_s", "optimizer_s", "cp_comm_s", "ep_comm_s")
        assert all(getattr(new.breakdown, k) == getattr(old.breakdown, k) for k in same)
        assert new.breakdown.compute_s < old.breakdown.compute_s and new.step_time_s < old.step_time_s
        assert new.breakdown.pp_bubble_s <= old.breakdown.pp_bubble_s
        assert new.peak_memory_gib == old.peak_memory_gib


def test_the_distributed_optimizer_shards_the_optimizer_states() -> None:
    """ZeRO-1 (``--use-distributed-optimizer``): the fp32 master weights and Adam moments (12 B a parameter) split over
    dp; the bf16 weights and the fp32 gradient buffer stay whole (README 'Distributed Optimizer': with bf16 the main
    grads are the model's grads)."""
    pins = {"tp": 4, "pp": 4, "dp": 2, "sequence_parallel": True, "recompute": "selective"}
    z0 = planner.estimate(body(**pins, zero_stage=0) | {}).memory_per_stage[0]
    z1 = planner.estimate(body(**{**pins, "zero_stage": 1})).memory_per_stage[0]
    assert z1.optimizer_gib == pytest.approx(z0.optimizer_gib / 2, rel=1e-6)
    assert z1.weights_gib == z0.weights_gib and z1.gradients_gib == z0.gradients_gib


# ---- the search stays inside 2022; pins outside are refused naming the field --------------------------------------


def test_free_plans_stay_inside_2022_and_export_to_its_flags() -> None:
    plans = planner.plan({**body(), "top_k": 8}).plans
    assert plans
    for p in plans:
        c, L = p.parallel, p.model.num_layers
        assert c.zero_stage in (0, 1) and c.cp == 1 and c.schedule in ("1f1b", "interleaved-1f1b"), c
        assert len(set(c.stage_layers)) == 1 and (c.virtual_stages == 1 or c.pp > 2), c
        words = export(p, "megatron-2022", ExportOptions()).content.split()
        assert words[words.index("--tensor-model-parallel-size") + 1] == str(c.tp)
        assert words[words.index("--pipeline-model-parallel-size") + 1] == str(c.pp)
        if c.virtual_stages > 1:  # arguments.py: v = (num_layers // pp) // layers per virtual stage
            per = int(words[words.index("--num-layers-per-virtual-pipeline-stage") + 1])
            assert L % per == 0 and (L // c.pp) // per == c.virtual_stages
        assert ("--sequence-parallel" in words) is (c.sequence_parallel and c.tp > 1)
        assert ("--use-distributed-optimizer" in words) is (c.zero_stage == 1)
        rg = words[words.index("--recompute-granularity") + 1] if "--recompute-granularity" in words else "none"
        assert rg == c.recompute and "--bf16" in words and "--checkpoint-activations" not in words


@pytest.mark.parametrize(
    ("pins", "field"),
    [
        ({"zero_stage": 2}, "parallel.zero_stage"),
        ({"zero_stage": 3}, "parallel.zero_stage"),
        ({"pp": 2, "schedule": "interleaved-1f1b", "virtual_stages": 2}, "parallel.pp"),
        ({"pp": 4, "schedule": "gpipe"}, "parallel.schedule"),
        ({"pp": 2, "stage_layers": [15, 17]}, "parallel.stage_layers"),
        ({"cp": 2}, "parallel.cp"),
    ],
)
def test_a_pin_outside_2022_is_refused_naming_the_field(pins: dict, field: str) -> None:
    with pytest.raises(MeshplanError) as err:
        planner.estimate({**body(), "parallel": {"micro_batch_size": 1, **pins}})
    assert err.value.field == field and "megatron-2022" in err.value.message


def test_fp8_and_a_llama_are_refused() -> None:
    fp8 = body(precision="fp8", tp=2, pp=1, dp=16)  # on H100s, which have FP8 tensor cores: the stack refuses it
    fp8["cluster"]["gpu"] = "h100-sxm5-80gb"
    with pytest.raises(MeshplanError) as err:
        planner.estimate(fp8)
    assert err.value.field.startswith("training.") and "megatron-2022" in err.value.message
    with pytest.raises(MeshplanError) as err:
        planner.estimate({**body(), "model": "llama3-8b"})
    assert err.value.field == "training.stack" and "model.family=llama" in err.value.message
    assert "megatron-2022" in err.value.message


def test_2022_trains_in_fp16_and_exports_it() -> None:
    plan = planner.plan({**body(precision="fp16"), "top_k": 1}).plans[0]
    text = export(plan, "megatron-2022", ExportOptions()).content
    assert "--fp16" in text and "--bf16" not in text and "export CUDA_DEVICE_MAX_CONNECTIONS=1" in text


@pytest.mark.parametrize(
    ("stack", "model", "pins", "field"),
    [
        ("megatron", "gpt3-6.7b", {"tp": 2, "pp": 2, "schedule": "interleaved-1f1b", "virtual_stages": 2}, "plan.parallel.pp"),
        ("megatron", "gpt3-6.7b", {"tp": 2, "pp": 2, "stage_layers": [15, 17]}, "plan.parallel.stage_layers"),
        ("megatron", "llama3-8b", {"tp": 2, "pp": 1}, "plan.model.family"),
        ("deepspeed", "gpt3-6.7b", {"zero_stage": 2, "tp": 1, "pp": 1}, "plan.parallel.zero_stage"),
    ],
)  # fmt: skip
def test_the_export_refuses_what_2022_cannot_run(stack: str, model: str, pins: dict, field: str) -> None:
    """Plans priced for other stacks that 52e636888c cannot run are refused by its target, naming the field."""
    req = {**body(stack, "bf16"), "model": model, "parallel": {"zero_stage": 0, "recompute": "none", **pins}}
    plan = planner.plan({**req, "top_k": 1}).plans[0]
    with pytest.raises(MeshplanError) as err:
        export(plan, "megatron-2022", ExportOptions())
    assert err.value.field == field and "Megatron-LM 52e636888c" in err.value.message


# ---- the other presets price as before ------------------------------------------------------------------------------


def test_the_other_megatron_presets_price_as_before() -> None:
    """Estimates (step, breakdown, peak memory) on megatron-2020, megatron-2021 and megatron: the fingerprint main
    (f90590a, cost model 31) gives them; adding megatron-2022 moves nothing they price."""
    cases = [
        body("megatron-2020", "fp16", tp=2, pp=4, dp=4, recompute="full"),
        body("megatron-2021", "fp16", tp=8, pp=4, dp=1),
        body("megatron-2021", tp=4, pp=4, dp=2, schedule="interleaved-1f1b", virtual_stages=2, recompute="full"),
        body("megatron", tp=4, pp=4, dp=2, sequence_parallel=True, recompute="selective"),
        body(
            "megatron",
            tp=4,
            pp=4,
            dp=2,
            zero_stage=1,
            sequence_parallel=True,
            schedule="interleaved-1f1b",
            virtual_stages=2,
        ),  # fmt: skip
        body("megatron", "fp16", tp=2, pp=2, dp=8, sequence_parallel=False),
    ]
    vals = []
    for r in cases:
        e = planner.estimate(r)
        floats = {k: float(f"{v:.9g}") for k, v in e.breakdown.model_dump().items() if isinstance(v, float)}
        vals.append([float(f"{e.step_time_s:.9g}"), floats, float(f"{e.peak_memory_gib:.9g}")])
    assert (
        hashlib.sha256(json.dumps(vals, sort_keys=True).encode()).hexdigest()[:16] == "d674917ecf1681f9"
    )  # megatron's residual refitted with the MLPerf and NeMo rows (1.016 -> 1.117 -> 1.171 -> 1.091; cost models 50-56); the padded vocabulary (cost model 54); refitted 1.082 -> 1.084 (cost model 64); megatron on A100 takes the (*, ampere) row, 1.087 (cost model 70)


# ---- the search stays exact with SP, selective recompute and the distributed optimizer ----------------------------


@pytest.mark.parametrize("seed", range(0, 24, 3))
def test_search_matches_brute_force_on_2022(seed: int) -> None:
    """``test_planner_interleaved``'s instances priced for megatron-2022 with tp, SP and ZeRO 0/1 free (selective
    recompute pinned): blocking sends on both schedules, scattered ones without SP, interleaving on pp ≥ 3 only. The
    search's optimum is the brute force's, and every bound it proves with (``search.bounds``) holds."""
    from planner.compose.cost import Context, evaluate
    from planner.search import search
    from planner.search.bounds import cut_bound, quick_bound
    from planner.search.bruteforce import brute_force
    from planner.search.space import enumerate_candidates, forced_cut
    from planner.specs import ParallelPins, SearchOptions
    from tests.test_planner_interleaved import interleaved_instance

    ctx, _ = interleaved_instance(seed)
    training = ctx.training.model_copy(update={"stack": "megatron-2022", "precision": "bf16"})
    model = ctx.model.model_copy(update={"tie_embeddings": True})

    def fresh() -> Context:
        return Context(model=model, gpu=ctx.gpu, cluster=ctx.cluster, training=training)

    pins = ParallelPins(recompute="selective")
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
    assert not any(x.zero_stage > 1 or x.cp > 1 for x in cands)
    for cand in cands:
        cut = forced_cut(c, pins, cand)
        if cut is not None:
            ev = evaluate(class_costs(c, cand), cut)
            assert cut_bound(c, cand, cut) <= ev.objective_ns and quick_bound(c, cand) <= ev.objective_ns
