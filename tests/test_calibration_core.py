"""The residual constants in the cost model (planner/compute.py, kernels.py, comm.py, terms.py) and the
fitting routine (planner/calibrate.py) and which residuals price a request (planner/residuals.py): identity changes nothing, each residual moves exactly its own
term (checked against the per-op parts computed by hand), the fit recovers residuals the model itself
generated, and it refuses what it cannot determine."""

from __future__ import annotations

import math

import pytest

import planner
from planner.answer.calibrate import Observation, fit_residuals, predict_step_time
from planner.answer.request import context
from planner.pricing.gpu import attention_time, elementwise_time, linear_times
from planner.pricing.layer_times import analytic_parts
from planner.pricing.residuals import builtin_residuals, generation
from planner.specs import Calibration, GpuSpec, PeakTflops, PlanRequest, Residuals
from planner.specs.errors import MeshplanError
from planner.workload.ops import kernel_counts
from tests.bench_support import bench_module

CPU = GpuSpec(
    id="cpu",
    memory_gib=16.0,
    peak_tflops=PeakTflops(fp32=0.1),
    hbm_bandwidth_GBps=10.0,
    nvlink_bandwidth_GBps=1.0,
    nic_bandwidth_GBps=1.0,
    source="a test host",
)


def request(
    model: str = "llama3-8b",
    gpu: str | GpuSpec = "h100-sxm5-80gb",
    stack: str | dict = "meshplan",
    residuals: Residuals | None = None,
    nodes: int = 1,
    per_node: int = 8,
    precision: str = "bf16",
    seq: int = 4096,
    gbs: int = 64,
    **pins,
) -> PlanRequest:
    pins = {"tp": 2, "pp": 2, "dp": 2 * nodes * per_node // 8, "micro_batch_size": 1, **pins}
    gpu_id = gpu if isinstance(gpu, str) else gpu.id
    return PlanRequest.model_validate(
        {
            "model": model,
            "cluster": {"gpu": gpu, "num_nodes": nodes, "gpus_per_node": per_node},
            "training": {"global_batch_size": gbs, "seq_len": seq, "precision": precision, "stack": stack},
            "parallel": pins,
            "calibration": None if residuals is None else Calibration(gpu=gpu_id, residuals=residuals),
        }
    )


def ctx_with(req: PlanRequest, residuals: Residuals):
    ctx = context(req)
    ctx.calibration = Calibration(gpu=ctx.gpu.id, residuals=residuals)
    return ctx


def block_parts(ctx, kind: str = "transformer_block", mbs: int = 1, tp: int = 2, sp: bool = False):
    """The per-op parts of one layer, computed directly from planner.workload.ops and planner.pricing.gpu (no residuals involved):
    linear GEMMs scaled to the layer's FLOPs, the attention core, the memory-bound ops."""
    from planner.workload.analytic import FLASH_BWD_RATIO
    from planner.workload.ops import attention_core_flops

    lp = ctx.layer(kind, mbs, tp, sp)
    seq = ctx.training.seq_len
    af, ab = attention_time(ctx, mbs, tp) if kind == "transformer_block" else (0.0, 0.0)
    att = attention_core_flops(ctx.model, mbs, seq, tp) if kind == "transformer_block" else 0.0
    lf, lb, fl = linear_times(ctx, kind, mbs * seq, tp)
    sf = max(0.0, lp.fwd_flops - att) / fl if fl else 0.0
    sb = max(0.0, lp.bwd_flops - FLASH_BWD_RATIO * att) / (2 * fl) if fl else 0.0
    elem = elementwise_time(ctx, kind, mbs, tp, sp)
    return lp, lf * sf + af, lb * sb + ab, elem, af, ab


# ------------------------------------------------------------------------------------------------
# The hooks


@pytest.mark.parametrize(
    "req",
    [
        request(),
        request(model="tiny-gpt", gpu=CPU, precision="fp32", seq=64, gbs=8, tp=1, pp=1, dp=1, per_node=1),
        request(model="gpt3-1.3b", gpu="a100-sxm4-80gb", stack="megatron", seq=2048, recompute="selective"),
        # DeepSpeed: Megatron runs no ZeRO-3 (issue 27)
        request(stack={"base": "deepspeed", "attention": "unfused", "dropout": True}, zero_stage=3, pp=1, dp=4),
    ],
    ids=["llama-h100-meshplan", "tiny-cpu", "gpt-a100-megatron", "unfused-zero3"],
)
def test_identity_residuals_leave_every_number_unchanged(req):
    """With Residuals() each layer's time is exactly the sum of its per-op parts, and the estimate is
    the one the plain pipeline (``predict_step_time``) gives; without a built-in row (the meshplan stack)
    it is also the public estimate's."""
    ctx = ctx_with(req, Residuals())
    for kind in ("transformer_block", "embedding", "lm_head"):
        lp, dev_f, dev_b, elem, af, ab = block_parts(ctx, kind, 1, req.parallel.tp)
        assert analytic_parts(ctx, lp, kind, 1, req.parallel.tp, False) == (dev_f + elem, dev_b + 2 * elem, af, ab)
    assert ctx.comm.scale == 1.0
    step = predict_step_time(req, Residuals())
    if builtin_residuals(ctx.stack.id, ctx.gpu.id) == Residuals():
        assert planner.estimate(req.model_copy(update={"calibration": None})).step_time_s == step


H100_LLAMA = request()
#: The forward/backward kernels of one Llama block under each stack, counted by hand from the op list:
#: GEMMs q, k, v, o, gate, up, down = 7 (backward 2 each); flash attention 1 / 3; memory-bound: two norms,
#: two residual adds, SwiGLU, RoPE on q and k — eager with composite RMSNorm (torchtitan, 2404 configs
#: aside): 2·6 + 2 + 2 + 2·9 = 34; the bundled runtime (eager, RMSNorm one fused kernel): 2 + 2 + 2 + 18 = 24;
#: fused: 2 + 2 + 1 + 2 = 7 (backward twice as many).
KERNELS = [
    ("meshplan", "transformer_block", 7 + 1 + 24, 14 + 3 + 48),
    ("torchtitan", "transformer_block", 7 + 1 + 2 * 6 + 2 + 2 + 2 * 3 + 2, 14 + 3 + 2 * 24),
    ("megatron", "transformer_block", 7 + 1 + 7, 14 + 3 + 14),
    ("meshplan", "embedding", 1, 2),
    # final RMSNorm (one fused kernel) + LM-head GEMM + 3 cross-entropy kernels; backward 2 GEMMs + twice the rest
    ("meshplan", "lm_head", 1 + 1 + 3, 2 + 8),
    ("torchtitan", "lm_head", 6 + 1 + 3, 2 + 18),
    ("megatron", "lm_head", 1 + 1 + 3, 2 + 8),
]


@pytest.mark.parametrize("stack, kind, fwd, bwd", KERNELS)
def test_kernel_counts_by_hand(stack, kind, fwd, bwd):
    ctx = ctx_with(request(stack=stack), Residuals())
    assert kernel_counts(ctx, kind, 2) == (fwd, bwd)


def test_unfused_attention_kernels():
    # GPT block: GEMMs q, k, v, o, fc1, fc2 = 6; unfused attention QKᵀ, softmax, dropout, PV = 4 (backward
    # 4 GEMMs + softmax + dropout = 6); LayerNorm ×2, adds ×2, GELU = 5 fused kernels.
    req = request(model="gpt3-1.3b", seq=2048, stack={"base": "megatron", "attention": "unfused", "dropout": True})
    assert kernel_counts(ctx_with(req, Residuals()), "transformer_block", 2) == (6 + 4 + 5, 12 + 6 + 10)


#: (residual, value, device): what each residual must do to one layer's (forward, backward) seconds,
#: given the per-op parts (device_f = GEMMs + attention core, device_b likewise, elem = memory-bound
#: forward, kf/kb = kernels).
TERM_CASES = [
    ("compute_scale", 1.7, "gpu", lambda dF, dB, e, kf, kb, v: (v * dF + e, v * dB + 2 * e)),
    ("memory_scale", 2.5, "gpu", lambda dF, dB, e, kf, kb, v: (dF + v * e, dB + v * 2 * e)),
    # a GPU overlaps launches with the device: small overhead is hidden, a large one bounds the layer
    ("kernel_overhead_us", 1.0, "gpu", lambda dF, dB, e, kf, kb, v: (dF + e, dB + 2 * e)),
    # host-bound: every kernel costs its launch (kernels.GPU_LAUNCH_US, cited) plus the residual
    ("kernel_overhead_us", 1e5, "gpu", lambda dF, dB, e, kf, kb, v: (kf * (v + 4.0) * 1e-6, kb * (v + 4.0) * 1e-6)),
    # on a host device the processor that launches runs the op: they add
    (
        "kernel_overhead_us",
        40.0,
        "cpu",
        lambda dF, dB, e, kf, kb, v: (dF + e + kf * v * 1e-6, dB + 2 * e + kb * v * 1e-6),
    ),
    ("comm_scale", 3.0, "gpu", lambda dF, dB, e, kf, kb, v: (dF + e, dB + 2 * e)),
    ("step_overhead_s", 0.25, "gpu", lambda dF, dB, e, kf, kb, v: (dF + e, dB + 2 * e)),
]


@pytest.mark.parametrize("name, value, device, expect", TERM_CASES)
def test_each_residual_moves_exactly_its_layer_term(name, value, device, expect):
    req = (
        request(model="tiny-llama", gpu=CPU, precision="fp32", seq=64, gbs=8, tp=2, pp=1, dp=1, per_node=2)
        if device == "cpu"
        else H100_LLAMA
    )
    ctx = ctx_with(req, Residuals(**{name: value}))
    for kind in ("transformer_block", "embedding", "lm_head"):
        lp, dev_f, dev_b, elem, af, ab = block_parts(ctx, kind, 1, 2)
        kf, kb = kernel_counts(ctx, kind, 2)
        want_f, want_b = expect(dev_f, dev_b, elem, kf, kb, value)
        got = analytic_parts(ctx, lp, kind, 1, 2, False)
        assert got[0] == pytest.approx(want_f, rel=1e-12) and got[1] == pytest.approx(want_b, rel=1e-12), kind
        cs = value if name == "compute_scale" else 1.0
        assert got[2:] == pytest.approx((cs * af, cs * ab), rel=1e-12)


@pytest.mark.parametrize("collective", ["all_reduce", "all_gather", "reduce_scatter", "send_recv"])
@pytest.mark.parametrize("link", ["intra_node", "inter_node"])
def test_comm_scale_multiplies_every_collective_and_nothing_else_does(collective, link):
    plain = ctx_with(H100_LLAMA, Residuals()).comm
    for name, value in [("comm_scale", 2.5), ("compute_scale", 3.0), ("step_overhead_s", 1.0)]:
        cm = ctx_with(H100_LLAMA, Residuals(**{name: value})).comm
        want = plain.time(collective, 1e7, 8, link) * (value if name == "comm_scale" else 1.0)
        assert cm.time(collective, 1e7, 8, link) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("pp", [1, 2, 4])
def test_step_overhead_is_added_once_per_step(pp):
    req = request(pp=pp, dp=8 // (2 * pp), gbs=32)
    base = predict_step_time(req, Residuals())
    assert predict_step_time(req, Residuals(step_overhead_s=0.75)) == pytest.approx(base + 0.75, abs=2e-9)


def test_comm_scale_moves_a_pure_communication_step_by_its_share():
    """A configuration whose only communication is TP: scaling comm by k moves the step by (k − 1) × the
    TP time of the breakdown (pp = 1, no DP; torchtitan's stack: no step-end reductions beside the layers' —
    Megatron's all-reduces the gradient norm and the SP norms' gradients at the step's end, cost model 18)."""
    req = request(stack="torchtitan", tp=8, pp=1, dp=1, gbs=8)
    plan = planner.estimate_plan(req)
    tp_s = plan.estimate.breakdown.tp_comm_s
    assert tp_s > 0
    base = predict_step_time(req, Residuals())
    assert predict_step_time(req, Residuals(comm_scale=2.0)) == pytest.approx(base + tp_s, rel=1e-6)


# ------------------------------------------------------------------------------------------------
# Built-in residuals


def test_builtin_lookup_by_stack_and_generation():
    from planner.pricing.residuals import row_key
    from planner.pricing.residuals_builtin import ROWS

    assert generation("h200-sxm-141gb") == generation("h100-sxm5-80gb") == "hopper"
    assert generation("a100-sxm4-40gb") == "ampere" and generation("cpu") is None
    # the bundled runtime and DeepSpeed ran no expressible published run: the generation's row pooled over the stacks
    # that did, where two stacks ran on it; identity elsewhere (a CPU, Volta's one stack, Blackwell's none)
    for stack in ("meshplan", "deepspeed"):
        for gpu, gen in (("a100-sxm4-80gb", "ampere"), ("h100-sxm5-80gb", "hopper"), ("h200-sxm-141gb", "hopper")):
            assert builtin_residuals(stack, gpu) == Residuals(**ROWS[("*", gen)])
        for gpu in ("v100-sxm3-32gb", "b200-sxm-192gb", "cpu"):
            assert builtin_residuals(stack, gpu) == Residuals()
    gpus = {"volta": "v100-sxm3-32gb", "ampere": "a100-sxm4-80gb", "hopper": "h100-sxm5-80gb"}
    for (stack, gen), row in ROWS.items():
        if stack == "*":  # checked above, through the stacks that have no row of their own
            continue
        if gen == "*":  # a stack's pooled row prices it on a generation it has no row for
            gen = next(g for g in ("blackwell", "hopper", "ampere", "volta") if (stack, g) not in ROWS)
            gpu = {**gpus, "blackwell": "b200-sxm-192gb"}[gen]
        else:
            gpu = gpus[gen]
        assert builtin_residuals(stack, gpu) == Residuals(**row)
        # an inline stack on that preset uses the preset's row
        assert builtin_residuals(f"{stack}+{{attention=unfused}}", gpu) == Residuals(**row)
    # the rule itself, on a table of my own: own row, else the generation's pooled row, else the stack's, else identity
    rows = {("megatron", "ampere"): {}, ("megatron", "*"): {}, ("torchtitan", "hopper"): {}, ("*", "hopper"): {}}
    assert row_key(rows, "megatron", "ampere") == ("megatron", "ampere")
    assert row_key(rows, "megatron", "hopper") == ("*", "hopper")  # the generation's before the stack's (cost model 70)
    assert row_key(rows, "megatron", "volta") == ("megatron", "*")
    assert row_key(rows, "torchtitan", "hopper") == ("torchtitan", "hopper")
    assert row_key(rows, "torchtitan", "ampere") is None
    assert row_key(rows, "meshplan", "hopper") == ("*", "hopper")
    assert row_key(rows, "meshplan", "ampere") is None
    assert row_key(rows, "megatron", None) is None


@pytest.mark.parametrize(
    "stack, gpu, row",
    [
        # Megatron-LM v2.5 has no published run of its own: v2.0's rows, the code it continues (RESIDUAL_LINEAGE)
        ("megatron-2021", "a100-sxm4-80gb", ("megatron-2020", "ampere")),
        ("megatron-2021", "v100-sxm3-32gb", ("megatron-2020", "volta")),
        ("megatron-2021", "h100-sxm5-80gb", ("*", "hopper")),
        ("megatron-2021+{attention=flash}", "a100-sxm4-80gb", ("megatron-2020", "ampere")),
        # Megatron-LM of 2022 (52e636888c) still runs v2.0's compute kernels (CoreAttention, fused softmax, bias-GeLU)
        ("megatron-2022", "a100-sxm4-80gb", ("megatron-2020", "ampere")),
        ("megatron-2022", "v100-sxm3-32gb", ("megatron-2020", "volta")),
        # no lineage: today's Megatron-core takes its own rows (cost model 39: fitted on Megatron-Bridge's H100 runs),
        # on a GPU generation without one the generation's pooled row, never v2.0's (its kernels and engine are not
        # v2.0's); on one without that either, its own pooled row
        ("megatron", "a100-sxm4-80gb", ("*", "ampere")),
        ("megatron", "v100-sxm3-32gb", ("megatron", "*")),
        ("megatron", "h100-sxm5-80gb", ("megatron", "hopper")),
    ],
)
def test_a_preset_without_runs_takes_its_lineage_rows(stack, gpu, row):
    from planner.pricing.residuals_builtin import ROWS

    want = Residuals(**ROWS[row]) if row is not None else Residuals()
    assert builtin_residuals(stack, gpu) == want


def test_context_uses_the_builtin_row_unless_calibrated():
    req = request(stack="megatron-2020", gpu="a100-sxm4-80gb", model="gpt3-1.3b", seq=2048, precision="fp16")
    ctx = context(req)
    assert ctx.residuals == builtin_residuals("megatron-2020", "a100-sxm4-80gb") != Residuals()
    mine = Residuals(compute_scale=1.234)
    assert ctx_with(req, mine).residuals == mine


# ------------------------------------------------------------------------------------------------
# The fit


def synthetic(truth: Residuals, reqs: list[PlanRequest], groups: list[str] | None = None) -> list[Observation]:
    return [
        Observation(
            measured_step_time_s=predict_step_time(r, truth),
            request=r,
            label=f"obs {i}",
            group=None if groups is None else groups[i],
        )
        for i, r in enumerate(reqs)
    ]


GPU_CONFIGS = [
    request(tp=1, pp=1, dp=8),
    request(tp=8, pp=1, dp=1, gbs=16),
    request(tp=2, pp=4, dp=1, gbs=32, micro_batch_size=2),
    request(tp=4, pp=1, dp=2, zero_stage=3),
    request(tp=2, pp=1, dp=8, nodes=2, zero_stage=1),
    request(tp=8, pp=2, dp=1, nodes=2, gbs=16, sequence_parallel=True),
]
CPU_CONFIGS = [
    request(model="tiny-llama", gpu=CPU, precision="fp32", seq=64, gbs=8, per_node=p, **pins)
    for p, pins in [
        (1, dict(tp=1, pp=1, dp=1, micro_batch_size=8)),
        (1, dict(tp=1, pp=1, dp=1, micro_batch_size=2)),
        (2, dict(tp=1, pp=1, dp=2, micro_batch_size=4)),
        (2, dict(tp=2, pp=1, dp=1, micro_batch_size=8)),
        (2, dict(tp=1, pp=2, dp=1, micro_batch_size=2)),
    ]
]


@pytest.mark.parametrize(
    "truth, free, reqs",
    [
        (Residuals(compute_scale=1.3, comm_scale=0.6), ("compute_scale", "comm_scale"), GPU_CONFIGS),
        (Residuals(compute_scale=0.8, memory_scale=1.9), ("compute_scale", "memory_scale"), GPU_CONFIGS),
        (
            Residuals(compute_scale=1.4, kernel_overhead_us=30.0, step_overhead_s=0.02),
            ("compute_scale", "kernel_overhead_us", "step_overhead_s"),
            CPU_CONFIGS,
        ),
    ],
    ids=["gpu-compute-comm", "gpu-compute-memory", "cpu-compute-launch-step"],
)
def test_fit_recovers_residuals_the_model_generated(truth, free, reqs):
    res = fit_residuals(synthetic(truth, reqs), free=free)
    for f in free:
        assert getattr(res.residuals, f) == pytest.approx(getattr(truth, f), rel=1e-3), f
    assert res.free == tuple(free)
    assert res.in_sample_mape < 1e-4 and res.before_mape > 0.01
    assert res.cross_validation == "leave-one-out" and res.cross_validated_mape is not None
    assert res.cross_validated_mape < 1e-3
    assert res.evaluations < 60 * len(reqs) * (len(free) + 1)
    for o in res.observations:
        assert o.after_s == pytest.approx(o.measured_s, rel=1e-3)


def test_leave_one_group_out_and_the_calibration_it_makes():
    truth = Residuals(compute_scale=1.25, comm_scale=0.8)
    groups = ["a", "a", "b", "b", "c", "c"]
    res = fit_residuals(synthetic(truth, GPU_CONFIGS, groups), free=("compute_scale", "comm_scale"))
    assert res.cross_validation == "leave-one-group-out"
    assert res.cross_validated_mape is not None and res.cross_validated_mape < 1e-3
    cal = res.calibration(gpu="h100-sxm5-80gb", stack="meshplan")
    assert cal.residuals == res.residuals and len(cal.runs) == len(GPU_CONFIGS)
    assert cal.runs[0].predicted_before_s == pytest.approx(predict_step_time(GPU_CONFIGS[0], Residuals()))


def test_fit_on_a_callable_predictor():
    """An observation may carry any predictor; the fit of y = a·x recovers a."""
    obs = [Observation(measured_step_time_s=2.5 * x, predict=lambda r, x=x: r.compute_scale * x) for x in (1, 2, 3)]
    res = fit_residuals(obs, free=("compute_scale",))
    assert res.residuals.compute_scale == pytest.approx(2.5, rel=1e-6)


def test_a_residual_the_runs_do_not_depend_on_is_held_and_said():
    reqs = CPU_CONFIGS[:2]  # one process: no communication
    res = fit_residuals(synthetic(Residuals(compute_scale=1.5), reqs), free=("compute_scale", "comm_scale"))
    assert res.free == ("compute_scale",) and res.residuals.comm_scale == 1.0
    assert res.residuals.compute_scale == pytest.approx(1.5, rel=1e-3)
    assert any(n.startswith("comm_scale: the runs do not depend on it") for n in res.notes)


@pytest.mark.parametrize(
    "n, free, field, fix",
    [
        (1, ("compute_scale", "comm_scale"), "runs", "give at least 2 runs"),
        (2, ("compute_scale", "comm_scale", "kernel_overhead_us"), "runs", "give at least 3 runs"),
        (0, ("compute_scale",), "runs", "give at least 1 run of"),
        (3, ("compute_scale", "gemm_scale"), "free", "free any of compute_scale"),
        (3, ("compute_scale", "compute_scale"), "free", "name each free residual once"),
    ],
)
def test_fit_refuses_what_it_cannot_determine(n, free, field, fix):
    obs = synthetic(Residuals(), GPU_CONFIGS[:n])
    with pytest.raises(MeshplanError) as info:
        fit_residuals(obs, free=free)
    assert info.value.field == field and fix in info.value.fix, str(info.value)


def test_fit_names_a_bad_measurement():
    obs = [Observation(measured_step_time_s=-1.0, request=GPU_CONFIGS[0])]
    with pytest.raises(MeshplanError) as info:
        fit_residuals(obs)
    assert info.value.field == "runs[0].measured_step_time_s"
    assert math.isfinite(predict_step_time(GPU_CONFIGS[0], Residuals()))


@pytest.mark.parametrize(
    "stack, gpu, says",
    [
        ("megatron-2020", "a100-sxm4-80gb", "built-in residuals for megatron-2020 on ampere GPUs: compute_scale"),
        (
            "meshplan",
            "a100-sxm4-80gb",
            "built-in residuals for meshplan (none of its own: pooled over the stacks with published runs) on ampere "
            "GPUs: compute_scale",
        ),
        ("meshplan", "v100-sxm3-32gb", None),  # Volta: one stack's runs, no pooled row: the physics alone
    ],
)
def test_the_explanation_says_which_residuals_priced_the_plan(stack, gpu, says):
    base = {"cluster": {"gpu": gpu, "num_nodes": 1, "gpus_per_node": 8}, "top_k": 1}
    precision = "fp16" if stack == "megatron-2020" else "bf16" if gpu.startswith("a100") else "fp32"
    training = {"global_batch_size": 64, "seq_len": 2048, "stack": stack, "precision": precision}
    req = {**base, "model": "gpt3-1.3b", "training": training}
    lines = [d for d in planner.plan(req).plans[0].explanation.details if "residuals" in d]
    if says is None:
        assert lines == []
    else:
        assert len(lines) == 1 and lines[0].startswith(says), lines
        assert "leave-one-source-group-out error" in lines[0]


@pytest.mark.parametrize("seed", [0, 4, 9])
def test_the_exact_search_stays_exact_with_residuals(seed):
    """With every residual away from identity (the step overhead in the end term the bounds read) the
    bounds stay below every cut's objective and the search returns the brute force's optimum."""
    from planner.compose.cost import class_costs, evaluate
    from planner.search import search
    from planner.search.bounds import class_bound, quick_bound
    from planner.search.bruteforce import brute_force, compositions
    from planner.search.space import enumerate_candidates
    from planner.specs import SearchOptions
    from tests.test_planner_exact import random_instance

    ctx, pins = random_instance(seed)
    ctx.calibration = Calibration(
        gpu=ctx.gpu.id,
        residuals=Residuals(
            compute_scale=1.3, memory_scale=0.7, kernel_overhead_us=40.0, comm_scale=2.0, step_overhead_s=0.003
        ),
    )
    bare, _ = random_instance(seed)
    bare.calibration = ctx.calibration.model_copy(
        update={"residuals": ctx.calibration.residuals.model_copy(update={"step_overhead_s": 0.0})}
    )
    for cand in enumerate_candidates(ctx, pins, SearchOptions()):
        cc = class_costs(ctx, cand)
        no_overhead = class_costs(bare, cand)
        best = min(evaluate(cc, n).objective_ns for n in compositions(cc.num_layers, cc.chunks))
        assert quick_bound(ctx, cand) <= class_bound(cc) <= best
        # the step overhead, once per step (beside the stack's step-end reductions)
        assert cc.shared.opt.const - no_overhead.shared.opt.const == 3_000_000
    found = search(ctx, pins, SearchOptions(), top_k=1)
    brute, _ = brute_force(ctx, pins)
    if brute:
        assert found.objective_ns == brute[0].evaluation.objective_ns


def _fit_script():
    return bench_module("fit_residuals")


@pytest.mark.timeout(1800)  # fits on 94 runs and refits once per left-out group (~7 min on a loaded 2-core machine)
def test_the_shipped_table_is_what_the_script_fits_and_its_cv_leaves_groups_out():
    """planner/pricing/residuals_builtin.py is the table bench/fit_residuals.py fits on the published runs with
    this physics (else: re-run it), and each LOSGO prediction comes from a table fitted without the run's
    source group."""
    from planner.pricing import residuals_builtin

    F = _fit_script()
    runs = F.expressed_runs(F.fidelity.load())
    table = F.fit_table(runs)
    fresh = {k: v[0].model_dump(include=set(v[1].free)) for k, v in table.items()}
    assert fresh == residuals_builtin.ROWS, "stale: re-run python bench/fit_residuals.py"
    fig = F.figures(runs, table)
    assert set(fig.losgo) == set(fig.in_sample) == {r.id for r in runs}
    group = runs[0].group
    rest = [r for r in runs if r.group != group]
    partial = F.fit_table(rest)
    assert all(r.group != group for rows in F.row_keys(rest).values() for r in rows)
    for r in runs:
        if r.group == group:
            want = F.error(predict_step_time(r.request, F.lookup(partial, r.key)), r.measured_step_s)
            assert fig.losgo[r.id] == pytest.approx(want, rel=1e-12)


def test_no_cross_validation_when_a_fold_cannot_determine_the_residuals():
    res = fit_residuals(synthetic(Residuals(compute_scale=1.2), GPU_CONFIGS[:1]), free=("compute_scale",))
    assert res.residuals.compute_scale == pytest.approx(1.2, rel=1e-3)
    assert res.cross_validated_mape is None and res.cross_validation.startswith("none:")
    assert res.observations[0].cross_validated_s is None


def test_a_run_the_planner_rejects_is_named_by_its_index():
    bad = request(tp=16, pp=1, dp=1, gbs=16)  # TP across nodes on one 8-GPU node
    obs = [Observation(1.0, request=GPU_CONFIGS[0]), Observation(1.0, request=bad)]
    with pytest.raises(MeshplanError) as info:
        fit_residuals(obs)
    assert info.value.field.startswith("runs[1].") and info.value.fix
