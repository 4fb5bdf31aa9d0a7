"""Worker entry point: train a plan on this rank. Started by ``meshplan run`` through torchrun, or by
any launcher that sets the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT):

    torchrun --nproc-per-node 4 -m runtime.train --plan plan.json --steps 10 --report run.json

A bad plan fails on every rank before any process-group work, with the same message (exit code 2).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import warnings
from pathlib import Path

from planner.specs.errors import MeshplanError
from runtime.args import check, check_with_plan, parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options of ``runtime.args.WORKER_ARGS`` (the same ones ``meshplan run`` offers and forwards)."""
    return parser().parse_args(argv)


#: Longest a failing rank waits for the other ranks of its node before exiting (they fail identically).
FAIL_WAIT_S = 30.0


def _fail(exc: MeshplanError) -> None:
    rank = os.environ.get("RANK", "0")
    print(f"[rank{rank}] error: {exc}", file=sys.stderr, flush=True)
    _wait_for_local_ranks()
    sys.exit(2)


def _wait_for_local_ranks() -> None:
    """torchrun stops every worker as soon as one exits, so a failing rank exits only once every rank of
    its node has printed its own message: each leaves a mark in a folder named after the launch and
    waits for ``LOCAL_WORLD_SIZE`` marks (however slowly a loaded machine brings the others there)."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if local <= 1:
        return
    import tempfile

    keys = ("TORCHELASTIC_RUN_ID", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT")
    launch = "-".join(os.environ.get(k, "") for k in keys)
    folder = Path(tempfile.gettempdir()) / f"meshplan-failed-{launch}"
    folder.mkdir(exist_ok=True)
    (folder / os.environ.get("LOCAL_RANK", "0")).touch()
    deadline = time.monotonic() + FAIL_WAIT_S
    while sum(1 for _ in folder.iterdir()) < local and time.monotonic() < deadline:
        time.sleep(0.05)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _peak_memory_bytes(device) -> int:
    import torch

    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from planner.answer.io import load_plan
    from runtime.validate import validate_plan

    world = int(os.environ.get("WORLD_SIZE", "1"))
    try:
        check(vars(args))
        plan = load_plan(args.plan, args.plan_index)
        validate_plan(plan, world)
        check_with_plan(vars(args), plan)
        if args.save_every and not args.checkpoint_dir:
            raise MeshplanError("save_every", "--save-every needs --checkpoint-dir", "give a folder to save to")
        if args.resume:
            from runtime.checkpoint import resolve

            resolve(args.resume)  # a missing checkpoint fails here, on every rank, before any collective
        load_hardware_inputs(args, plan)  # a bad --profile/--network fails here too
    except MeshplanError as exc:
        _fail(exc)
    try:
        run(plan, args)
    except MeshplanError as exc:
        _fail(exc)


def load_hardware_inputs(args, plan):
    """``--profile``/``--network`` files, checked against the plan (model, TP degree, micro-batch)."""
    from planner.answer.io import load_model
    from planner.specs import NetworkProfile, Profile

    profile = load_model(Profile, args.profile, "profile") if args.profile else None
    network = load_model(NetworkProfile, args.network, "network") if args.network else None
    if profile is not None:
        p, t = plan.parallel, plan.training
        if profile.model.name != plan.model.name:
            raise MeshplanError(
                "profile",
                f"{args.profile} profiles {profile.model.name}, the plan trains {plan.model.name}",
                "profile the plan's model, or omit --profile to measure one after the run",
            )
        if profile.find("transformer_block", p.micro_batch_size, t.seq_len, p.tp, p.sequence_parallel) is None:
            raise MeshplanError(
                "profile",
                f"{args.profile} has no transformer_block record for micro_batch_size="
                f"{p.micro_batch_size} seq_len={t.seq_len} tp={p.tp} sequence_parallel={p.sequence_parallel}",
                f"profile with --micro-batch-sizes {p.micro_batch_size} --tp {p.tp} --seq-len {t.seq_len}, "
                "or omit --profile",
            )
    return profile, network


def c10d_in_step(plan, job) -> dict[str, float]:
    """The run's c10d collectives as its step issues them, measured by its ranks on its own meshes
    (``runtime.host_dispatch``): FSDP2's per wrapped module at the plan's block size (dp > 1); the pipeline's
    send/recv at its activation size and its schedule's actions (pp > 1). Call on every rank."""
    from planner.workload.analytic import block_params
    from runtime.host_dispatch import dp_collectives_us, p2p_us, pp_action_us
    from runtime.validate import num_microbatches

    p, m = plan.parallel, plan.model
    tokens = p.micro_batch_size * plan.training.seq_len
    width = max(1, m.ffn_hidden_size // p.tp)
    out: dict[str, float] = {}
    if p.dp > 1:
        params = block_params(m, p.tp)
        out.update(dp_collectives_us(job.mesh["dp"], tokens, m.hidden_size, width, params, p.zero_stage))
    if p.pp > 1:
        act = tokens * m.hidden_size * 4 // (p.tp if p.sequence_parallel else 1)
        out.update(p2p_us(job.mesh["pp"], tokens, m.hidden_size, width, act))
        total, n = p.pp * p.virtual_stages, num_microbatches(plan)
        seq = plan.training.seq_len
        out.update(
            pp_action_us(job.mesh["pp"], m, p.tp, p.micro_batch_size, seq, p.schedule, list(job.chunks), total, n)
        )
    return out


def predict_here(plan, args, job, device: str):
    """The plan priced for this run's hardware (every rank calls it: the network fit is collective).
    Returns (Prediction or None, a note saying why there is none) on rank 0, (None, None) elsewhere."""
    import torch
    import torch.distributed as dist

    from profiler.cluster import profile_network
    from profiler.model_profile import profile_model
    from runtime.parallelize import mixed_precision
    from runtime.report import (
        QUICK_NETWORK_SIZES,
        cpu_share,
        cuda_spec,
        host_spec,
        local_prediction,
        shared_cpu_network,
        shared_cpu_profile,
        shared_cpu_spec,
    )

    profile, network = load_hardware_inputs(args, plan)
    basis = []
    if network is None and dist.get_world_size() > 1:
        network = profile_network(list(QUICK_NETWORK_SIZES), warmup=1, iters=3)
        basis.append(f"{network.backend} network fit measured after the run ({len(network.links)} link fits)")
    elif network is not None:
        basis.append(f"network profile {args.network}")
    tp_coll = None
    if job.device.type == "cpu" and dist.get_world_size() > 1 and plan.parallel.tp > 1:  # every rank takes part
        from runtime.host_dispatch import tp_functional_us

        m = plan.model  # on the run's own TP mesh, at its activation's size
        tokens = plan.parallel.micro_batch_size * plan.training.seq_len
        tp_coll = tp_functional_us(job.mesh["tp"], tokens, m.hidden_size, m.ffn_hidden_size)
    if job.device.type == "cpu" and dist.get_world_size() > 1 and (plan.parallel.dp > 1 or plan.parallel.pp > 1):
        tp_coll = {**(tp_coll or {}), **c10d_in_step(plan, job)}  # every rank takes part
    local = int(os.environ.get("LOCAL_WORLD_SIZE", str(dist.get_world_size())))
    cores = _cores()
    share = cpu_share(local, cores)
    if job.device.type == "cpu" and share < 1.0:  # more ranks than cores: the share they get, measured (every rank)
        from runtime.host_dispatch import time_sliced_share

        p = plan.parallel
        # never above the fair share (all ranks busy, no rank gets more): a slow moment of the one rank alone
        # read 0.62 of a core for 4 ranks on 2 (ten runs: 0.40-0.62, median 0.45)
        share = min(share, time_sliced_share(plan.model, p.tp, p.micro_batch_size, plan.training.seq_len))
    if dist.get_rank() != 0:
        return None, None
    p, t = plan.parallel, plan.training
    if t.precision == "fp8" and job.device.type == "cpu":  # CPU float8 GEMMs: torch._scaled_mm's CPU path
        return None, (
            f"no prediction for {device}: the run's FP8 linears ran torch._scaled_mm on the CPU, which the host's "
            "layer profile (fp32) and processor figures do not measure"
        )
    precision = "fp32" if mixed_precision(t.precision, job.device.type) is None else t.precision
    if profile is None:
        profile = profile_model(
            plan.model,
            device=job.device.type,
            micro_batch_sizes=[p.micro_batch_size],
            tps=[p.tp],
            seq_len=t.seq_len,
            sequence_parallel=p.sequence_parallel,
            dtype=precision,
            warmup=1,
            repeats=3,
        )
        basis.insert(0, f"{job.device.type} layer profile measured after the run (mbs={p.micro_batch_size}, tp={p.tp})")
    else:
        basis.insert(0, f"layer profile {args.profile} ({profile.device})")
    gpu = host_spec(device, tp_collectives=tp_coll) if job.device.type == "cpu" else None
    if gpu is None:  # a CUDA run: the plan's GPU figures for what the profiles do not cover
        gpu = cuda_spec(plan.gpu, device)
        basis.append(f"other terms from the {plan.gpu.id} datasheet")
    else:
        basis.append("optimizer/element-wise terms from a quick matmul and copy measurement of this host")
        basis.append("DP gradient reduction after the backward (its cores compute and communicate)")
        if share < 1.0:  # more single-threaded ranks than cores: each computed on a share of one
            profile, gpu = shared_cpu_profile(profile, share), shared_cpu_spec(gpu, share)
            shared = shared_cpu_network(network, share, cores)
            what = "layer and host times" + (", network fit" if shared is not network else "")
            network = shared
            basis.append(
                f"{local} processes on {cores} cores: each rank's {what} × {1 / share:.3g} (the time-sliced share "
                "measured: a block's forward and backward by one rank alone against every rank at once)"
            )
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    try:
        return local_prediction(
            plan, device=device, precision=precision, profile=profile, network=network, gpu=gpu, basis="; ".join(basis)
        ), None
    except MeshplanError as exc:  # e.g. a schedule the runtime runs but the cost model does not price
        return None, f"no prediction for {device}: the cost model cannot price this plan ({exc.field}: {exc.message})"


def _cores() -> int:
    """The CPU cores this process may run on (its affinity mask; the machine's count elsewhere)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run(plan, args) -> None:
    import torch
    import torch.distributed as dist

    from runtime import checkpoint
    from runtime.data import SyntheticTokens, TokenFile
    from runtime.finish import finish_ranks
    from runtime.job import Job, TrainConfig
    from runtime.report import build_report, job_step_times, summary

    # Harmless here (the loss never modifies the logits in place); printed once per rank otherwise.
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    if "RANK" not in os.environ:  # started without a launcher: a one-process job
        os.environ.update(
            RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port())
        )
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    else:
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("cpu:gloo,cuda:nccl" if cuda else "gloo")
    try:
        rank = dist.get_rank()
        train = TrainConfig(
            seed=args.seed, lr=args.lr, max_grad_norm=args.max_grad_norm if args.max_grad_norm > 0 else None
        )
        job = Job.build(plan, train, compile_blocks=args.compile)
        vocab = plan.model.vocab_size
        data = (
            TokenFile(args.data, vocab, args.seed, args.data_dtype) if args.data else SyntheticTokens(vocab, args.seed)
        )
        start = checkpoint.load(job, args.resume) if args.resume else 0
        gb, seq = plan.training.global_batch_size, plan.training.seq_len
        losses, times = [], []
        for step in range(start, start + args.steps):
            x, y = data.batch(step, gb, seq)
            x, y = job.dp_slice(x), job.dp_slice(y)
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss, _ = job.train_step(x, y)
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            losses.append(loss)
            if rank == 0:
                print(f"step {step + 1}: loss {loss:.4f}  {times[-1]:.3f} s", flush=True)
            done = step + 1
            if args.checkpoint_dir and (
                (args.save_every and done % args.save_every == 0) or done == start + args.steps
            ):
                checkpoint.save(job, args.checkpoint_dir, done)
        # A step's time is the mean of the ranks' own durations of it (runtime.report.job_step_times: the job's
        # period, step by step); peak memory is per rank.
        per_rank: list[list[float]] = [[] for _ in range(dist.get_world_size())]
        dist.all_gather_object(per_rank, times)
        peaks: list[int] = [0] * dist.get_world_size()
        dist.all_gather_object(peaks, _peak_memory_bytes(job.device))
        device = torch.cuda.get_device_name() if cuda else "cpu"
        local, why_not = predict_here(plan, args, job, device)
        if rank == 0:
            notes = list(job.notes) + ([why_not] if why_not else [])
            if not cuda:
                notes.append("CPU run: peak memory is the process's peak RSS (includes the PyTorch runtime)")
                cores = _cores()
                if dist.get_world_size() > cores:
                    notes.append(
                        f"{dist.get_world_size()} processes shared {cores} CPU cores: the prediction for this "
                        "hardware prices each rank's CPU work at its time alone ÷ the share of a core it measured"
                    )
            if job.dp_wrapper:
                notes.append(f"data parallelism: {job.dp_wrapper}")
            report = build_report(
                plan,
                device=device,
                torch_version=torch.__version__,
                losses=losses,
                step_times=job_step_times(per_rank),
                peak_memory_bytes_per_rank=peaks,
                resumed_from_step=start if args.resume else None,
                notes=notes,
                local=local,
            )
            if args.report:
                Path(args.report).write_text(json.dumps(report.model_dump(mode="json"), indent=1))
            print(summary(report), flush=True)
        finish_ranks()  # every rank meets, then leaves without the gloo teardown (runtime.finish)
    finally:  # only a failing run gets here
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
