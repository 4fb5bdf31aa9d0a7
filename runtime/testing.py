"""Helpers to build executable plans without the planner's search (tests, benchmarks, hand-made
plans) and the single-process reference run that every parallel run must reproduce."""

from __future__ import annotations

import torch

from planner.specs import (
    ClusterSpec,
    CostInputs,
    Estimate,
    ModelSpec,
    ParallelConfig,
    Plan,
    StageMemory,
    TimeBreakdown,
    TrainingSpec,
)
from planner.specs.catalog import GPUS, get_model
from planner.specs.layout import even_stage_layers, mesh_layout, tp_plan


def make_plan(
    model: str | ModelSpec,
    *,
    global_batch_size: int = 8,
    seq_len: int = 32,
    precision: str = "fp32",
    fp8_recipe: str | None = None,
    gpu: str = "h100-sxm5-80gb",
    gpus_per_node: int | None = None,
    **parallel,
) -> Plan:
    """A Plan from a parallel configuration (``tp``, ``pp``, ``dp``, ``schedule``, ...), with the
    planner's mesh layout and TP plan, even stage cuts unless ``stage_layers`` is given, and an
    all-zero placeholder estimate (no prediction: reports then leave the ratios empty); one node holds every GPU
    unless ``gpus_per_node`` is given."""
    spec = get_model(model)
    parallel.setdefault("micro_batch_size", 1)
    chunks = parallel.get("pp", 1) * parallel.get("virtual_stages", 1)
    parallel.setdefault("stage_layers", even_stage_layers(spec.num_layers, chunks))
    par = ParallelConfig(**{"tp": 1, "pp": 1, "dp": 1, **parallel})
    zero = TimeBreakdown(compute_s=0, tp_comm_s=0, pp_bubble_s=0, pp_p2p_s=0, dp_sync_s=0, optimizer_s=0)
    estimate = Estimate(
        step_time_s=0,
        tokens_per_s=0,
        model_tflops_per_gpu=0,
        mfu=0,
        memory_per_stage=[
            StageMemory(
                weights_gib=0,
                gradients_gib=0,
                optimizer_gib=0,
                activations_gib=0,
                buffers_gib=0,
                reserve_gib=0,
                total_gib=0,
            )
        ]
        * par.pp,
        peak_memory_gib=0,
        gpu_memory_gib=GPUS[gpu].memory_gib,
        fits=True,
        num_microbatches=global_batch_size // (par.dp * par.micro_batch_size),
        gpus_used=par.num_gpus,
        breakdown=zero,
        notes=["placeholder estimate: plan built by runtime.testing.make_plan, not the planner"],
    )
    return Plan(
        model=spec,
        cluster=ClusterSpec(
            gpu=gpu,
            num_nodes=max(par.num_gpus // (gpus_per_node or par.num_gpus), 1),
            gpus_per_node=gpus_per_node or max(par.num_gpus, 1),
        ),
        training=TrainingSpec(
            global_batch_size=global_batch_size, seq_len=seq_len, precision=precision, fp8_recipe=fp8_recipe
        ),
        parallel=par,
        mesh=mesh_layout(par),
        tp_plan=tp_plan(spec, par),
        estimate=estimate,
        inputs=CostInputs(cost_model_version=0),  # not priced by the cost model
    )


def reference_microbatches(plan: Plan) -> int:
    """How many micro-batches the reference cuts each global batch into: 1 (the whole batch at once: in fp32
    the split changes nothing but round-off), or, for an FP8 plan, the run's own micro-batches — global batch
    / micro_batch_size, consecutive rows, as ``Job.dp_slice`` then the micro-batch loop (or the pipeline
    schedule) cut it — because FP8's dynamic scales are computed per micro-batch (``runtime.fp8``)."""
    t = plan.training
    return t.global_batch_size // plan.parallel.micro_batch_size if t.precision == "fp8" else 1


def reference_run(
    plan: Plan, train, steps: int, data=None, grads_at: int = 0, split: int | None = None, stats: dict | None = None
):
    """The same model, seed, batches, clipping and optimizer in one process, without any
    parallelism (an FP8 plan: the same FP8 conversion and micro-batches, ``reference_microbatches``; a rowwise
    FP8 plan with TP: its TP-split GEMMs cut into ``split`` pieces, default ``runtime.split_reference.tp_split``,
    1 for the plain one-process reference; a MoE with a capacity factor: tokens dropped per the plan's groups,
    ``runtime.split_reference.drop_groups``, and never padded to capacity: a ``pad_to_capacity`` plan is checked
    against the unpadded drop, whose output and gradients its zero rows must not change): returns (losses, grad norms, {param name: grad at step ``grads_at``});
    ``stats`` gets ``dropped``, the MoE assignments dropped over all steps."""
    from runtime.data import SyntheticTokens
    from runtime.expert_parallel import update_expert_bias
    from runtime.fp8 import apply_fp8
    from runtime.job import loss_fn, make_optimizer
    from runtime.models import build_model
    from runtime.split_reference import drop_groups, set_drop_groups, split_linears, tp_split

    data = data or SyntheticTokens(plan.model.vocab_size, seed=train.seed)
    spec = plan.model
    if spec.moe is not None and spec.moe.pad_to_capacity:
        spec = spec.model_copy(update={"moe": spec.moe.model_copy(update={"pad_to_capacity": False})})
    model = build_model(spec, seed=train.seed)
    apply_fp8(model, plan)
    split = tp_split(plan) if split is None else split
    if split > 1:
        split_linears(model, plan, split)
    opt = make_optimizer(model.parameters(), train, plan.training.optimizer)
    n = reference_microbatches(plan)
    groups = drop_groups(plan)
    losses, norms, grads = [], [], {}
    for step in range(steps):
        x, y = data.batch(step, plan.training.global_batch_size, plan.training.seq_len)
        loss = torch.zeros(())
        for i, (xs, ys) in enumerate(zip(x.chunk(n), y.chunk(n), strict=True)):
            if groups is not None:
                set_drop_groups(model, groups.chunk(n)[i])
            part = loss_fn(model(xs), ys) / n
            part.backward()
            loss += part.detach()
        if step == grads_at:
            grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
        max_norm = train.max_grad_norm if train.max_grad_norm is not None else float("inf")
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)))
        opt.step()
        opt.zero_grad(set_to_none=True)
        update_expert_bias([model], None)  # a mixture of experts with aux-loss-free balancing
        losses.append(float(loss.detach()))
    if stats is not None:
        stats["dropped"] = sum(getattr(m, "dropped", 0) for m in model.modules())
    return losses, norms, grads


def reference_key(plan: Plan, steps: int) -> str:
    """What a reference run depends on: the model, the training settings, its micro-batches, its TP split
    (``runtime.split_reference.tp_split``) and the step count."""
    import hashlib

    from runtime.split_reference import tp_split

    split, tp = reference_microbatches(plan), tp_split(plan)
    text = f"{plan.model.model_dump_json()}|{plan.training.model_dump_json()}|{steps}" + (
        f"|{split}" if split > 1 else ""
    )
    if tp > 1:  # the TP rules say which linears are cut
        text += f"|tp{tp}|" + "|".join(f"{r.pattern}:{r.style}" for r in plan.tp_plan)
    moe = plan.model.moe
    if moe is not None and moe.capacity_factor is not None:  # the groups tokens are dropped in (drop_groups)
        p = plan.parallel
        text += f"|drop{p.micro_batch_size}.{p.cp}.{p.tp if p.sequence_parallel else 1}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def reference(plan: Plan, train, steps: int) -> dict:
    """A case's reference for ``runtime.equivalence``: the losses, gradient norms and step-0 gradients of
    ``reference_run``; for a reference of a TP split, also the plain one-process reference's step-0 gradients
    (``plain_grads``: how far a run lands from the reference it does not follow, its failure message's yardstick)."""
    from runtime.split_reference import tp_split

    stats: dict = {}
    losses, norms, grads = reference_run(plan, train, steps, stats=stats)
    ref = {"losses": losses, "norms": norms, "grads": grads, "dropped": stats["dropped"]}
    if tp_split(plan) > 1:
        ref["plain_grads"] = reference_run(plan, train, 1, split=1)[2]
    return ref


def write_references(plans: list[tuple[Plan, int]], path, train) -> None:
    """Run the single-process reference once per distinct ``reference_key`` of ``(plan, steps)`` in this
    process (one thread, as the ranks run) and save them for ``runtime.equivalence --references``, so
    the ranks of every launch load them instead of each recomputing the same run."""
    refs: dict[str, dict] = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for plan, steps in plans:
            key = reference_key(plan, steps)
            if key not in refs:
                refs[key] = reference(plan, train, steps)
    finally:
        torch.set_num_threads(threads)
    torch.save(refs, path)


def run_process_group(cmd: list[str], *, env: dict, cwd, timeout: float):
    """``subprocess.run`` for launchers (torchrun, ``meshplan run``): the command runs in its own
    session, and on timeout the whole group (launcher *and* workers) is killed before
    ``subprocess.TimeoutExpired`` propagates, so a hung rank never outlives its test."""
    import os
    import signal
    import subprocess

    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
