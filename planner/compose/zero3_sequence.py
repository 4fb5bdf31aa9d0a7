"""DeepSpeed ZeRO-3 as v0.5.0 (2021) issues it, one parameter fetch at a time (``Stack.zero3_fetch = "param"``): the
seconds a transformer block takes per micro-batch, forward and backward, when its parameter all-gathers and gradient
reduce-scatters run as that release's ``PartitionedParameterCoordinator`` and ``FP16_DeepSpeedZeroOptimizer_Stage3``
issue them. Every rule below is read at microsoft/DeepSpeed tag v0.5.0 (f28432441b, 2021-08-17; v0.3.13 of 2021-03
issues them the same way: ``_allgather_param`` with its ``torch.cuda.synchronize()``, ``_synchronize_communication``
and the same defaults); file:line at that tag, ``stage3`` = deepspeed/runtime/zero/stage3.py, ``pp`` =
deepspeed/runtime/zero/partition_parameters.py, ``const`` = deepspeed/runtime/zero/constants.py:

* a module's fetch (``fetch_sub_module``, stage3:397-458, from every module's forward pre-hook and backward pre-hook:
  stage3:1546-1589) all-gathers each of its own parameters that is not available, ONE ``torch.distributed.all_gather``
  PER PARAMETER (``_all_gather`` async path, pp:650-673 → ``_allgather_param``, pp:823-870), each preceded by a
  ``torch.cuda.synchronize()`` (pp:845), and then, if it gathered or found one in flight, waits for every gather and
  the whole device (``_synchronize_communication``: ``comm_stream.synchronize()``, ``torch.cuda.synchronize()``,
  stage3:533-543) — a module's compute never starts before its gathers end, and nothing queued before survives it
  (the fix that followed in v0.5.5, c0eeb69df #1188, says it: "the async version is not async at all, because each
  all_gather calls torch.cuda.synchronize() to guarantee previous communication op to be completed");
* after its fetch, a module prefetches the next parameters of the recorded trace that are neither available nor in
  flight, up to ``stage3_prefetch_bucket_size`` elements (5e7: const:106; the last one crossing it included,
  stage3:209-239), only if nothing is in flight and fewer than ``stage3_max_live_parameters`` (1e9: const:99)
  elements are gathered (stage3:349-374) — each of them again after a ``torch.cuda.synchronize()`` (pp:845), so
  only the last one of a prefetch runs beside the module's compute;
* a module's parameters are released after its forward and after its backward (``release_sub_module``,
  stage3:460-501) unless it is used again within ``stage3_max_reuse_distance`` (1e9 elements: const:103) of
  parameters in the trace (``_keep_for_later``, stage3:512-520) — under activation checkpointing the recompute's
  forward fires the same hooks, so a block's parameters are gathered in the forward, again in the recompute, and a
  third time in the backward unless kept from the recompute;
* parameters under ``stage3_param_persistence_threshold`` (1e5 elements: const:112) are never partitioned
  (stage3:1416-1430): no gather, their gradients still reduced;
* gradients: each parameter's gradient joins a bucket (``reduce_independent_p_g_buckets_and_remove_grads``,
  stage3:1908-1951); when the next would overflow ``reduce_bucket_size`` (5e8 elements: const:68), the bucket is
  reduced: the host first waits for the previous bucket's reductions (``reduction_stream.synchronize()``,
  stage3:2193-2195), then ONE ``torch.distributed.reduce_scatter`` PER PARAMETER on the reduction stream
  (``average_tensor`` stage3:1978-1995 → ``_reduce_scatter_gradients``, pp:934-1003), a side stream since ZeRO-3's
  ``overlap_comm`` defaults on (const:61, deepspeed/runtime/zero/config.py:104-109) that waits for no other stream
  (stage3.py has no ``wait_stream``): a bucket's reductions start when the host issues them; after the backward the
  last bucket is reduced and waited for (``independent_gradient_partition_epilogue``, stage3:1757-1763, from
  ``allreduce_gradients`` after every micro-batch: deepspeed/runtime/engine.py:1255-1258).

Gathers and reduce-scatters run on one data-parallel process group (each parameter's ``ds_process_group``), and
PyTorch's ``ProcessGroupNCCL`` enqueues every collective of a group on that group's one NCCL stream per device
(``ncclStreams_``, "the CUDA streams used by NCCL kernels", c10d ProcessGroupNCCL.hpp of the 2021 releases, not read
at a tag here): they queue one after another (``comm`` below). The block's compute between two fetches is its forward
(backward) time split over its fetched parameters in proportion to their sizes (a linear's FLOPs are
2·tokens·parameters); the norms and the attention core between two linears ride with the one before. The compute under a collective is slowed by σ of the
overlapped time (``layer_group.overlapped``). The whole micro-batch is simulated (every block of the rank: whether a
parameter is kept depends on how far its next use is), and its blocks' time spread evenly over them.

Around each collective and each fetch, the small kernels of ``pricing.launches`` (cost model 35), every kernel no
earlier than its launch from the host, the host launching one at a time: each gather's zero-fill (pp:838) before its
device sync (pp:845) and its own shard's copy (pp:861) on DeepSpeed's comm stream (stage3:521-525); PyTorch's list
all-gather's copy of each of the dp slices out of its flat buffer after NCCL's kernel (``ProcessGroupNCCL::allgather``)
and the list reduce-scatter's dp copies into its flat buffer before it (``ProcessGroupNCCL::reduce_scatter``), dp
launches of the host each; each bucket gradient's ``div_`` (stage3:1985-1986); each fetched module's parameters'
norms formatted into a debug message, each an ``.item()`` that waits for the compute stream (stage3:452-457) — so
after every wait the device idles for the next launch. Not priced: the embedding's and LM head's place in the trace
(priced per kind in ``compose.terms``, as for the ``module`` fetch), the host's Python per rank (``narrow`` loops).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Literal

from planner.compose.layer_group import OVERLAP_SLOWDOWN
from planner.pricing.collectives import Groups, dp_collective
from planner.pricing.launches import Kernels, chain, zero3_kernels
from planner.specs import ModelSpec
from planner.workload.ops import linears, other_params

if TYPE_CHECKING:
    from planner.compose.context import Context
    from planner.compose.layer_group import LayerGroup

#: DeepSpeed v0.5.0 ZeRO-3 defaults (deepspeed/runtime/zero/constants.py; module docstring)
PREFETCH_BUCKET = 50_000_000
MAX_LIVE = 1_000_000_000
MAX_REUSE = 1_000_000_000
REDUCE_BUCKET = 500_000_000
PERSISTENCE_THRESHOLD = 100_000

Phase = Literal["fwd", "recompute", "bwd"]


@dataclass(frozen=True, slots=True)
class BlockParams:
    """A block's parameters as ZeRO-3 fetches them: the partitioned ones (``fetched``, forward order: one gather
    each) and, per fetched one, the persistent ones whose gradients arrive with its backward (``riders``)."""

    fetched: tuple[int, ...]
    riders: tuple[tuple[int, ...], ...]


def block_params(model: ModelSpec, tp: int) -> BlockParams:
    """A GPT block of Megatron's model code, module by module in forward order: its linears (one fused
    ``query_key_value``), each weight and bias a parameter, each LayerNorm's weight and bias ridden with the linear
    after it. A tensor at or over ``PERSISTENCE_THRESHOLD`` elements is fetched; one under it persists and its
    gradient is reduced with its module's fetched tensor (or, a module without one, the last fetched before it)."""
    norms = list(other_params(model, "transformer_block", tp))
    half = len(norms) // 2  # a block's two norms: before the attention, before the MLP
    modules: list[list[int]] = []
    for lin in linears(model, "transformer_block", tp):
        if lin.name in ("wk", "wv"):  # Megatron's ParallelSelfAttention: one query_key_value weight and bias
            modules[-1][0] += lin.n * lin.k
            modules[-1][1] += lin.bias
            continue
        before = norms[:half] if lin.name == "wq" else norms[half:] if lin.name == "w1" else []
        modules.append([lin.n * lin.k, lin.bias, *before])
    sizes: list[int] = []
    riders: list[list[int]] = []
    waiting: list[int] = []  # persistent tensors before the first fetched one
    for tensors in modules:
        big = [x for x in tensors if x >= PERSISTENCE_THRESHOLD]
        small = [x for x in tensors if 0 < x < PERSISTENCE_THRESHOLD]
        if not big:
            (riders[-1] if riders else waiting).extend(small)
            continue
        sizes += big
        riders += [small + waiting] + [[] for _ in big[1:]]
        waiting = []
    return BlockParams(tuple(sizes), tuple(tuple(r) for r in riders))


@dataclass(frozen=True, slots=True)
class Entry:
    """One fetch of the trace: parameter ``param`` of block ``layer``, then ``compute`` seconds on the device."""

    layer: int
    param: int
    compute: float
    phase: Phase


@dataclass(frozen=True, slots=True)
class Zero3Pass:
    """Seconds of one micro-batch's blocks (forward; backward with its recompute and the last bucket's reduction)
    and the collectives they issued."""

    fwd: float
    bwd: float
    gathers_fwd: int  #: parameter all-gathers in the forward
    gathers_bwd: int  #: in the backward: the recompute's and the backward's own
    reduce_scatters: int  #: gradient reduce-scatters (one per parameter, persistent ones included)


def trace(layers: int, n: int, c_fwd: tuple[float, ...], c_bwd: tuple[float, ...], recompute: bool) -> list[Entry]:
    """The fetch trace of one micro-batch of ``layers`` blocks of ``n`` fetched parameters each: the forward, then
    per block from the last its recompute (under activation checkpointing) and its backward in reverse order."""
    k = range(n)
    out = [Entry(layer, j, c_fwd[j], "fwd") for layer in range(layers) for j in k]
    for layer in reversed(range(layers)):
        if recompute:
            out += [Entry(layer, j, c_fwd[j], "recompute") for j in k]
        out += [Entry(layer, j, c_bwd[j], "bwd") for j in reversed(k)]
    return out


def keep_after(entries: list[Entry], sizes: tuple[int, ...]) -> list[bool]:
    """Whether each fetch's parameter stays gathered after it (``_keep_for_later``): it is used again in the
    micro-batch and the elements of the parameters fetched in between stay under ``MAX_REUSE``."""
    prefix = [0]
    for e in entries:
        prefix.append(prefix[-1] + sizes[e.param])
    nxt: dict[tuple[int, int], int] = {}
    out = [False] * len(entries)
    for i in reversed(range(len(entries))):
        key = (entries[i].layer, entries[i].param)
        j = nxt.get(key)
        out[i] = j is not None and prefix[j] - prefix[i + 1] < MAX_REUSE
        nxt[key] = i
    return out


def simulate(
    params: BlockParams,
    layers: int,
    c_fwd: tuple[float, ...],
    c_bwd: tuple[float, ...],
    recompute: bool,
    gather: Callable[[int], float],
    reduce: Callable[[int], float],
    slowdown: float,
    kernels: Kernels | None = None,
) -> Zero3Pass:
    """Run one micro-batch's trace over ``layers`` blocks (module docstring); ``gather(n)`` / ``reduce(n)``: seconds
    of one all-gather / reduce-scatter of an n-element parameter over the data-parallel group; ``c_fwd``/``c_bwd``:
    a block's compute after each of its fetches. With ``kernels`` (``pricing.launches``) the small kernels around
    each collective and each fetch's norms, every kernel after its launch; without, collectives and compute alone."""
    sizes = params.fetched
    entries = trace(layers, len(sizes), c_fwd, c_bwd, recompute)
    keep = keep_after(entries, sizes)
    k = len(sizes)
    key = [e.layer * k + e.param for e in entries]  # one int per parameter of the rank
    size = [sizes[e.param] for e in entries]
    fwd_phase = [e.phase == "fwd" for e in entries]
    g = [gather(n) for n in sizes]
    # per backward entry: its gradients' elements (a fetched parameter's, then its module's persistent ones)
    grads = [(n, *params.riders[j]) for j, n in enumerate(sizes)]
    red_s = [sum(reduce(x) for x in gr) for gr in grads]
    launch = kernels.launch if kernels is not None else 0.0
    # host (after its last wait), compute stream's end, DeepSpeed's comm stream's end, NCCL stream's end, reductions' end
    t = comp = side = comm = red = 0.0
    ready: set[int] = set()
    inflight: set[int] = set()
    live, bucket, pending_s, turn = 0, 0, 0.0, -1.0
    pending: list[int] = []  # the bucket's gradients (elements), in arrival order
    counts = [0, 0, 0]  # gathers forward, backward; reduce-scatters
    n_entries = len(entries)

    def all_gather(j: int) -> None:  # _allgather_param (pp:823-870) of entry j's parameter
        nonlocal t, side, comm, live
        p = entries[j].param
        if kernels is None:
            t = max(t, comp, comm)  # torch.cuda.synchronize() (pp:845)
            comm = t + g[p]
        else:
            n, kn = sizes[p], kernels
            side = chain(side, t, 1, launch, kn.fill(n))  # torch.zeros (pp:838) on the comm stream
            t = max(t + launch, comp, side, comm)  # torch.cuda.synchronize() (pp:845)
            side = chain(side, t, 1, launch, kn.shard(n))  # its own shard in (pp:861)
            t += 2 * launch  # the shard's launch, NCCL's
            # NCCL's kernel after the comm stream (syncStreams), then one copy out per rank (ProcessGroupNCCL::allgather)
            comm = chain(max(comm, side, t) + g[p], t, kn.ranks, launch, kn.gather_copy(n))
            t += kn.ranks * launch
        live += size[j]
        counts[0 if fwd_phase[j] else 1] += 1

    def flush() -> None:  # reduce_ipg_grads (stage3:2193-2195) → average_tensor (stage3:1978-1995)
        nonlocal t, comm, red, bucket, pending_s
        t = max(t, red)  # reduction_stream.synchronize() before the next bucket's reductions
        if kernels is None:  # issued from the host, one after another; the NCCL stream waits for no compute
            comm = max(comm, t) + pending_s
        else:
            kn, rs = kernels, red
            for x in pending:  # each gradient's div_ on the reduction stream
                rs = chain(rs, t, 1, launch, kn.div(x))
                t += launch
            for x in pending:  # then each list reduce-scatter: one copy in per rank, NCCL's kernel
                copies = chain(max(comm, rs), t, kn.ranks, launch, kn.scatter_copy(x))
                t += (kn.ranks + 1) * launch
                comm = max(copies, t) + reduce(x)
        red, bucket, pending_s = comm, 0, 0.0
        pending.clear()

    for i, e in enumerate(entries):
        q = key[i]
        if turn < 0 and not fwd_phase[i]:
            turn = max(t, comp)  # the forward's blocks end, the backward's begin
        if q in inflight or q not in ready:  # gather it (unless in flight), then wait for every gather and the device
            if q not in inflight:
                all_gather(i)
            t = max(t, comp, comm)  # _synchronize_communication (stage3:533-543)
            ready |= inflight
            ready.add(q)
            inflight = set()
        if kernels is not None:  # each tensor's norm formatted into a debug message: .item() waits (stage3:452-457)
            for x in grads[e.param]:
                comp = chain(comp, t, 1, launch, kernels.norm(x))  # the norm
                t = comp = chain(comp, t + launch, 1, launch, 0.0)  # its two bytes to the host
        if not inflight and live < MAX_LIVE:  # prefetch the trace's next parameters, a device sync before each
            want = 0
            for j in range(i + 1, n_entries):
                x = key[j]
                if x in ready or x in inflight:
                    continue
                all_gather(j)
                inflight.add(x)
                want += size[j]
                if want >= PREFETCH_BUCKET:
                    break
        start = max(t + launch, comp)  # its first kernel after its launch
        t += launch
        comp = start + e.compute + slowdown * min(e.compute, max(0.0, comm - start))
        if e.phase == "bwd":  # its gradients join the bucket; one that would overflow it reduces the bucket first
            elems = sum(grads[e.param])
            if bucket and bucket + elems > REDUCE_BUCKET:
                flush()
            pending.extend(grads[e.param])
            pending_s += red_s[e.param]
            bucket += elems
            counts[2] += len(grads[e.param])
        if not keep[i]:  # released after its use
            ready.discard(q)
            live -= size[i]
    flush()  # the backward's epilogue reduces the last bucket and waits for it (stage3:1757-1763)
    end = max(t, comp, comm)
    turn = end if turn < 0 else turn
    return Zero3Pass(turn, end - turn, counts[0], counts[1], counts[2])


def block_seconds(
    ctx: Context, lg: LayerGroup, tp: int, recompute: str, g: Groups, gather_elt: float, grad_elt: float
) -> tuple[float, float] | None:
    """A block's seconds per micro-batch, forward and backward, under ZeRO-3 as DeepSpeed v0.5.0 issues it: the
    model's blocks on one rank (ZeRO-3 runs without pipeline parallelism on this stack) simulated over one
    micro-batch (``simulate``), their time spread evenly over them (a ``compose.affine`` per-layer term). Its compute
    (``lg.work_f``/``work_b``; under full recomputation the backward's recompute is a forward's) split over its
    fetched parameters by size, each gather and reduce-scatter priced over the dp group (``dp_collective``)."""
    params = block_params(ctx.model, tp)
    if not params.fetched:  # every tensor persists: nothing gathered; priced as the module fetch prices it
        return None
    total = sum(params.fetched)
    full = recompute == "full"
    fwd, bwd = lg.work_f[0], lg.work_b[0] - (lg.work_f[0] if full else 0.0)
    share = [n / total for n in params.fetched]

    @cache  # a block has a handful of distinct sizes: each priced once
    def gather(n: int) -> float:
        return dp_collective(ctx, "all_gather", n * gather_elt, g.dp, g.dp_link, g.per_node)

    @cache
    def reduce(n: int) -> float:
        return dp_collective(ctx, "reduce_scatter", n * grad_elt, g.dp, g.dp_link, g.per_node)

    layers = ctx.model.num_layers
    c_f, c_b = tuple(fwd * s for s in share), tuple(bwd * s for s in share)
    kernels = zero3_kernels(ctx, g.dp, gather_elt, grad_elt)
    z = simulate(params, layers, c_f, c_b, full, gather, reduce, OVERLAP_SLOWDOWN, kernels)
    return z.fwd / layers, z.bwd / layers
