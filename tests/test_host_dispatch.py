"""Host dispatch by class on a CPU "GPU" (``GpuSpec.host_dispatch``, measured by ``meshplan run``):
each class prices exactly the plans that issue it, by the count of what they issue; a GPU is untouched."""

from __future__ import annotations

import pytest

from planner.api import estimate_plan
from planner.specs import GpuSpec, HostDispatch, NetworkProfile, PlanRequest
from planner.specs.catalog import get_gpu, get_model
from planner.workload.ops import param_tensors
from tests.host_support import CPU

#: every class 0, none of the optional measurements (the TP class: priced by the network fit, as older runs)
ZERO = {
    **dict.fromkeys(HostDispatch.model_fields, 0.0),
    **dict.fromkeys(("cpu_share", "tp_all_reduce_us", "tp_all_gather_us", "tp_collective_bytes")),
    # ... and none of the c10d classes (priced by the network fit × comm_scale, as older runs)
    **dict.fromkeys(("dp_all_reduce_us", "dp_all_gather_us", "dp_reduce_scatter_us", "dp_collective_bytes")),
    **dict.fromkeys(("p2p_us", "p2p_bytes", "pp_action_us")),
}

PLANS = {  # tiny-gpt, global batch 8 × 64, as bench/bench_calibration.py
    "one": {"tp": 1, "pp": 1, "dp": 1, "micro_batch_size": 8},
    "dp2": {"tp": 1, "pp": 1, "dp": 2, "micro_batch_size": 4, "zero_stage": 0},
    "tp2": {"tp": 2, "pp": 1, "dp": 1, "micro_batch_size": 8, "sequence_parallel": False},
    "pp2": {"tp": 1, "pp": 2, "dp": 1, "micro_batch_size": 2, "schedule": "1f1b"},
    "pp2m8": {"tp": 1, "pp": 2, "dp": 1, "micro_batch_size": 1, "schedule": "1f1b"},
    "pp2gpipe": {"tp": 1, "pp": 2, "dp": 1, "micro_batch_size": 2, "schedule": "gpipe"},
    "tp2sp": {"tp": 2, "pp": 1, "dp": 1, "micro_batch_size": 8, "sequence_parallel": True},
    "dp2z3": {"tp": 1, "pp": 1, "dp": 2, "micro_batch_size": 4, "zero_stage": 3},
    "dp2z1": {"tp": 1, "pp": 1, "dp": 2, "micro_batch_size": 4, "zero_stage": 1},
    # two micro-batches per rank: ZeRO-0 accumulates them before its one all-reduce, ZeRO-3 reduce-scatters
    # each (runtime.job.defer_gradient_sync; it deferred ZeRO-3's too, accumulating unsharded gradients)
    "dp2m2": {"tp": 1, "pp": 1, "dp": 2, "micro_batch_size": 2, "zero_stage": 0},
    "dp2z3m2": {"tp": 1, "pp": 1, "dp": 2, "micro_batch_size": 2, "zero_stage": 3},
}


def step(plan: str, gpu: GpuSpec, network: NetworkProfile | None = None, **dispatch: float) -> float:
    par = PLANS[plan]
    n = par["tp"] * par["pp"] * par["dp"]
    spec = gpu.model_copy(update={"host_dispatch": HostDispatch(**{**ZERO, **dispatch})}) if dispatch else gpu
    request = PlanRequest(
        model="tiny-gpt",
        network=network,
        cluster={"gpu": spec.model_dump(), "num_nodes": 1, "gpus_per_node": n},
        training={
            "global_batch_size": 8,
            "seq_len": 64,
            "precision": "fp32",
            "stack": {"base": "meshplan", "overlap_grad_reduce": False},
        },
        parallel=par,
    )
    return estimate_plan(request).estimate.step_time_s


M = get_model("tiny-gpt")
BLOCK, SHARDED = param_tensors(M, "transformer_block")
ALL = M.num_layers * BLOCK + param_tensors(M, "embedding")[0] + param_tensors(M, "lm_head")[0]
US = 1000.0  # a large cost per class, so its effect stands far above rounding


@pytest.mark.parametrize(
    "field, plan, expected_s",
    [
        # AdamW per DTensor parameter: all of them under the FSDP2 wrappers; TP's sharded linears' only
        ("adam_dtensor_us", "dp2", ALL * US * 1e-6),
        ("adam_dtensor_us", "tp2", M.num_layers * SHARDED * US * 1e-6),
        ("adam_dtensor_us", "tp2sp", M.num_layers * BLOCK * US * 1e-6),  # + the SequenceParallel norms
        ("adam_dtensor_us", "pp2", 0.0),
        ("adam_dtensor_us", "one", 0.0),
        ("adam_plain_us", "one", ALL * US * 1e-6),
        ("adam_plain_us", "dp2", 0.0),
        # FSDP2 hooks: every block and the chunk, forward (one micro-batch per rank)
        ("fsdp_module_fwd_us", "dp2", (M.num_layers + 1) * US * 1e-6),
        ("fsdp_module_bwd_us", "dp2", (M.num_layers + 1) * US * 1e-6),
        ("fsdp_module_fwd_us", "tp2", 0.0),
        ("fsdp_module_fwd_us", "pp2", 0.0),
        # ... and per parameter tensor the wrapped modules hold: all of them (one micro-batch per rank)
        ("fsdp_param_fwd_us", "dp2", ALL * US * 1e-6),
        ("fsdp_param_bwd_us", "dp2", ALL * US * 1e-6),
        ("fsdp_param_fwd_us", "dp2z3", ALL * US * 1e-6),
        ("fsdp_param_bwd_us", "tp2", 0.0),
        ("fsdp_param_fwd_us", "one", 0.0),
        # the gradient clip per gradient tensor: DTensors as AdamW's (FSDP2: all; TP: the sharded linears')
        ("clip_dtensor_us", "dp2", ALL * US * 1e-6),
        ("clip_dtensor_us", "tp2", M.num_layers * SHARDED * US * 1e-6),
        ("clip_dtensor_us", "one", 0.0),
        ("clip_plain_us", "one", ALL * US * 1e-6),
        ("clip_plain_us", "tp2", (ALL - M.num_layers * SHARDED) * US * 1e-6),
        ("clip_plain_us", "dp2", 0.0),
        # TP (DTensor) linears: six per GPT block (wq, wk, wv, wo, w1, w2)
        ("tp_linear_fwd_us", "tp2", M.num_layers * 6 * US * 1e-6),
        ("tp_linear_bwd_us", "tp2", M.num_layers * 6 * US * 1e-6),
        ("tp_linear_fwd_us", "dp2", 0.0),
        # blocking TP collectives, as the bundled runtime issues them (counted on its step:
        # test_the_runtime_issues_the_tp_collectives_the_host_model_counts): per block 2 all-reduces forward
        # (wo, w2) and one backward per column-parallel linear (wq, wk, wv, w1); the embedding's forward and
        # the LM head's backward all-reduce (vocabulary-parallel, no SP); the gradient clip's all-reduce of the
        # partial norm of the TP-sharded gradients
        ("tp_collective_us", "tp2", (6 * M.num_layers + 2 + 1) * US * 1e-6),
        ("tp_collective_us", "dp2", 0.0),
        ("tp_collective_us", "one", 0.0),
        # with SP: per block forward 2 all-gathers + 2 reduce-scatters; backward the 4 all-reduces and 2
        # all-gathers; the embedding's and the head's one each way; one all-reduce of every SP norm's Partial
        # gradient per step (``runtime.job.reduce_partial_grads``; was one per tensor in the clip and three more
        # in AdamW, which read them Partial); the gradient clip's
        ("tp_collective_us", "tp2sp", (10 * M.num_layers + 4 + 1 + 1) * US * 1e-6),
    ],
)
def test_each_dispatch_class_prices_the_plans_that_issue_it(field: str, plan: str, expected_s: float) -> None:
    base = step(plan, CPU, **{field: 0.0})
    assert step(plan, CPU, **{field: US}) - base == pytest.approx(expected_s, abs=2e-6)


def test_per_op_dispatch_adds_per_forward_op_and_its_backward_on_every_plan() -> None:
    from planner.specs import ClusterSpec, TrainingSpec
    from planner.workload.inputs import Inputs
    from planner.workload.ops import kernel_counts

    stack = {"base": "meshplan", "overlap_grad_reduce": False}
    training = TrainingSpec(global_batch_size=8, seq_len=64, precision="fp32", stack=stack)
    ctx = Inputs(model=M, gpu=CPU, cluster=ClusterSpec(gpu=CPU, num_nodes=1, gpus_per_node=1), training=training)
    ops = M.num_layers * kernel_counts(ctx, "transformer_block", 1)[0]
    ops += kernel_counts(ctx, "embedding", 1)[0] + kernel_counts(ctx, "lm_head", 1)[0]
    # the base is the same measured host at zero cost per op: a host with measured figures prices no separate
    # gradient-accumulation pass (cost model 37; ``host.prefetch_overlaps``), one without them does
    base = step("one", CPU, op_fwd_us=0.0)
    assert step("one", CPU, op_fwd_us=US) - base == pytest.approx(ops * US * 1e-6, rel=1e-6)
    assert step("one", CPU, op_bwd_us=US) - base == pytest.approx(ops * US * 1e-6, rel=1e-6)


@pytest.mark.parametrize("plan", list(PLANS))
def test_a_gpu_ignores_host_dispatch(plan: str) -> None:
    """Only a host device ("cpu…") issues its ops from the processor that runs them: a GPU spec carrying
    the figures prices exactly as without them."""
    h100 = get_gpu("h100-sxm5-80gb")
    assert step(plan, h100, **{**dict.fromkeys(ZERO, US), "cpu_share": 0.5}) == step(plan, h100)


def test_the_host_microbenchmark_measures_every_class() -> None:
    """``runtime.host_dispatch`` on this machine: every class measured, a DTensor dearer than a plain tensor."""
    from runtime.host_dispatch import measure_in_subprocess

    got = measure_in_subprocess()
    assert got is not None
    hd = HostDispatch(**got)
    assert hd.op_fwd_us > 0 and hd.op_bwd_us > 0
    assert hd.adam_dtensor_us > hd.adam_plain_us > 0
    assert hd.tp_linear_fwd_us > 0 and hd.fsdp_module_fwd_us > 0
    # FSDP2 sets up each parameter tensor's view and copies each gradient: a cost per tensor, both ways
    assert hd.fsdp_param_fwd_us is not None and hd.fsdp_param_fwd_us > 0
    assert hd.fsdp_param_bwd_us is not None and hd.fsdp_param_bwd_us > 0
    assert hd.clip_dtensor_us is not None and hd.clip_plain_us is not None
    assert hd.clip_dtensor_us > hd.clip_plain_us > 0
    # the TP collectives as DTensor issues them, measured by the ranks of a 2-process run on their TP mesh
    # (``tp_functional_us``, as ``meshplan run`` measures them after a TP run), at the activation's size
    tp = _torchrun(2, ["-m", "runtime.host_dispatch", "--tp-collectives", "512", "64", "256", "2"])
    hd = HostDispatch(**{**got, **tp})
    assert hd.tp_collective_bytes == 512 * 64 * 4
    assert hd.tp_all_reduce_us is not None and hd.tp_all_reduce_us > 0
    assert hd.tp_all_gather_us is not None and hd.tp_all_gather_us > 0
    # the c10d collectives as FSDP2 and the pipeline issue them, measured by the ranks of a 2-process run on their
    # DP / pipeline mesh (``dp_collectives_us``, ``p2p_us``, as ``meshplan run`` measures them after a dp / pp run),
    # at a block's size (tiny-gpt: 50,240 parameters) and the activation's
    for zero, fields in ((0, ("dp_all_reduce_us",)), (3, ("dp_all_gather_us", "dp_reduce_scatter_us"))):
        c10d = _torchrun(
            2, ["-m", "runtime.host_dispatch", "--c10d-collectives", "256", "64", "256", "50240", str(zero)]
        )
        hd = HostDispatch(**{**got, **c10d})
        assert hd.dp_collective_bytes == 2 * (2 * 64 * 256 + 256 + 64) * 4  # the modules measured: 2 MLP pairs
        assert hd.p2p_bytes == 256 * 64 * 4
        assert hd.p2p_us is not None and hd.p2p_us > 0
        # a schedule step does more on a rank than its blocks' calls (the bookkeeping, the sends and receives)
        assert hd.pp_action_us is not None and hd.pp_action_us > 0
        for f in fields:
            assert (getattr(hd, f) or 0.0) > 0, (f, c10d)


def _torchrun(procs: int, args: list[str]) -> dict:
    """The JSON the last line of rank 0 prints, of ``torchrun --nproc-per-node procs ARGS`` (gloo, one thread)."""
    import json
    import os
    import sys
    from pathlib import Path

    from runtime.testing import run_process_group
    from runtime.train import _free_port

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(procs)]
    out = run_process_group(cmd + ["--master-port", str(_free_port()), *args], env=env, cwd=root, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "field, plan, residual",
    [
        ("adam_dtensor_us", "dp2", "compute_scale"),
        ("fsdp_module_fwd_us", "dp2", "compute_scale"),
        ("tp_linear_bwd_us", "tp2", "compute_scale"),
        ("op_fwd_us", "one", "compute_scale"),
    ],
)
def test_the_residual_of_the_work_scales_its_dispatch(field: str, plan: str, residual: str) -> None:
    """On a host the processor that computes also dispatches: the compute residual (a calibration's
    speed of this processor during the runs ÷ alone) scales the measured dispatch. (The in-step TP
    collective is measured by the run's own ranks, under its load, and is not scaled.)"""
    from planner.specs import Calibration, Residuals

    def with_cal(**dispatch: float) -> float:
        par = PLANS[plan]
        n = par["tp"] * par["pp"] * par["dp"]
        spec = CPU.model_copy(update={"host_dispatch": HostDispatch(**{**ZERO, **dispatch})})
        request = PlanRequest(
            model="tiny-gpt",
            cluster={"gpu": spec.model_dump(), "num_nodes": 1, "gpus_per_node": n},
            training={"global_batch_size": 8, "seq_len": 64, "precision": "fp32", "stack": "meshplan"},
            parallel=par,
            calibration=Calibration(gpu="cpu", residuals=Residuals(**{residual: 3.0})),
        )
        return estimate_plan(request).estimate.step_time_s

    plain = step(plan, CPU, **{field: US}) - step(plan, CPU, **{field: 0.0})
    assert with_cal(**{field: US}) - with_cal(**{field: 0.0}) == pytest.approx(3.0 * plain, rel=1e-3)


# ------------------------------------------------------------------------------------------------
# TP collectives on a host, as the run measured them in its step (``tp_all_reduce_us``, ``tp_all_gather_us``)

#: The TP collectives of one step of the bundled runtime priced with each measured class: without SP the
#: 6 all-reduces per block (above), the embedding's and the LM head's, the head's loss statistics and the
#: gradient clip's partial norm; with SP per block 4 all-reduces (backward, column-parallel inputs) + 6
#: all-gathers/reduce-scatters, the embedding's and the head's 2 each, the head's loss statistics, the one
#: all-reduce of the norms' Partial gradients and the clip's. Their sums are the collectives the runtime
#: issues on its TP group (``test_the_runtime_issues_the_tp_collectives_...``).
TP_CLASS = {
    "tp2": {"tp_all_reduce_us": 6 * M.num_layers + 3 + 1, "tp_all_gather_us": 0},
    "tp2sp": {
        "tp_all_reduce_us": 4 * M.num_layers + 1 + 1 + 1,
        "tp_all_gather_us": 6 * M.num_layers + 4,
    },
    "dp2": {"tp_all_reduce_us": 0, "tp_all_gather_us": 0},
    "one": {"tp_all_reduce_us": 0, "tp_all_gather_us": 0},
    "pp2": {"tp_all_reduce_us": 0, "tp_all_gather_us": 0},
}
TP_MEASURED = {"tp_all_reduce_us": US, "tp_all_gather_us": US, "tp_collective_bytes": 64 * 8 * 64 * 4}


@pytest.mark.parametrize("plan, field", [(p, f) for p in TP_CLASS for f in ("tp_all_reduce_us", "tp_all_gather_us")])
def test_a_host_prices_each_tp_collective_at_its_measured_in_step_cost(plan: str, field: str) -> None:
    """With the run's own measurement, every TP collective the plan issues costs its measured class (one
    more µs of the class: one more µs per collective of it), whatever the network fit says."""
    net = _dp_network(1e-4)  # no per-byte slope: the head's small all-reduce costs the class too
    base = step(plan, CPU, net, **TP_MEASURED)
    added = step(plan, CPU, net, **{**TP_MEASURED, field: 2 * US}) - base
    assert added / (US * 1e-6) == pytest.approx(TP_CLASS[plan][field], abs=1e-3)


@pytest.mark.parametrize(
    "plan, actions",
    [
        # 1F1B and GPipe over p stages and m micro-batches, every action the same added cost: the critical path
        # runs m forwards and m backwards on one stage and p − 1 of each on the others, 2(m + p − 1) actions
        ("pp2", 2 * (4 + 2 - 1)),
        ("pp2m8", 2 * (8 + 2 - 1)),
        ("pp2gpipe", 2 * (4 + 2 - 1)),
        ("one", 0),  # no pipeline: no schedule actions
        ("dp2", 0),
        ("tp2", 0),
    ],
)
def test_a_host_adds_the_measured_schedule_action_to_every_pipeline_action(plan: str, actions: int) -> None:
    """``pp_action_us`` (the run's schedule, measured on its pipeline mesh) is host work on a rank's own
    timeline, on every forward and backward of every chunk: the step grows by it × the actions of the
    critical path (the bubble with them), and not at all without a pipeline."""
    base = step(plan, CPU, **DP_MEASURED)
    added = step(plan, CPU, **{**DP_MEASURED, "pp_action_us": US}) - base
    assert added / (US * 1e-6) == pytest.approx(actions, abs=1e-3)


@pytest.mark.parametrize(
    "plan, measured, moves",
    [
        ("tp2", True, False),  # the measured TP collectives take no comm_scale
        ("tp2sp", True, False),
        ("tp2", False, True),  # without the measurement (older runs): the network fit × comm_scale
        ("dp2", True, False),  # FSDP2's c10d collectives, measured in the step (``DP_MEASURED``)
        ("dp2z3", True, False),
        ("pp2", True, False),  # the pipeline's send/recv, measured (``p2p_us``)
        ("dp2", False, True),  # without the measurements (older runs): the network fit × comm_scale
        ("dp2z3", False, True),
        ("pp2", False, True),
    ],
)
def test_comm_scale_moves_only_the_collectives_the_run_did_not_measure(plan: str, measured: bool, moves: bool) -> None:
    dispatch = {**ZERO, **({**TP_MEASURED, **DP_MEASURED} if measured else {}), "tp_collective_us": 500.0}
    host = CPU.model_copy(update={"host_dispatch": HostDispatch(**dispatch)})
    one, five = step_with(plan, host, {"comm_scale": 1.0}), step_with(plan, host, {"comm_scale": 5.0})
    assert (five > one * 1.01) if moves else (five == one), (one, five)


# ------------------------------------------------------------------------------------------------
# More single-thread ranks than cores (``GpuSpec.cpu_share``, set by ``runtime.report.shared_cpu_spec``)


def step_with(plan: str, gpu: GpuSpec, residuals: dict[str, float]) -> float:
    from planner.specs import Calibration, Residuals

    par = PLANS[plan]
    n = par["tp"] * par["pp"] * par["dp"]
    request = PlanRequest(
        model="tiny-gpt",
        cluster={"gpu": gpu.model_dump(), "num_nodes": 1, "gpus_per_node": n},
        training={"global_batch_size": 8, "seq_len": 64, "precision": "fp32", "stack": "meshplan"},
        parallel=par,
        calibration=Calibration(gpu=gpu.id, residuals=Residuals(**residuals)),
    )
    return estimate_plan(request).estimate.step_time_s


@pytest.mark.parametrize(
    "residual, value, plan, share",
    [
        ("kernel_overhead_us", 20.0, "one", 0.5),
        ("kernel_overhead_us", 20.0, "dp2", 0.5),
        ("kernel_overhead_us", 20.0, "tp2", 0.25),
        ("step_overhead_s", 0.01, "tp2", 0.5),
        ("step_overhead_s", 0.01, "pp2", 0.25),
        ("step_overhead_s", 0.01, "one", 1.0),
    ],
)
def test_host_work_residuals_take_one_over_the_share_on_shared_cores(
    residual: str, value: float, plan: str, share: float
) -> None:
    """A calibration's per-kernel and per-step residuals are host work of one rank with a core to itself
    (fitted on such runs): on a host whose ranks share its cores they take 1/``cpu_share`` as long, as the
    measured dispatch the runtime scales does; the other terms of the plan are the same."""
    host = CPU.model_copy(update={"host_dispatch": HostDispatch(**ZERO)})
    alone = step_with(plan, host, {residual: value}) - step_with(plan, host, {})
    shared = CPU.model_copy(update={"host_dispatch": HostDispatch(**{**ZERO, "cpu_share": share})})
    assert alone > 0
    assert step_with(plan, shared, {residual: value}) - step_with(plan, shared, {}) == pytest.approx(
        alone / share, rel=1e-6
    )
    assert step_with(plan, shared, {}) == step_with(plan, host, {})  # measured inputs are scaled by the runtime


@pytest.mark.parametrize("plan", ["one", "tp2"])
def test_a_gpu_ignores_cpu_share(plan: str) -> None:
    h100 = get_gpu("h100-sxm5-80gb")
    residuals = {"kernel_overhead_us": 20.0, "step_overhead_s": 0.01}
    hd = HostDispatch(**{**ZERO, "cpu_share": 0.5})
    assert step_with(plan, h100.model_copy(update={"host_dispatch": hd}), residuals) == step_with(plan, h100, residuals)


@pytest.mark.parametrize(
    "processes, cores, share",
    [(1, 2, 1.0), (2, 2, 1.0), (4, 2, 0.5), (8, 2, 0.25), (3, 2, 2 / 3), (4, 0, 1.0), (0, 2, 1.0)],
)
def test_cpu_share_is_cores_over_processes_when_they_outnumber_them(processes: int, cores: int, share: float) -> None:
    from runtime.report import cpu_share

    assert cpu_share(processes, cores) == pytest.approx(share)


def test_ranks_that_outnumber_the_cores_measure_the_share_of_a_core_they_get() -> None:
    """``time_sliced_share`` on a real 4-process gloo group (``meshplan run`` measures it when a node's ranks
    outnumber its cores): one rank alone against every rank at once, a share of a core in (0, 1]. How far below 1
    it lands depends on what else the machine runs (another job's processes slow the lone rank too: a CI-like run
    beside three other jobs measured 0.94 with 4 ranks on 2 cores, a quiet one ~0.4), so no tighter bound is
    asserted here (a test must not depend on the machine's load); the figures are in docs/validation.md."""
    got = _torchrun(4, ["-m", "runtime.host_dispatch", "--cpu-share"])
    assert 0 < got["cpu_share"] <= 1.0, got


def _network(world: int) -> NetworkProfile:
    from planner.specs import LinkFit

    fit = LinkFit(link="intra_node", collective="all_reduce", group_size=world, alpha_s=1e-4, beta_s_per_byte=1e-9)
    return NetworkProfile(backend="gloo", device="cpu", world_size=world, nodes=1, links=[fit])


@pytest.mark.parametrize(
    "fit_world, share, cores, scaled",
    [
        (2, 0.5, 2, True),  # measured with a core per process: the 4-process run's ranks see it ÷ share
        (2, 1.0, 2, False),  # the run fits its cores: as measured
        (4, 0.5, 2, False),  # measured by 4 processes on 2 cores: holds the contention already
        (8, 0.25, 2, False),
        (2, 0.25, 4, True),
    ],
)
def test_a_network_fit_is_scaled_only_when_measured_without_contention(
    fit_world: int, share: float, cores: int, scaled: bool
) -> None:
    from runtime.report import shared_cpu_network

    net = _network(fit_world)
    got = shared_cpu_network(net, share, cores)
    assert got is not None
    factor = 1 / share if scaled else 1.0
    assert got.links[0].alpha_s == pytest.approx(1e-4 * factor)
    assert got.links[0].beta_s_per_byte == pytest.approx(1e-9 * factor)


@pytest.mark.parametrize("share", [1.0, 0.5, 0.25])
def test_shared_cpu_spec_scales_rates_and_dispatch_and_records_the_share(share: float) -> None:
    from runtime.report import shared_cpu_spec

    hd = HostDispatch(
        **{
            **dict.fromkeys(HostDispatch.model_fields, 100.0),
            **dict.fromkeys(("tp_collective_us", "dp_all_gather_us", "p2p_us"), 700.0),
            "cpu_share": None,
        }
    )
    got = shared_cpu_spec(CPU.model_copy(update={"host_dispatch": hd}), share)
    assert got.host_dispatch is not None
    assert got.host_dispatch.cpu_share == (None if share == 1.0 else share)
    assert got.peak_tflops.fp32 == pytest.approx(0.05 * share)
    assert got.hbm_bandwidth_GBps == pytest.approx(5.0 * share)
    assert got.host_dispatch is not None
    assert got.host_dispatch.op_fwd_us == pytest.approx(100.0 / share)
    assert got.host_dispatch.tp_collective_us == 700.0  # measured by the run's own ranks, under its load
    assert got.host_dispatch.tp_all_reduce_us == got.host_dispatch.tp_all_gather_us == 100.0  # as well
    assert got.host_dispatch.dp_all_gather_us == got.host_dispatch.p2p_us == 700.0  # and the c10d classes
    assert got.host_dispatch.dp_all_reduce_us == got.host_dispatch.dp_collective_bytes == 100.0
    assert got.host_dispatch.pp_action_us == pytest.approx(100.0 / share)  # the ranks' CPU time: slowed alike


def counted_collectives(plan: str, tmp_path) -> dict[str, int]:
    """The collectives one real 2-rank gloo step of ``PLANS[plan]`` dispatches, by name
    (``python -m runtime.host_dispatch --count-collectives`` under torchrun)."""
    import json
    import os
    import sys
    from pathlib import Path

    from runtime.testing import make_plan, run_process_group
    from runtime.train import _free_port

    root = Path(__file__).resolve().parents[1]
    path = tmp_path / "plan.json"
    path.write_text(make_plan("tiny-gpt", global_batch_size=8, seq_len=64, **PLANS[plan]).model_dump_json())
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(_free_port())]
    out = run_process_group(
        cmd + ["-m", "runtime.host_dispatch", "--count-collectives", str(path)], env=env, cwd=root, timeout=180
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("plan", ["tp2", "tp2sp"])
def test_the_runtime_issues_the_tp_collectives_the_host_model_counts(plan: str, tmp_path) -> None:
    """Real 2-rank gloo step of the bundled runtime, its DTensor collectives counted as they are dispatched
    (``runtime.host_dispatch.step_collectives``): as many as the host model prices with the in-step TP
    collective (∂ step / ∂ ``tp_collective_us``), plus the LM head's output gather (priced by the network
    fit alone). No timing is involved."""
    from runtime.host_dispatch import FUNCTIONAL_COLLECTIVES

    counts = counted_collectives(plan, tmp_path)
    # DTensor's functional collectives, and the c10d all-reduce of SP's Partial norm gradients (all but the loss's)
    issued = sum(n for name, n in counts.items() if name in FUNCTIONAL_COLLECTIVES) + counts["allreduce_"] - 1
    priced = (step(plan, CPU, tp_collective_us=US) - step(plan, CPU, tp_collective_us=0.0)) / (US * 1e-6)
    assert issued == round(priced) + 1, (issued, priced)
    # the measured class (``tp_all_reduce_us``, ``tp_all_gather_us``) prices every one of them
    assert issued == sum(TP_CLASS[plan].values()), counts


# ------------------------------------------------------------------------------------------------
# Data parallelism on a host: the FSDP2 wrappers' collectives, one per wrapped module, blocking


def _dp_network(alpha_s: float) -> NetworkProfile:
    """A 2-rank gloo fit whose every collective costs ``alpha_s`` whatever its size."""
    from planner.specs import LinkFit

    links = [
        LinkFit(link="intra_node", collective=c, group_size=2, alpha_s=alpha_s, beta_s_per_byte=0.0)
        for c in ("all_reduce", "all_gather", "reduce_scatter", "send_recv")
    ]
    return NetworkProfile(backend="gloo", device="cpu", world_size=2, nodes=1, links=links)


#: The DP collectives of one step of the bundled runtime on 2 ranks (one micro-batch each; counted on a real
#: step by ``test_the_runtime_issues_the_dp_collectives_the_host_model_counts``): FSDP2 groups the
#: parameters of each wrapped module (every block, and the chunk for the embedding and the LM head) and
#: issues one collective per group — ZeRO-0 (``replicate``) an all-reduce of its gradients; ZeRO-1/2
#: (``fully_shard``, kept unsharded after the forward) an all-gather before the forward and a reduce-scatter
#: after the backward; ZeRO-3 (resharded after the forward) an all-gather both ways and the reduce-scatter.
#: With sharded gradients (ZeRO >= 1) the gradient clip all-reduces their partial norm once per step.
DP_COLLECTIVES = {
    "dp2": M.num_layers + 1,
    "dp2z1": 2 * (M.num_layers + 1) + 1,
    "dp2z3": 3 * (M.num_layers + 1) + 1,
    "dp2m2": M.num_layers + 1,
    "dp2z3m2": 2 * 3 * (M.num_layers + 1) + 1,
}


@pytest.mark.parametrize("plan", list(DP_COLLECTIVES))
def test_a_host_prices_one_blocking_dp_collective_per_wrapped_module(plan: str) -> None:
    """On a host gloo's collectives block the processor that computes (FSDP2 calls them synchronously), so
    each adds its whole time to the step, and there is one per FSDP2-wrapped module, not one per 40M-parameter
    gradient bucket (was: one all-reduce for dp2; ZeRO-3's gathers hidden behind the compute)."""
    alpha = 0.05  # far above every other term's rounding
    cpu = CPU.model_copy(update={"host_dispatch": HostDispatch(**ZERO)})
    added = step(plan, cpu, _dp_network(alpha)) - step(plan, cpu, _dp_network(0.0))
    assert added / alpha == pytest.approx(DP_COLLECTIVES[plan], abs=1e-3)


@pytest.mark.parametrize("plan", list(DP_COLLECTIVES))
def test_the_runtime_issues_the_dp_collectives_the_host_model_counts(plan: str, tmp_path) -> None:
    """Real 2-rank gloo step of the bundled runtime, its c10d collectives counted as they are dispatched
    (``runtime.host_dispatch.step_collectives``): as many as the host model prices (∂ step / ∂ α of the
    network fit), plus the loss's all-reduce (one per step, with the per-step work). No timing is involved."""
    from runtime.host_dispatch import C10D_COLLECTIVES

    counts = counted_collectives(plan, tmp_path)
    # c10d's, and the gradient clip's functional all-reduce of the sharded gradients' partial norm
    issued = sum(n for name, n in counts.items() if name in C10D_COLLECTIVES) + counts.get("all_reduce", 0)
    cpu = CPU.model_copy(update={"host_dispatch": HostDispatch(**ZERO)})
    priced = (step(plan, cpu, _dp_network(0.05)) - step(plan, cpu, _dp_network(0.0))) / 0.05
    assert issued == round(priced) + 1, (counts, priced)
    # the measured classes (``dp_all_reduce_us``, ``dp_all_gather_us``, ``dp_reduce_scatter_us``) price every one
    assert issued == sum(DP_CLASS[plan].values()) + 1, counts


# ------------------------------------------------------------------------------------------------
# c10d collectives on a host, as the run measured them in its step (``dp_*_us`` per wrapped module, ``p2p_us``)

#: The DP collectives of one step (``DP_COLLECTIVES``) by class: ZeRO-0 all-reduces; ZeRO-1 one all-gather and
#: one reduce-scatter per wrapped module; ZeRO-3 two all-gathers (forward, backward) and the reduce-scatter, per
#: micro-batch; with ZeRO >= 1 the gradient clip's all-reduce of the partial norm.
W = M.num_layers + 1  # wrapped modules: every block and the chunk
DP_CLASS = {
    "dp2": {"dp_all_reduce_us": W, "dp_all_gather_us": 0, "dp_reduce_scatter_us": 0},
    "dp2z1": {"dp_all_reduce_us": 1, "dp_all_gather_us": W, "dp_reduce_scatter_us": W},
    "dp2z3": {"dp_all_reduce_us": 1, "dp_all_gather_us": 2 * W, "dp_reduce_scatter_us": W},
    "dp2m2": {"dp_all_reduce_us": W, "dp_all_gather_us": 0, "dp_reduce_scatter_us": 0},
    "dp2z3m2": {"dp_all_reduce_us": 1, "dp_all_gather_us": 4 * W, "dp_reduce_scatter_us": 2 * W},
}
DP_MEASURED = {
    **dict.fromkeys(("dp_all_reduce_us", "dp_all_gather_us", "dp_reduce_scatter_us", "p2p_us"), US),
    "dp_collective_bytes": 50_240 * 4,
    "p2p_bytes": 2 * 64 * 64 * 4,
}


@pytest.mark.parametrize("plan, field", [(p, f) for p in DP_CLASS for f in DP_CLASS[p]])
def test_a_host_prices_each_dp_collective_at_its_measured_in_step_cost(plan: str, field: str) -> None:
    """With the run's own measurement, every DP collective the FSDP2 wrappers issue costs its measured class
    (one more µs of the class: one more µs per collective of it), whatever the network fit says (was: the
    network fit × comm_scale, the measurement ignored)."""
    net = _dp_network(1e-4)  # no per-byte slope: the chunk's larger collective costs the class too
    base = step(plan, CPU, net, **DP_MEASURED)
    added = step(plan, CPU, net, **{**DP_MEASURED, field: 2 * US}) - base
    assert added / (US * 1e-6) == pytest.approx(DP_CLASS[plan][field], abs=1e-3)


@pytest.mark.parametrize(
    "plan, measured_us, fit_alpha_s",
    [
        # a measured class prices as a network fit whose every such collective costs it, the fit ignored
        ("dp2", 800.0, 1e-4),
        ("dp2z3", 2500.0, 3e-5),
        ("pp2", 300.0, 2e-3),
        ("pp2", 4000.0, 1e-5),
    ],
)
def test_a_measured_c10d_class_prices_as_a_fit_of_that_cost(plan: str, measured_us: float, fit_alpha_s: float) -> None:
    """The independent computation: a plan priced with the measured class (``dp_*_us`` / ``p2p_us``, on a fit of
    another α and no per-byte slope) takes exactly the step of the same plan without the measurement on a
    fit whose collectives and sends cost the measured figure."""
    measured = {
        **DP_MEASURED,
        **dict.fromkeys(("dp_all_reduce_us", "dp_all_gather_us", "dp_reduce_scatter_us"), measured_us),
    }
    measured["p2p_us"] = measured_us
    got = step(plan, CPU, _dp_network(fit_alpha_s), **measured)
    assert got == pytest.approx(step(plan, CPU, _dp_network(measured_us * 1e-6), **ZERO), rel=1e-6)
    assert got != pytest.approx(step(plan, CPU, _dp_network(fit_alpha_s), **ZERO), rel=1e-3)


@pytest.mark.parametrize(
    ("got", "part", "per", "us"),
    [
        # a busier moment slowed both variants of a batch: their difference stands
        ({"with": [2.0, 10.0, 3.0], "alone": [1.0, 9.0, 2.0]}, None, 1, 1e6),
        # a moment that slowed one variant of one batch does not move the median
        ({"with": [2.0, 9.0, 2.1], "alone": [1.0, 1.0, 1.1]}, None, 2, 0.5e6),
        # per element of (forward, backward) samples
        ({"with": [(1.0, 4.0), (2.0, 3.5), (1.0, 4.0)], "alone": [(0.5, 3.0), (0.8, 2.0), (0.5, 3.5)]}, 1, 2, 0.5e6),
        # never negative: the collective's variant caught the quieter moments
        ({"with": [1.0, 1.0], "alone": [1.2, 1.3]}, None, 1, 0.0),
    ],
)
def test_a_measured_class_is_the_median_of_its_batches_differences(
    got: dict, part: int | None, per: float, us: float
) -> None:
    """The in-step classes a run measures (collectives, the schedule's actions): the two variants of each batch ran
    at the same moment; the figure is the median over batches of their difference, per unit."""
    from runtime.host_dispatch import median_difference

    assert median_difference(got, "with", "alone", per, part) == pytest.approx(us)
