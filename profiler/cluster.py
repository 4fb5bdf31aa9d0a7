"""Network profile of a cluster: collective times over message sizes, fitted to α-β per link class.

Run under torchrun, one process per GPU (or CPU process with gloo)::

    torchrun --nproc-per-node 8 [--nnodes N ...] -m profiler.cluster --out net.json

Link classes: ``intra_node`` (a group of the ranks of one node, all nodes measuring at once, as
concurrent TP groups would) and, with more than one node, ``inter_node`` (a group of one rank per node,
the ranks sharing a local rank, as DP/PP groups spanning nodes). Collectives: all-reduce, all-gather,
reduce-scatter (PyTorch 2.13's ``all_gather_single``/``reduce_scatter_single``) and send/recv (a
ping-pong between the group's first two ranks, one-way time = round trip / 2).

Message size S follows nccl-tests' convention (NVIDIA/nccl-tests doc/PERFORMANCE.md): the full
buffer, i.e. the all-reduce tensor, the all-gather *output*, the reduce-scatter *input*, the message
sent. Each size is run ``warmup`` times untimed, then ``iters`` times, each call timed on its own (with a
device sync). The *minimum* over the iterations is taken, as ``timeit`` does: the link's uncontended
capability, which is what a dedicated training job sees (the mean and median absorb whatever else
shares the hosts); then the slowest rank's value is kept, since a collective ends when its last rank
does.

α-β fit (Hockney's model): time(S) = α + β·S by ordinary least squares over the sizes; if that gives a
negative α (or β), the fit is redone with α = 0 (or β = 0), so both stay ≥ 0. The fitted β includes
the algorithm's volume factor: for a ring all-reduce β ≈ 2(n−1)/n ÷ link bandwidth.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from planner.specs import LinkFit, NetworkProfile

BACKENDS = ("auto", "gloo", "nccl")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "send_recv")
DEFAULT_SIZES = {
    "gloo": [2**k for k in range(12, 23, 2)],  # 4 KiB .. 4 MiB
    "nccl": [2**k for k in range(16, 29, 2)],  # 64 KiB .. 256 MiB
}


def fit_alpha_beta(samples: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares (α, β) of time = α + β·bytes, both constrained to be ≥ 0."""
    s = np.array([b for b, _ in samples], dtype=float)
    t = np.array([x for _, x in samples], dtype=float)
    if len(samples) >= 2 and np.ptp(s) > 0:
        beta, alpha = np.polyfit(s, t, 1)
    else:
        alpha, beta = 0.0, float(t.mean() / s.mean())
    if alpha < 0:
        alpha, beta = 0.0, float((s * t).sum() / (s * s).sum())
    if beta < 0:
        alpha, beta = float(t.mean()), 0.0
    return float(alpha), float(beta)


# ------------------------------------------------------------------------------------------------
# Measuring (inside a process group)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _op(collective: str, nbytes: int, group, ranks: list[int], device: torch.device) -> Callable[[], None] | None:
    """A closure running one collective of S = nbytes on this rank (None: this rank idles)."""
    n = len(ranks)
    numel = max(nbytes // 4, n)
    numel -= numel % n  # divisible by the group size for the sharded collectives
    full = torch.ones(numel, dtype=torch.float32, device=device)
    shard = torch.ones(numel // n, dtype=torch.float32, device=device)
    if collective == "all_reduce":
        return lambda: dist.all_reduce(full, group=group)
    if collective == "all_gather":
        return lambda: dist.all_gather_single(full, shard, group=group)
    if collective == "reduce_scatter":
        return lambda: dist.reduce_scatter_single(shard, full, group=group)
    me = dist.get_rank()
    a, b = ranks[0], ranks[1]
    if me == a:
        return lambda: (dist.send(full, dst=b, group=group), dist.recv(full, src=b, group=group))
    if me == b:
        return lambda: (dist.recv(full, src=a, group=group), dist.send(full, dst=a, group=group))
    return None


def measure(
    collective: str, nbytes: int, group, ranks: list[int], device: torch.device, *, warmup: int, iters: int
) -> float:
    """Seconds of one collective of S = nbytes: the slowest participating rank's fastest iteration."""
    op = _op(collective, nbytes, group, ranks, device)
    best = 0.0
    if op is not None:
        for _ in range(warmup):
            op()
        _sync(device)
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            op()
            _sync(device)
            times.append(time.perf_counter() - start)
        best = min(times)
        if collective == "send_recv":
            best /= 2  # round trip → one way
    slowest = torch.tensor([best], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return float(slowest.item())


def _groups(world: int, local: int) -> dict[str, tuple[list[list[int]], object]]:
    """Link class → (all groups' rank lists, this rank's group). Every rank creates every group."""
    nodes = world // local
    rank = dist.get_rank()
    classes = {}
    if local >= 2:
        classes["intra_node"] = [list(range(n * local, (n + 1) * local)) for n in range(nodes)]
    if nodes >= 2:
        classes["inter_node"] = [list(range(r, world, local)) for r in range(local)]
    out = {}
    for link, all_ranks in classes.items():
        mine = None
        for ranks in all_ranks:
            g = dist.new_group(ranks)
            if rank in ranks:
                mine = (ranks, g)
        out[link] = (all_ranks, mine)
    return out


def profile_network(sizes: Sequence[int], *, warmup: int = 2, iters: int = 10) -> NetworkProfile:
    """Measure every link class and collective (call on every rank of an initialised process group)."""
    world = dist.get_world_size()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    backend = dist.get_backend()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if backend == "nccl" else torch.device("cpu")
    links = []
    for link, (_all, (ranks, group)) in _groups(world, local).items():
        for collective in COLLECTIVES:
            # First use of a group sets up its connections: keep that out of the smallest size.
            measure(collective, max(sizes), group, ranks, device, warmup=1, iters=1)
            samples = [
                (int(s), measure(collective, s, group, ranks, device, warmup=warmup, iters=iters)) for s in sizes
            ]
            alpha, beta = fit_alpha_beta(samples)
            links.append(
                LinkFit(
                    link=link,
                    collective=collective,
                    group_size=len(ranks),
                    alpha_s=alpha,
                    beta_s_per_byte=beta,
                    samples=samples,
                )
            )
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return NetworkProfile(
        backend=backend,
        device=name,
        world_size=world,
        nodes=world // local,
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        links=links,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m profiler.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--backend", default="auto", choices=BACKENDS)
    parser.add_argument("--sizes", default="", help="bytes, comma-separated")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args(argv)
    backend = args.backend if args.backend != "auto" else ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend)
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s] or DEFAULT_SIZES[backend]
        prof = profile_network(sizes, warmup=args.warmup, iters=args.iters)
        if dist.get_rank() == 0:
            args.out.write_text(prof.model_dump_json(indent=2) + "\n")
            for f in prof.links:
                print(
                    f"{f.link:10s} {f.collective:14s} n={f.group_size} α={f.alpha_s * 1e6:8.1f} µs "
                    f"1/β={f.bandwidth_GBps:8.3f} GB/s",
                    flush=True,
                )
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
