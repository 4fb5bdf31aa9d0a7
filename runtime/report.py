"""The run report: what a run measured beside predictions for the hardware each is for
(``planner.specs.RunReport``). The plan's prediction is for its GPU; ``local_prediction`` re-prices
the plan for the hardware the run actually used (a layer profile measured there, or given with
``--profile``, and a network fit of the run's own process group, or ``--network``). Ratios are only
formed between a prediction and a measurement on the same hardware."""

from __future__ import annotations

import os
import statistics
from datetime import UTC, datetime

from planner.specs import GpuSpec, NetworkProfile, Plan, Prediction, Profile, RunReport
from runtime.host_dispatch import timed

GIB = 1024**3
#: Message sizes (bytes) of the quick network fit a run measures when no --network is given.
QUICK_NETWORK_SIZES = (1 << 12, 1 << 16, 1 << 20)


def same_hardware(device: str, gpu_id: str) -> bool:
    """Whether a run on ``device`` (``"cpu"`` or a CUDA device name) ran on the plan's GPU ``gpu_id``
    (catalog ids start with the product, e.g. 'h100-sxm5-80gb' ↔ 'NVIDIA H100 80GB HBM3')."""
    if device == "cpu" or not gpu_id:
        return False
    product = gpu_id.lower().split("-")[0]
    return product in device.lower().replace(" ", "").replace("-", "")


def cuda_spec(plan_gpu: GpuSpec, device: str) -> GpuSpec:
    """The GPU a CUDA run re-prices its plan on: the plan's catalog GPU when the run ran on it (its id keeps
    the catalog's per-GPU tables: SM count, attention rates), else the plan's figures under the name of the
    device the run measured (``torch.cuda.get_device_name()``), which its measured profile then matches."""
    return plan_gpu if same_hardware(device, plan_gpu.id) else plan_gpu.model_copy(update={"id": device})


def _ratio(predicted: float | None, measured: float | None) -> float | None:
    return predicted / measured if predicted and measured and measured > 0 else None


def host_spec(
    device: str = "cpu",
    *,
    tp_collective_us: float | None = None,
    tp_collectives: dict[str, float] | None = None,
    dispatch: bool = True,
) -> GpuSpec:
    """This host's processor as a ``GpuSpec`` for re-pricing a plan on it, from quick measurements:
    fp32 matmul FLOP/s (one thread per process, as runs use) and copy bandwidth; memory from the OS;
    its framework dispatch costs by class (``runtime.host_dispatch``, measured in a one-process
    subprocess; the TP collectives, ``tp_collectives`` (``host_dispatch.tp_functional_us``) or the older
    ``tp_collective_us``, measured by the run's ranks) unless ``dispatch`` is off or the measurement fails.
    Link bandwidths are placeholders: the run's network fit prices communication."""
    import torch

    from planner.specs import HostDispatch
    from runtime.host_dispatch import measure_in_subprocess

    measured = measure_in_subprocess() if dispatch else None
    host = HostDispatch(**measured, tp_collective_us=tp_collective_us, **(tp_collectives or {})) if measured else None

    n = 512
    a = torch.randn(n, n)
    a @ a
    # the fastest of many repeats: on a machine others share, the one least slowed by their work
    t = min(timed(lambda: a @ a) for _ in range(25))
    flops = 2 * n**3 / t
    x = torch.empty(1 << 24)  # 64 MiB
    y = torch.empty_like(x)
    y.copy_(x)
    t = min(timed(lambda: y.copy_(x)) for _ in range(10))
    bw = 2 * x.numel() * 4 / t
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    return GpuSpec(
        id=device,
        memory_gib=mem,
        peak_tflops={"fp32": flops / 1e12},
        hbm_bandwidth_GBps=bw / 1e9,
        nvlink_bandwidth_GBps=bw / 1e9,
        nic_bandwidth_GBps=bw / 1e9,
        source=f"measured by meshplan run: {n}×{n} fp32 matmul, 64 MiB copy"
        + (", dispatch by class (runtime.host_dispatch)" if host else "")
        + "; links from the run's network fit",
        host_dispatch=host,
        kind="host",
    )


def cpu_share(processes_per_node: int, cores: int) -> float:
    """The fraction of a core each rank of a CPU run computes on: 1 while the node's processes (one
    thread each, ``OMP_NUM_THREADS=1``) fit its cores, else cores ÷ processes — the kernel's scheduler
    time-slices runnable processes fairly over the cores (Linux CFS, docs.kernel.org/scheduler/sched-design-CFS.html),
    so every rank's CPU work, measured alone, takes processes ÷ cores as long."""
    return min(1.0, cores / processes_per_node) if processes_per_node > 0 and cores > 0 else 1.0


def shared_cpu_profile(profile: Profile, share: float) -> Profile:
    """``profile`` (measured by one process alone) as each rank of a run sharing its cores sees it: every
    measured time ÷ ``share`` (``cpu_share``). The identity at share 1."""
    if share >= 1.0:
        return profile
    layers = [
        lp.model_copy(
            update={k: getattr(lp, k) / share for k in ("fwd_time_s", "bwd_time_s") if getattr(lp, k) is not None}
        )
        for lp in profile.layers
    ]
    return profile.model_copy(update={"layers": layers})


def shared_cpu_spec(gpu: GpuSpec, share: float) -> GpuSpec:
    """``host_spec`` of one process alone, as each rank sharing the cores gets it: rates × ``share``, its
    dispatch costs (host CPU work) ÷ ``share`` — except the TP collectives', measured by the run's own ranks —
    and ``host_dispatch.cpu_share`` = ``share``, so that the planner slows the host work it adds beyond these
    measurements (the per-kernel and per-step residuals a calibration fitted on runs with a core per rank) alike."""
    if share >= 1.0:
        return gpu
    peak = {k: v * share for k, v in gpu.peak_tflops.model_dump().items() if v}
    update: dict = {"peak_tflops": type(gpu.peak_tflops)(**peak), "hbm_bandwidth_GBps": gpu.hbm_bandwidth_GBps * share}
    if gpu.host_dispatch is not None:
        hd = gpu.host_dispatch
        kept = (
            *("tp_collective_us", "tp_all_reduce_us", "tp_all_gather_us", "tp_collective_bytes", "cpu_share"),
            *("dp_all_reduce_us", "dp_all_gather_us", "dp_reduce_scatter_us", "dp_collective_bytes"),
            *("p2p_us", "p2p_bytes"),
        )
        scaled = {k: v / share for k, v in hd.model_dump().items() if k not in kept and v is not None}
        update["host_dispatch"] = hd.model_copy(update={**scaled, "cpu_share": share})
    return gpu.model_copy(update=update)


def shared_cpu_network(network: NetworkProfile | None, share: float, cores: int) -> NetworkProfile | None:
    """A network fit as each rank sharing the cores sees it: α and β ÷ ``share`` (gloo runs its
    collectives on the ranks' own cores) — when the fit was measured by no more processes per node than
    there are cores (uncontended, e.g. ``meshplan profile cluster --nproc-per-node 2`` on 2 cores). A fit
    measured by more processes than cores (the run's own, after an oversubscribed run) already holds the
    contention and is kept."""
    if network is None or share >= 1.0 or network.world_size // max(1, network.nodes) > cores:
        return network
    links = [
        f.model_copy(update={"alpha_s": f.alpha_s / share, "beta_s_per_byte": f.beta_s_per_byte / share})
        for f in network.links
    ]
    return network.model_copy(update={"links": links})


def host_stack(stack: object) -> dict:
    """The training stack of a run whose "GPU" is the host's processor: the plan's stack with the DP
    gradient reduction *after* the backward (``overlap_grad_reduce`` off). Overlap needs an execution
    resource left idle by the compute (a GPU's copy engines and NCCL's own SMs beside the compute kernels);
    on a CPU run with one thread per rank the rank's core computes the backward, and gloo's collective
    work runs on the same cores (gloo executes its algorithms on the calling host's threads:
    github.com/pytorch/gloo, ``gloo/allreduce.cc``), so the reduction adds to the step instead of hiding
    under it."""
    from planner.specs.stacks import DEFAULT_STACK

    if stack is None:
        data: dict = {"base": DEFAULT_STACK}
    elif isinstance(stack, str):
        data = {"base": stack}
    else:
        data = stack if isinstance(stack, dict) else stack.model_dump(exclude_none=True)  # type: ignore[attr-defined]
    return {**data, "overlap_grad_reduce": False}


def local_prediction(
    plan: Plan,
    *,
    device: str,
    precision: str,
    profile: Profile,
    network: NetworkProfile | None,
    gpu: GpuSpec,
    basis: str,
) -> Prediction:
    """The plan's own configuration priced by the cost model for the hardware the run used: its
    layer profile, network fit and processor figures, at the precision the run actually computed in."""
    from planner.api import estimate_plan
    from planner.specs import PlanRequest, SearchOptions

    update: dict = {"precision": precision}
    if gpu.on_host:
        update["stack"] = host_stack(plan.training.stack)
    training = plan.training.model_validate({**plan.training.model_dump(), **update})
    request = PlanRequest(
        model=plan.model,
        cluster=plan.cluster.model_copy(update={"gpu": gpu}),
        training=training,
        parallel=plan.parallel.model_dump(),
        profile=profile,
        network=network,
        options=SearchOptions(allow_tp_across_nodes=True),
    )
    est = estimate_plan(request).estimate
    return Prediction(
        predicted_on=device,
        basis=basis,
        step_time_s=est.step_time_s,
        peak_memory_gib=est.peak_memory_gib,
        request=request,
    )


def job_step_times(per_rank: list[list[float]]) -> list[float]:
    """The job's time for each step from every rank's own durations of it (``per_rank[r][i]``, each rank timing
    its steps back to back): the mean over ranks. Summed over steps it is the job's time, as each rank's own
    durations sum to its time; the slowest rank's duration of each step is not: a rank that finished a step
    early waits for its partners in the next one, so the skew between ranks is counted in a step that gained
    nothing from it (dp2 × tp2 on 2 cores: the mean of the slowest ranks' steps 7-12 % above the job's period,
    ``docs/validation.md``). Each rank's durations are its own clock's, so no clocks need to agree."""
    if not per_rank:
        return []
    return [sum(ds) / len(ds) for ds in zip(*per_rank, strict=True)]


def measured_step_time(step_times: list[float]) -> float:
    """Median step time after the first (warm-up) step; the only step if there is one."""
    if not step_times:
        return 0.0
    return statistics.median(step_times[1:] or step_times)


def build_report(
    plan: Plan,
    *,
    device: str,
    torch_version: str,
    losses: list[float],
    step_times: list[float],
    peak_memory_bytes_per_rank: list[int],
    resumed_from_step: int | None = None,
    notes: list[str] | None = None,
    local: Prediction | None = None,
) -> RunReport:
    t = plan.training
    measured = measured_step_time(step_times)
    peak_gib = [b / GIB for b in peak_memory_bytes_per_rank]
    peak = max(peak_gib, default=None)
    predicted_time = plan.estimate.step_time_s or None  # 0 = placeholder plan without a prediction
    predicted_mem = plan.estimate.peak_memory_gib or None
    same = same_hardware(device, plan.gpu.id)  # the plan's prediction is comparable only on its own GPU
    if local is not None:
        local = local.model_copy(
            update={
                "step_time_ratio": _ratio(local.step_time_s, measured),
                "memory_ratio": _ratio(local.peak_memory_gib, peak),
            }
        )
    return RunReport(
        model=plan.model.name,
        parallel=plan.parallel,
        world_size=plan.parallel.num_gpus,
        device=device,
        torch_version=torch_version,
        steps=len(losses),
        global_batch_size=t.global_batch_size,
        seq_len=t.seq_len,
        losses=losses,
        step_times_s=step_times,
        measured_step_time_s=measured,
        tokens_per_s=t.global_batch_size * t.seq_len / measured if measured > 0 else 0.0,
        peak_memory_gib_per_rank=peak_gib,
        predicted_step_time_s=predicted_time,
        predicted_peak_memory_gib=predicted_mem,
        step_time_ratio=_ratio(predicted_time, measured) if same else None,
        memory_ratio=_ratio(predicted_mem, peak) if same else None,
        predicted_on=plan.gpu.id,
        local_prediction=local,
        resumed_from_step=resumed_from_step,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        notes=notes or [],
    )


def summary(report: RunReport) -> str:
    def fmt(x, unit=""):
        return "-" if x is None else f"{x:.4g}{unit}"

    p = report.parallel
    peak = max(report.peak_memory_gib_per_rank, default=None)
    lines = [
        f"model {report.model} on {report.world_size}× {report.device}: tp={p.tp} pp={p.pp} dp={p.dp} "
        f"schedule={p.schedule} zero={p.zero_stage} recompute={p.recompute} sp={p.sequence_parallel}",
        "losses: " + " ".join(f"{x:.4f}" for x in report.losses),
        f"measured on {report.device}: step time {fmt(report.measured_step_time_s, ' s')}, "
        f"peak memory (max rank) {fmt(peak, ' GiB')}, throughput {report.tokens_per_s:.1f} tokens/s",
    ]
    local = report.local_prediction
    if local is not None:
        lines += [
            f"predicted for {local.predicted_on} (this run's hardware): step time {fmt(local.step_time_s, ' s')} "
            f"(predicted ÷ measured {fmt(local.step_time_ratio)}), peak memory {fmt(local.peak_memory_gib, ' GiB')} "
            f"(predicted ÷ measured {fmt(local.memory_ratio)})",
            f"  priced with: {local.basis}",
        ]
    if report.predicted_step_time_s is not None or report.predicted_peak_memory_gib is not None:
        gpu = report.predicted_on or "the plan's GPU"
        if report.step_time_ratio is not None or report.memory_ratio is not None:
            lines.append(
                f"predicted for {gpu} (the plan; this run's hardware): step time "
                f"{fmt(report.predicted_step_time_s, ' s')} (predicted ÷ measured {fmt(report.step_time_ratio)}), "
                f"peak memory {fmt(report.predicted_peak_memory_gib, ' GiB')} "
                f"(predicted ÷ measured {fmt(report.memory_ratio)})"
            )
        else:
            lines.append(
                f"the plan's prediction is for {gpu}, not {report.device}: step time "
                f"{fmt(report.predicted_step_time_s, ' s')}, peak memory {fmt(report.predicted_peak_memory_gib, ' GiB')} "
                f"per GPU (not comparable with this run's measurements)"
            )
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)
