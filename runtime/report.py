"""The run report: what a run measured beside what its plan predicted (``planner.specs.RunReport``)."""

from __future__ import annotations

import statistics
from datetime import datetime, timezone

from planner.specs import Plan, RunReport

GIB = 1024**3


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
) -> RunReport:
    t = plan.training
    measured = measured_step_time(step_times)
    peak_gib = [b / GIB for b in peak_memory_bytes_per_rank]
    predicted_time = plan.estimate.step_time_s or None  # 0 = placeholder plan without a prediction
    predicted_mem = plan.estimate.peak_memory_gib or None
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
        step_time_ratio=predicted_time / measured if predicted_time and measured > 0 else None,
        memory_ratio=predicted_mem / max(peak_gib) if predicted_mem and peak_gib and max(peak_gib) > 0 else None,
        resumed_from_step=resumed_from_step,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        notes=notes or [],
    )


def summary(report: RunReport) -> str:
    def fmt(x, unit=""):
        return "-" if x is None else f"{x:.4g}{unit}"

    p = report.parallel
    lines = [
        f"model {report.model} on {report.world_size}× {report.device}: tp={p.tp} pp={p.pp} dp={p.dp} "
        f"schedule={p.schedule} zero={p.zero_stage} recompute={p.recompute} sp={p.sequence_parallel}",
        "losses: " + " ".join(f"{x:.4f}" for x in report.losses),
        f"step time  predicted {fmt(report.predicted_step_time_s, ' s')}  measured {fmt(report.measured_step_time_s, ' s')}"
        f"  ratio {fmt(report.step_time_ratio)}",
        f"peak memory  predicted {fmt(report.predicted_peak_memory_gib, ' GiB')}  measured (max rank) "
        f"{fmt(max(report.peak_memory_gib_per_rank, default=None), ' GiB')}  ratio {fmt(report.memory_ratio)}",
        f"throughput {report.tokens_per_s:.1f} tokens/s",
    ]
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)
