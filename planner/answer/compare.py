"""Two plans side by side: their settings, their step time by cause (the Estimate's breakdown) and their
memory per pipeline stage. One function (``compare_plans``: pure data in, a ``PlanComparison`` out),
rendered by `meshplan diff` and returned by ``GET /v1/plans/{id}/compare/{other_id}``.

Every value is the plans' own (nothing is re-estimated); ``delta`` is B − A and ``ratio`` B ÷ A for
numbers (null when A is 0 or either side is missing, e.g. a stage only the deeper pipeline has).
"""

from __future__ import annotations

from pydantic import Field

from planner.specs import Plan, Spec

Value = bool | int | float | str | list[int] | None


class ComparedValue(Spec):
    """One quantity of both plans."""

    name: str = Field(description="What is compared, e.g. 'tp', 'compute_s', 'stage 0 total_gib'.")
    a: Value
    b: Value
    unit: str = Field(default="", description="'s', 'GiB', 'tokens/s', '' for settings.")
    same: bool
    delta: float | None = Field(default=None, description="B − A (numbers only).")
    ratio: float | None = Field(default=None, description="B ÷ A (numbers only; null when A is 0).")


class PlanComparison(Spec):
    """Plan A beside plan B: settings, step time by cause, memory per stage."""

    a: str = Field(description="Label of plan A (a file name and index, or a stored plan id and index).")
    b: str = Field(description="Label of plan B.")
    settings: list[ComparedValue] = Field(description="Model, cluster, training and parallel settings.")
    time: list[ComparedValue] = Field(description="Step time, throughput, MFU and the step time by cause (seconds).")
    memory: list[ComparedValue] = Field(description="Peak memory and each pipeline stage's memory, GiB per GPU.")

    @property
    def differences(self) -> list[ComparedValue]:
        return [v for v in [*self.settings, *self.time, *self.memory] if not v.same]


def _value(name: str, a: Value, b: Value, unit: str = "") -> ComparedValue:
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
    delta = float(b) - float(a) if numbers else None  # type: ignore[arg-type]
    ratio = float(b) / float(a) if numbers and a else None  # type: ignore[arg-type]
    return ComparedValue(name=name, a=a, b=b, unit=unit, same=a == b, delta=delta, ratio=ratio)


def _settings(p: Plan) -> dict[str, Value]:
    c = p.parallel
    return {
        "model": p.model.name,
        "gpu": p.gpu.id,
        "nodes": p.cluster.num_nodes,
        "gpus_per_node": p.cluster.gpus_per_node,
        "global_batch_size": p.training.global_batch_size,
        "seq_len": p.training.seq_len,
        "precision": p.training.precision,
        "tp": c.tp,
        "pp": c.pp,
        "dp": c.dp,
        "micro_batch_size": c.micro_batch_size,
        "num_microbatches": p.estimate.num_microbatches,
        "schedule": c.schedule,
        "virtual_stages": c.virtual_stages,
        "recompute": c.recompute,
        "sequence_parallel": c.sequence_parallel,
        "zero_stage": c.zero_stage,
        "ep": c.ep,
        "etp": c.etp,
        "stage_layers": list(c.stage_layers),
    }


def _time(p: Plan) -> list[tuple[str, float, str]]:
    e, b = p.estimate, p.estimate.breakdown
    return [
        ("step_time_s", e.step_time_s, "s"),
        *((name, getattr(b, name), "s") for name in type(b).model_fields),
        ("tokens_per_s", e.tokens_per_s, "tokens/s"),
        ("mfu", e.mfu, ""),
    ]


def _memory(p: Plan) -> dict[str, float]:
    out = {"peak_memory_gib": p.estimate.peak_memory_gib}
    for i, stage in enumerate(p.estimate.memory_per_stage):
        for name in type(stage).model_fields:
            out[f"stage {i} {name}"] = getattr(stage, name)
    return out


def compare_plans(a: Plan, b: Plan, a_label: str = "A", b_label: str = "B") -> PlanComparison:
    """``a`` beside ``b``. Memory rows of a stage only one plan has carry null on the other side."""
    sa, sb = _settings(a), _settings(b)
    settings = [_value(k, sa[k], sb[k]) for k in sa]
    time = [_value(name, va, vb, unit) for (name, va, unit), (_, vb, _) in zip(_time(a), _time(b))]
    ma, mb = _memory(a), _memory(b)
    names = list(ma) + [k for k in mb if k not in ma]
    names.sort(key=lambda k: (k != "peak_memory_gib", int(k.split()[1]) if k.startswith("stage ") else -1))
    memory = [_value(k, ma.get(k), mb.get(k), "GiB") for k in names]
    return PlanComparison(a=a_label, b=b_label, settings=settings, time=time, memory=memory)
