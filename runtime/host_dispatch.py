"""Host-side framework dispatch of this processor, measured (``planner.specs.HostDispatch``).

On a CPU run the processor that dispatches an op also computes it, and for the tiny ops of small models
the dispatch (Python, the dispatcher, autograd, DTensor's sharding propagation, FSDP2's hooks) is most of
the step. Its size depends on the wrapper a plan uses, so it is measured here per dispatch class, on this
host, in one process with a one-rank gloo group (the wrappers then run their whole host path; their
collectives over one rank are the only part left out — priced by the network fit):

* a plain op with autograd: forward (recording) and its backward, per op (a chain of small adds);
* a tensor-parallel linear (``ColwiseParallel``/``RowwiseParallel``: DTensor weights, ``from_local`` /
  ``to_local`` around it) beyond the same plain linear, forward and backward;
* an FSDP2-wrapped module (``fully_shard``: pre/post-forward and backward hooks, unshard copy-in/out)
  beyond the same plain module, forward and backward: a part per module and a part per parameter tensor
  it holds (modules of 2 and 8 tensors);
* one AdamW step, and the gradient clip, per parameter tensor over plain tensors and over DTensors.

Each figure is the fastest of ``ROUNDS`` samples, taken round-robin over the classes (``_round_robin``): on a
shared machine, the one least slowed by other work, each class's samples spread over the whole measurement.
Run as ``python -m runtime.host_dispatch`` (prints the JSON) or ``measure_in_subprocess()``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

N_OPS = 200
N_LINEARS = 16
N_PARAMS = 64
FSDP_LINEARS = 4
REPEATS = 11
ROUNDS = 31
#: Interleaved batches of each in-step class a run measures (collectives, the schedule's actions): with 21 the same
#: class moved ±20 % between runs minutes apart (tiny-gpt dp2's all-reduce 1,433–2,149 µs, tp2's 1,604–2,249), as
#: much as the step's error budget; ≈ 1–3 s a class at 61.
BATCHES = 61


def _best(fn, repeats: int = REPEATS) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def timed(fn) -> float:
    """Seconds of one call of ``fn``."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _fwd_bwd_sampler(build):
    """One sample of ``build(False)`` and ``build(True)`` (each a forward fn returning a scalar): seconds of
    (plain forward, plain backward, other forward, other backward), after a warm-up of each."""
    fns = (build(False), build(True))
    for f in fns:
        f().backward()

    def sample() -> tuple[float, ...]:
        out: list[float] = []
        for f in fns:
            t0 = time.perf_counter()
            loss = f()
            t1 = time.perf_counter()
            loss.backward()
            out += [t1 - t0, time.perf_counter() - t1]
        return tuple(out)

    return sample


def _round_robin(samplers: dict, rounds: int = ROUNDS) -> dict[str, tuple[float, ...]]:
    """The fastest of ``rounds`` samples of every sampler (name: fn returning a tuple of seconds), element-wise,
    taken round-robin: each class's samples spread over the whole measurement (a few seconds), so that a burst
    of other work on a shared machine slows some samples of every class, not all the samples of one."""
    best = {k: tuple(fn()) for k, fn in samplers.items()}
    for _ in range(rounds - 1):
        for k, fn in samplers.items():
            best[k] = tuple(min(a, b) for a, b in zip(best[k], fn()))
    return best


def measure() -> dict[str, float]:
    """The dispatch costs of this host in µs (``HostDispatch`` fields). Needs no process group."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor, Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.set_num_threads(1)
    if not dist.is_initialized():
        store = dist.HashStore()
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    mesh = init_device_mesh("cpu", (1,))
    out: dict[str, float] = {}

    # plain ops with autograd: a chain of N_OPS adds against none (the pair's first)
    def chain(ops: bool):
        x = torch.randn(8, 64, requires_grad=True)
        b = torch.randn(8, 64)

        def f():
            y = x * 1.0
            for _ in range(N_OPS if ops else 0):
                y = y + b
            return y.sum()

        return f

    # tensor-parallel linears vs plain ones (pairs colwise → rowwise, as attention and MLP)
    def linears(tp: bool):
        m = nn.Sequential(*[nn.Linear(64, 64) for _ in range(N_LINEARS)])
        if tp:
            plan = {str(i): ColwiseParallel() if i % 2 == 0 else RowwiseParallel() for i in range(N_LINEARS)}
            parallelize_module(m, mesh, plan)
        x = torch.randn(8, 64, requires_grad=True)
        return lambda: m(x).sum()

    # FSDP2-wrapped modules vs plain ones, each module holding 1 and FSDP_LINEARS linears (2 and 2·FSDP_LINEARS
    # parameter tensors): FSDP2 sets up each tensor's unsharded view before the forward and copies each
    # gradient into the reduction buffer and back out as a DTensor after the backward, so its hooks cost a
    # part per module and a part per tensor (the slope between the two)
    def wrapped(linears: int):
        def blocks(wrap: bool):
            m = nn.Sequential(*[nn.Sequential(*[nn.Linear(64, 64) for _ in range(linears)]) for _ in range(N_LINEARS)])
            if wrap:
                for blk in m:
                    fully_shard(blk, mesh=mesh)
                fully_shard(m, mesh=mesh)
            x = torch.randn(8, 64, requires_grad=True)
            return lambda: m(x).sum()

        return blocks

    # AdamW and the runtime's gradient clip (``runtime.job.clip_grad_norm``) per parameter tensor, plain and
    # DTensor
    def params_with_grads(dtensor: bool) -> list[nn.Parameter]:
        ps = [torch.randn(4, 4) for _ in range(N_PARAMS)]  # dispatch; the bytes are priced apart
        if dtensor:
            ps = [DTensor.from_local(p, mesh, [Replicate()]) for p in ps]
        params = [nn.Parameter(p) for p in ps]
        for p in params:
            p.grad = torch.randn_like(p)
        return params

    def adam(dtensor: bool):
        opt = torch.optim.AdamW(params_with_grads(dtensor), lr=1e-3)
        opt.step()
        return opt.step

    def clip(dtensor: bool):
        from runtime.job import clip_grad_norm

        params = params_with_grads(dtensor)
        return lambda: clip_grad_norm(params, 1.0)

    def steps(make):
        fns = (make(False), make(True))
        for fn in fns:  # warm-up
            fn()
        return lambda: tuple(timed(fn) for fn in fns)

    best = _round_robin(
        {
            "chain": _fwd_bwd_sampler(chain),
            "linears": _fwd_bwd_sampler(linears),
            "fsdp1": _fwd_bwd_sampler(wrapped(1)),
            "fsdp_many": _fwd_bwd_sampler(wrapped(FSDP_LINEARS)),
            "adam": steps(adam),
            "clip": steps(clip),
        }
    )
    nf, nb, cf, cb = best["chain"]
    out["op_fwd_us"], out["op_bwd_us"] = max(0.0, cf - nf) / N_OPS * 1e6, max(0.0, cb - nb) / N_OPS * 1e6
    pf, pb, tf, tb = best["linears"]
    out["tp_linear_fwd_us"] = max(0.0, tf - pf) / N_LINEARS * 1e6
    out["tp_linear_bwd_us"] = max(0.0, tb - pb) / N_LINEARS * 1e6
    one, many = (
        [max(0.0, w - p) / (N_LINEARS + 1) * 1e6 for p, w in zip(best[k][:2], best[k][2:])]
        for k in ("fsdp1", "fsdp_many")
    )
    for i, d in enumerate(("fwd", "bwd")):
        per_tensor = max(0.0, many[i] - one[i]) / (2 * (FSDP_LINEARS - 1))
        out[f"fsdp_param_{d}_us"] = per_tensor
        out[f"fsdp_module_{d}_us"] = max(0.0, one[i] - 2 * per_tensor)
    for name in ("adam", "clip"):
        out[f"{name}_plain_us"], out[f"{name}_dtensor_us"] = (x / N_PARAMS * 1e6 for x in best[name])
    return out


def tp_collective_us(iters: int = 20, repeats: int = 3) -> float:
    """A blocking all-reduce between compute, as TP runs it (a row-parallel linear's output), beyond the
    same all-reduce back to back, µs: measured by every rank of the caller's process group together (on a
    shared CPU the ranks' wake-up after the wait is part of it). Call on all ranks."""
    import torch
    import torch.distributed as dist

    x = torch.randn(8, 64, requires_grad=True)
    b = torch.randn(8, 64)

    def loop(coll: bool) -> None:
        for _ in range(iters):
            y = x
            for _ in range(N_OPS):
                y = y + b
            if coll:  # the run's own group; a DTensor's dispatch around it is in tp_linear_*_us
                dist.all_reduce(y.detach())

    t = torch.zeros(8, 64)

    def raw() -> None:
        for _ in range(iters):
            dist.all_reduce(t)

    def timed(fn) -> float:  # every rank starts together, then ``_best`` (a warm-up, the fastest of repeats)
        dist.barrier()
        return _best(fn, repeats)

    with_coll, without, back_to_back = timed(lambda: loop(True)), timed(lambda: loop(False)), timed(raw)
    return max(0.0, with_coll - without - back_to_back) / iters * 1e6


def tp_functional_us(
    tp_mesh, tokens: int, hidden: int, ffn: int, *, batches: int = BATCHES, pairs: int = 6
) -> dict[str, float]:
    """The in-step cost of one TP collective as the bundled runtime's DTensor linears issue it, µs, measured
    by every rank of the run together on its own TP mesh (``HostDispatch.tp_all_reduce_us``/``tp_all_gather_us``,
    and ``tp_collective_bytes`` the size measured): ``pairs`` column → row-parallel pairs of linears of the
    plan's shapes (``tokens`` × ``hidden`` → ``ffn`` → ``hidden``, ``ColwiseParallel``/``RowwiseParallel``),
    forward and backward, on the TP mesh against the same DTensor linears on a one-rank mesh with the same
    local shapes (``ffn``/tp), where DTensor skips the collectives. The difference is the collectives alone,
    as the step sees them: per pair the row-parallel output's all-reduce forward and the column-parallel
    input's backward (``_c10d_functional.all_reduce``), or with SP (``Shard(0)`` activations) an all-gather
    and a reduce-scatter each way — their dispatch, the wait for the other ranks (on shared cores their
    wake-up, and the spread of the DTensor work between them) and the transfer. DTensor's own dispatch is in
    both, so not here: ``tp_linear_*_us`` (not counted twice). The variants alternate within each of
    ``batches`` batches (order rotated, every rank starting together); each figure is the median of the
    batches' differences, the largest over ranks (``_median_difference``). Call on all ranks (every rank
    of the default group; each on the TP mesh it belongs to)."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    tp = tp_mesh.size()
    world = dist.get_world_size()
    one = init_device_mesh("cpu", (world, 1), mesh_dim_names=("ranks", "one"))["one"]  # every rank alone
    sp = tokens % tp == 0
    torch.manual_seed(0)

    def model(mesh, width: int, seq_parallel: bool):
        m = nn.Sequential(
            *[nn.Sequential(nn.Linear(hidden, width), nn.ReLU(), nn.Linear(width, hidden)) for _ in range(pairs)]
        )
        kw_in, kw_out = ({"input_layouts": Shard(0)}, {"output_layouts": Shard(0)}) if seq_parallel else ({}, {})
        for blk in m:
            parallelize_module(blk, mesh, {"0": ColwiseParallel(**kw_in), "2": RowwiseParallel(**kw_out)})
        return m

    local = max(1, ffn // tp)
    x_full = torch.randn(tokens, hidden, requires_grad=True)
    x_shard = torch.randn(tokens // tp, hidden, requires_grad=True)
    variants = {  # kind: (on the TP mesh with its input, on one rank with its input, collectives per run)
        "ar": ((model(tp_mesh, ffn, False), x_full), (model(one, local, False), x_full), 2 * pairs),
    }
    if sp:
        variants["sp"] = ((model(tp_mesh, ffn, True), x_shard), (model(one, local, True), x_full), 4 * pairs)
    runs = [(k, i, *variants[k][i]) for k in variants for i in (0, 1)]

    def run(m, x):
        def fn() -> float:
            t0 = time.perf_counter()
            m(x).sum().backward()
            return time.perf_counter() - t0

        return fn

    got = _interleaved({(k, i): run(m, x) for k, i, m, x in runs}, batches)
    med = {k: _median_difference(got, (k, 0), (k, 1), n) for k, (_, _, n) in variants.items()}
    return {
        "tp_all_reduce_us": med["ar"],
        "tp_all_gather_us": med.get("sp", med["ar"]),
        "tp_collective_bytes": float(tokens * hidden * x_full.element_size()),
    }


def _interleaved(runs, batches: int) -> dict:
    """Seconds of each ``runs`` entry (key: fn), alternating within each of ``batches`` batches (order rotated,
    every rank starting together after a barrier): key → per-batch seconds; each fn returns its parts' seconds."""
    import torch.distributed as dist

    keys = list(runs)
    for k in keys:  # warm-up
        runs[k]()
    out: dict = {k: [] for k in keys}
    for b in range(batches):
        for k in keys[b % len(keys) :] + keys[: b % len(keys)]:
            dist.barrier()
            out[k].append(runs[k]())
    return out


def median_difference(got: dict, key, base, per: float, part: int | None = None) -> float:
    """µs per unit of what ``key`` does beyond ``base`` on this rank (``_interleaved`` results; ``part``: that
    element of each sample): the median over batches of the batch's difference ÷ ``per`` (≥ 0). Both variants of
    a batch ran at the same moment, so a busier moment slows both; the median leaves out the batches where it
    slowed one. Not the difference of each variant's fastest batch: a collective's cost includes the wait for a
    rank the machine slowed, and a step of many collectives pays it on some of them; priced from the fastest
    batches, tp2 came out 25 % under its fastest step of 100 (``bench/bench_calibration.py``)."""
    import statistics

    def value(v):
        return v if part is None else v[part]

    diffs = [value(a) - value(b) for a, b in zip(got[key], got[base])]
    return max(0.0, statistics.median(diffs) / per) * 1e6


def _median_difference(got: dict, key, base, per: float, part: int | None = None) -> float:
    """``median_difference`` on every rank, the largest (call on every rank of the default group)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([median_difference(got, key, base, per, part)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t[0])


def dp_collectives_us(
    dp_mesh,
    tokens: int,
    hidden: int,
    width: int,
    module_params: int,
    zero_stage: int,
    *,
    batches: int = BATCHES,
    modules: int = 4,
) -> dict[str, float]:
    """The in-step cost of one data-parallel collective as the bundled runtime's FSDP2 wrappers issue it (one
    blocking c10d collective per wrapped module: ``replicate`` an all-reduce of its gradients, ``fully_shard`` an
    all-gather of its parameters in the forward (ZeRO-3: again in the backward) and a reduce-scatter of its
    gradients), µs, measured by every rank of the run together on its own DP mesh (``HostDispatch.dp_*_us``,
    ``dp_collective_bytes`` the module size measured): ``modules`` modules of about ``module_params`` parameters
    each (column → row pairs ``hidden`` → ``width`` → ``hidden`` on ``tokens`` rows, the plan's block), wrapped
    as the plan wraps its blocks (``runtime.parallelize.apply_dp``), forward and backward on the DP mesh against
    the same wrapped modules on a one-rank mesh, where the wrappers run their whole host path (hooks, copies: in
    ``fsdp_*_us``, so not counted twice) and their collectives over one rank cost nothing to wait for. The
    difference is the collectives as the step sees them: dispatch, the wait for the other ranks (their spread on
    shared cores) and the transfer. ``BATCHES`` interleaved batches, the median of their differences
    (``_median_difference``).
    Call on all ranks."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size()
    one = init_device_mesh("cpu", (world, 1), mesh_dim_names=("ranks", "one"))["one"]
    pair = 2 * hidden * width + width + hidden
    reps = max(1, round(module_params / pair))
    torch.manual_seed(0)

    def model(mesh):
        m = nn.Sequential(
            *[
                nn.Sequential(
                    *[nn.Sequential(nn.Linear(hidden, width), nn.ReLU(), nn.Linear(width, hidden)) for _ in range(reps)]
                )
                for _ in range(modules)
            ]
        )
        if zero_stage == 0:
            from torch.distributed._composable.replicate_with_fsdp import replicate

            for blk in m:
                replicate(blk, mesh=mesh)
            replicate(m, mesh=mesh)
        else:
            from torch.distributed.fsdp import fully_shard

            for blk in m:
                fully_shard(blk, mesh=mesh, reshard_after_forward=zero_stage == 3)
            fully_shard(m, mesh=mesh, reshard_after_forward=zero_stage == 3)
        return m

    x = torch.randn(tokens, hidden, requires_grad=True)

    def sampler(m):
        def run() -> tuple[float, float, float]:
            t0 = time.perf_counter()
            loss = m(x).sum()
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            return t1 - t0, t2 - t1, (t2 - t1) - (t1 - t0)

        return run

    got = _interleaved({"dp": sampler(model(dp_mesh)), "one": sampler(model(one))}, batches)
    fwd = _median_difference(got, "dp", "one", modules, part=0)
    bwd = _median_difference(got, "dp", "one", modules, part=1)
    out = {"dp_collective_bytes": float(reps * pair * x.element_size())}
    if zero_stage == 0:
        out["dp_all_reduce_us"] = bwd
    else:  # the forward holds the all-gathers; ZeRO-3's backward gathers again before it reduce-scatters
        out["dp_all_gather_us"] = fwd
        # per batch the backward's difference less the forward's
        out["dp_reduce_scatter_us"] = _median_difference(got, "dp", "one", modules, part=2) if zero_stage == 3 else bwd
    return out


def p2p_us(pp_mesh, tokens: int, hidden: int, width: int, nbytes: int, *, batches: int = BATCHES) -> dict[str, float]:
    """The in-step cost of one pipeline send/recv between adjacent stages, µs, as the runtime's stages issue
    them (c10d point-to-point on the pipeline group, ``torch.distributed.pipelining``), measured by every rank
    of the run on its own pipeline mesh (``HostDispatch.p2p_us``, ``p2p_bytes`` the size measured): stages
    paired (0, 1), (2, 3), …; each computes a layer's worth of work (``tokens`` × ``hidden`` → ``width`` →
    ``hidden``) then sends ``nbytes`` to its partner and receives as much back, against the same work alone;
    per transfer half the difference — its dispatch, the wait for the partner (their spread on shared cores)
    and the transfer. ``BATCHES`` interleaved batches, the median of their differences
    (``_median_difference``). Call on all
    ranks."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    group, me = pp_mesh.get_group(), pp_mesh.get_local_rank()
    ranks = dist.get_process_group_ranks(group)
    partner = ranks[me ^ 1] if (me ^ 1) < len(ranks) else None
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(hidden, width), nn.ReLU(), nn.Linear(width, hidden))
    x = torch.randn(tokens, hidden)
    buf = torch.zeros(max(1, nbytes // 4))
    out = torch.empty_like(buf)

    def run(exchange: bool):
        def fn() -> float:
            t0 = time.perf_counter()
            with torch.no_grad():
                m(x)
            if exchange and partner is not None:
                if me % 2 == 0:
                    dist.send(buf, partner, group=group)
                    dist.recv(out, partner, group=group)
                else:
                    dist.recv(out, partner, group=group)
                    dist.send(buf, partner, group=group)
            return time.perf_counter() - t0

        return fn

    got = _interleaved({"p2p": run(True), "alone": run(False)}, batches)
    # every rank takes part; one without a partner times the same work twice (≈ 0)
    us = _median_difference(got, "p2p", "alone", 2)
    return {"p2p_us": us, "p2p_bytes": float(buf.numel() * buf.element_size())}


def pp_action_us(
    pp_mesh,
    model,
    tp: int,
    micro_batch_size: int,
    seq_len: int,
    schedule: str,
    chunks: list[int],
    total: int,
    microbatches: int,
    *,
    batches: int = BATCHES,
) -> dict[str, float]:
    """The host work of one pipeline-schedule action (a micro-batch's forward or backward on a chunk) beyond
    the chunk's own compute, µs, as the runtime runs its schedule (``torch.distributed.pipelining``, the plan's
    ``schedule`` over its ``total`` chunks, this rank's ``chunks``, ``microbatches`` of ``micro_batch_size`` ×
    ``seq_len``): each chunk one transformer block of ``model`` at its TP-sharded width; per rank its CPU time
    (``time.thread_time``: not its waits, which the cost model simulates) of one schedule step against the same
    blocks' forward and backward called directly for the same micro-batches, over the actions it ran (two per
    micro-batch and chunk). What it holds: the schedule's bookkeeping, its send/recv posted and completed, the
    loss and ``scale_grads``, and how much slower the compute runs interleaved with them than back to back
    (measured on this 2-core host: 5–15 %, and its stages' sum 20–30 % over one process). ``BATCHES``
    interleaved batches, the median of their differences (``_median_difference``; ``HostDispatch.pp_action_us``).
    Call on every rank."""
    import torch

    from runtime.job import build_schedule
    from runtime.models.transformer import build_layer

    torch.manual_seed(0)
    blocks = {c: build_layer(model, "transformer_block", tp=tp, seed=c) for c in chunks}
    shape = (micro_batch_size, seq_len, model.hidden_size)

    def loss(out, target):
        return out.float().pow(2).mean()

    sched = build_schedule(schedule, pp_mesh.get_group(), blocks, total, microbatches, torch.device("cpu"), loss)
    first, last = 0 in blocks, total - 1 in blocks
    x = torch.randn(microbatches * shape[0], *shape[1:])
    target = torch.zeros(microbatches * shape[0], 1)
    # the direct calls' inputs and output gradients made once, outside the timing (the schedule's are its buffers)
    inputs = {c: torch.randn(shape, requires_grad=c > 0) for c in blocks}
    grad = torch.ones(shape)

    def scheduled() -> float:
        t0 = time.thread_time()
        sched.step(*((x,) if first else ()), **({"target": target, "losses": []} if last else {}))
        return time.thread_time() - t0

    def direct() -> float:
        t0 = time.thread_time()
        for _ in range(microbatches):
            for c, block in blocks.items():
                out = block(inputs[c])
                if c == total - 1:
                    (loss(out, None) / microbatches).backward()
                else:
                    out.backward(grad)
        return time.thread_time() - t0

    got = _interleaved({"scheduled": scheduled, "direct": direct}, batches)
    return {"pp_action_us": _median_difference(got, "scheduled", "direct", 2 * microbatches * len(blocks))}


def time_sliced_share(model, tp: int, micro_batch_size: int, seq_len: int, *, batches: int = 5) -> float:
    """The fraction of a core each rank computes on when a node's ranks outnumber its cores, measured
    (``HostDispatch.cpu_share``): the plan's transformer block (at its TP width, one micro-batch), forward and
    backward ≈ 0.3 s of it, by rank 0 alone (the other ranks parked in a barrier, asleep in gloo) and then by
    every rank at once; rank 0's time alone ÷ its time together, the median of ``batches``, ≤ 1. Fair time
    slicing alone would give cores ÷ ranks (``runtime.report.cpu_share``); a rank switched in and out also
    finds its caches cold: on this 2-core host 4 ranks ran a tiny-gpt block 2.4× as long as one alone, not 2×
    (each rank's CPU time per block +19 %). Call on every rank."""
    import statistics

    import torch
    import torch.distributed as dist

    from runtime.models.transformer import build_layer

    torch.manual_seed(0)
    block = build_layer(model, "transformer_block", tp=tp, seed=0)
    x = torch.randn(micro_batch_size, seq_len, model.hidden_size, requires_grad=True)

    def work(n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            block(x).sum().backward()
        return time.perf_counter() - t0

    work(3)  # warm-up; then ≈ 0.3 s of blocks (many of the scheduler's time slices), rank 0's count on every rank
    one = work(3) / 3
    n = torch.tensor([max(3, round(0.3 / max(one, 1e-6)))])
    dist.broadcast(n, 0)
    ratios = []
    for _ in range(batches):
        dist.barrier()
        alone = work(int(n)) if dist.get_rank() == 0 else 0.0
        dist.barrier()
        together = work(int(n))
        ratios.append(alone / together)
    share = torch.tensor([min(1.0, statistics.median(ratios))])
    dist.broadcast(share, 0)
    return float(share[0])


#: The functional collectives DTensor issues for tensor/sequence parallelism (``torch.ops._c10d_functional``).
FUNCTIONAL_COLLECTIVES = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor")
#: The c10d collectives FSDP2 (``replicate``/``fully_shard``) and the step's loss all-reduce issue
#: (``torch.ops.c10d``: ``dist.all_reduce``, ``all_gather_single``, ``reduce_scatter_single``).
C10D_COLLECTIVES = ("allreduce_", "_allgather_base_", "_reduce_scatter_base_")


def step_collectives(job, inputs, targets) -> dict[str, int]:
    """The collectives one training step of ``job`` issues on this rank, by op name, counted as the profiler
    records them (forward, backward, gradient clip and optimizer step, at any depth: also those DTensor issues
    inside another op's dispatch, e.g. an optimizer op that reads a Partial gradient): DTensor's functional
    ones (TP and SP, ``FUNCTIONAL_COLLECTIVES``) and c10d's (data parallelism, the loss and the Partial
    gradients' reduction, ``C10D_COLLECTIVES``; not the c10d call each functional one makes). Call on every
    rank: the step is a real one."""
    from collections import Counter

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        job.train_step(inputs, targets)
    counts: Counter[str] = Counter()
    for ev in prof.events():
        ns, _, name = ev.name.partition("::")
        if ns == "_c10d_functional" and name in FUNCTIONAL_COLLECTIVES:
            counts[name] += 1
        elif ns == "c10d" and name in C10D_COLLECTIVES:
            parent = ev.cpu_parent
            while parent is not None and not parent.name.startswith("_c10d_functional::"):
                parent = parent.cpu_parent
            if parent is None:  # issued by the step itself, not inside a functional collective
                counts[name] += 1
    return dict(counts)


def _on_ranks(measure, *args) -> None:
    """A torchrun entry point: ``measure(*args)`` on every rank of a gloo group (one thread per rank); rank 0
    prints the dict it returns as JSON. The ranks then meet in a barrier and leave without tearing the group
    down (``runtime.finish``): a rank that tears it down while its partner still completes the pipeline
    schedule's last send/recv aborts ("terminate called without an active exception"; ``--c10d-collectives`` on
    2 ranks: 6 of 26 runs without the barrier, 0 of 28 with it), and even after the barrier the teardown
    aborted once in CI (stop 38, ``--tp-collectives``)."""
    import torch
    import torch.distributed as dist

    from runtime.finish import finish_ranks

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        got = measure(*args)
        if dist.get_rank() == 0:
            print(json.dumps(got), flush=True)
        finish_ranks()
    finally:  # only a failing measurement gets here
        dist.destroy_process_group()


def _count(plan_path: str) -> dict[str, int]:
    """``torchrun ... -m runtime.host_dispatch --count-collectives plan.json``: one warm-up step, then the
    collectives of the next step."""
    from planner.answer.io import load_plan
    from runtime.data import SyntheticTokens
    from runtime.job import Job, TrainConfig

    plan = load_plan(plan_path, 0)
    job = Job.build(plan, TrainConfig(seed=0, lr=1e-3, max_grad_norm=1.0))
    data = SyntheticTokens(plan.model.vocab_size, 0)
    batches = [data.batch(i, plan.training.global_batch_size, plan.training.seq_len) for i in range(2)]
    job.train_step(job.dp_slice(batches[0][0]), job.dp_slice(batches[0][1]))
    return step_collectives(job, job.dp_slice(batches[1][0]), job.dp_slice(batches[1][1]))


def _tp(tokens: int, hidden: int, ffn: int, tp: int) -> dict[str, float]:
    """``torchrun ... -m runtime.host_dispatch --tp-collectives TOKENS HIDDEN FFN TP``: ``tp_functional_us`` on
    each rank's TP group of a (world ÷ TP, TP) mesh."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (dist.get_world_size() // tp, tp), mesh_dim_names=("dp", "tp"))
    return tp_functional_us(mesh["tp"], tokens, hidden, ffn)


def _c10d(tokens: int, hidden: int, width: int, params: int, zero_stage: int, tp: int = 1) -> dict[str, float]:
    """``torchrun ... -m runtime.host_dispatch --c10d-collectives TOKENS HIDDEN WIDTH PARAMS ZERO [TP]``:
    ``dp_collectives_us`` on each rank's DP group of a (world ÷ TP, TP) mesh, ``p2p_us`` (the same groups as
    pipeline stages, a ``TOKENS`` × ``HIDDEN`` fp32 activation) and ``pp_action_us`` (1F1B over them, a tiny-gpt
    block per stage, ``TOKENS`` ÷ 64 sequences of 64 per micro-batch, two micro-batches per stage)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from planner.specs.catalog import get_model

    mesh = init_device_mesh("cpu", (dist.get_world_size() // tp, tp), mesh_dim_names=("dp", "tp"))
    got = dp_collectives_us(mesh["dp"], tokens, hidden, width, params, zero_stage)
    got.update(p2p_us(mesh["dp"], tokens, hidden, width, tokens * hidden * 4))
    spec = get_model("tiny-gpt")  # its block: the pipeline actions' compute
    stages, me = mesh["dp"].size(), [mesh["dp"].get_local_rank()]
    got.update(pp_action_us(mesh["dp"], spec, 1, max(1, tokens // 64), 64, "1f1b", me, stages, 2 * stages))
    return got


def _share(tp: int = 1, micro_batch_size: int = 1) -> dict[str, float]:
    """``torchrun ... -m runtime.host_dispatch --cpu-share [TP [MBS]]``: ``time_sliced_share`` with tiny-gpt's
    block (``MBS`` sequences of 64), as ``{"cpu_share": ...}``."""
    from planner.specs.catalog import get_model

    return {"cpu_share": time_sliced_share(get_model("tiny-gpt"), tp, micro_batch_size, 64)}


def measure_in_subprocess(timeout: float = 300) -> dict[str, float] | None:
    """``measure()`` in a fresh one-thread process (its own one-rank group, beside any group of the
    caller); None if it fails."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    try:
        res = subprocess.run(
            [sys.executable, "-m", "runtime.host_dispatch"],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if res.returncode:
        return None
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


if __name__ == "__main__":
    import warnings

    warnings.filterwarnings("ignore")
    if len(sys.argv) == 3 and sys.argv[1] == "--count-collectives":
        _on_ranks(_count, sys.argv[2])
    elif len(sys.argv) == 6 and sys.argv[1] == "--tp-collectives":
        _on_ranks(_tp, *map(int, sys.argv[2:]))
    elif len(sys.argv) in (7, 8) and sys.argv[1] == "--c10d-collectives":
        _on_ranks(_c10d, *map(int, sys.argv[2:]))
    elif len(sys.argv) in (2, 3, 4) and sys.argv[1] == "--cpu-share":
        _on_ranks(_share, *map(int, sys.argv[2:]))
    else:
        print(json.dumps(measure()))
