"""A class's terms under context parallelism (``Candidate.cp`` > 1): the class at the local sequence, the DP/ZeRO
group over dp × cp, and the CP exchange's exposed time added to every block (``class_terms``).

* **The local view** (``cp_view``): a rank holds s / cp tokens of each sequence, so every GEMM, memory-bound op,
  TP collective, pipeline send, loss buffer and saved activation is the layer's at seq_len s / cp — the same
  ``Context`` with ``training.seq_len`` = s / cp and ``cp`` set, whose attention is cp blocks of the local square
  (``pricing.gpu.attention_time``: causal, load-balanced, 1/cp of the whole). Activations are ÷ cp with flash
  attention (no s² term). A measured profile prices layers at the request's seq_len only: the view is analytic.
* **The DP/ZeRO group** spans dp × cp ranks (stride tp, as a DP group of dp·cp: Megatron's DP-CP group,
  torchtitan's FSDP over dp_shard·cp): the class is priced as the cp = 1 class with dp·cp in the view, so
  gradient sync, ZeRO sharding and the optimizer shard over dp·cp; micro-batches stay gbs ÷ (dp·mbs).
* **The exchange** (``workload.context_parallel.cp_block_comms``, priced by ``pricing.context_parallel``): the
  ring's r − 1 send/recv steps each run beside one attention block of 1/r of the rank's attention (TE launches
  step i + 1's transfer before block i's kernel), so each step exposes max(0, transfer − block) and slows the
  block by σ of their overlap (``terms.overlapped``, ``OVERLAP_SLOWDOWN``); all-gathers and all-to-alls are
  blocking (the attention needs their result: TE ``AttnFuncWithCPAndKVAllGather``, ``…QKVOA2A``), exposed
  whole. On a host (gloo, the bundled runtime's synchronous ring) nothing overlaps. Under recomputation the
  attention's forward exchange runs again in backward where the attention is recomputed.
* **torchtitan** (``torch_ring``): torch's experimental ``context_parallel`` — its one all-gather runs beside the first
  block and its fp32 dK/dV ring beside the next blocks (``workload.context_parallel.cp_block_comms``), and its merge
  and fp32 accumulation passes (``torch_ring_passes``) add to every block (``ring_pass_seconds``).
  Compiled (``waits_at_issue``), none of those collectives overlaps: the ring's functional collectives
  (``ft_c.all_gather_tensor``, ``ft_c.permute_tensor``) return ``wait_tensor(result)`` at once when traced
  (torch ``distributed/_functional_collectives.py`` ``_maybe_wrap_tensor``: "wait_tensor() op is immediately called"
  under torch.compile, "Compiled tracing currently relies on the compiler to perform this optimization"), and Inductor
  moves a wait only with ``reorder_for_compute_comm_overlap``, False by default (``torch/_inductor/config.py``) and
  not set by torchtitan 9dec370 (its only Inductor setting is async TP's ``_micro_pipeline_tp``), whose
  ``apply_compile`` compiles each block whole (``fullgraph=True``, parallelize_llama.py:297-306), the ring with it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from planner.compose.affine import Affine
from planner.compose.context import Context
from planner.compose.terms import (
    NOTHING,
    OVERLAP_SLOWDOWN,
    SharedTerms,
    memory_terms,
    ns,
    overlapped,
    scaled,
    shared_key,
)
from planner.compose.terms import class_terms as plain_class_terms
from planner.pricing.collectives import Groups, comm_seconds
from planner.pricing.context_parallel import CpGroup
from planner.pricing.gpu import attention_time, hbm_efficiency
from planner.pricing.host import prefetch_overlaps
from planner.workload.context_parallel import (
    FP32,
    cp_block_comms,
    q_bytes,
    torch_ring_buffer_bytes,
    torch_ring_passes,
)

if TYPE_CHECKING:
    from planner.compose.cost import Candidate


def cp_view(ctx: Context, cp: int) -> Context:
    """The request priced at each CP rank's s / cp tokens (module docstring); ``ctx`` itself when cp = 1."""
    if cp == 1:
        return ctx
    view = ctx.views.get(cp)
    if view is None:
        training = ctx.training.model_copy(update={"seq_len": ctx.training.seq_len // cp})
        view = ctx.views[cp] = replace(ctx, training=training, cp=cp, profile=None, layer_fn=None)
    return view


def rerun_share(ctx: Context, recompute: str) -> float:
    """The share of the attention forward (and its CP exchange) that recomputation reruns in backward: all of it
    under full recomputation and Megatron's selective one (the core attention); torchtitan's op-level policy keeps
    the flash attention's output (none); its per-layer policy reruns every k-th block (1/k)."""
    if recompute == "full":
        return 1.0
    if recompute != "selective":
        return 0.0
    st = ctx.stack
    if st.activations != "titan":
        return 1.0
    return 0.0 if st.selective_ac == "op" else 1.0 / int(st.selective_ac)


def cp_exposed(ctx: Context, c: Candidate) -> tuple[float, float]:
    """(forward, backward) seconds per block and micro-batch the CP exchange adds to the block (module docstring)."""
    key = (c.micro_batch_size, c.tp, c.cp, c.cp_comm, c.recompute)
    hit = ctx.cp_exposed.get(key)
    if hit is None:
        hit = ctx.cp_exposed[key] = _cp_exposed(ctx, c)
    return hit


def torch_ring(ctx: Context) -> bool:
    """Whether the stack runs torch's experimental ``context_parallel`` (torchtitan: its activations are the
    ``titan`` formula; ``workload.context_parallel``)."""
    return ctx.stack.activations == "titan"


def waits_at_issue(ctx: Context) -> bool:
    """Whether torch's ring attention waits for each of its collectives where it issues it: under torch.compile
    (``kernels`` "compiled") on a ``torch_ring`` stack (module docstring), so its all-gather and dK/dV sends run exposed."""
    return torch_ring(ctx) and ctx.stack.kernels == "compiled"


def ring_pass_seconds(ctx: Context, c: Candidate) -> tuple[float, float]:
    """(forward, backward) seconds of torch's ring-attention merge and accumulation passes per block and micro-batch
    (``workload.context_parallel.torch_ring_passes``; zero for other stacks), each pass at the achieved HBM rate of one
    fp32 tensor of a rank's queries, × the memory residual."""
    if not torch_ring(ctx):
        return 0.0, 0.0
    view = cp_view(ctx, c.cp)
    n = q_bytes(ctx.model, c.micro_batch_size, view.training.seq_len, c.tp, 1)
    f, b = torch_ring_passes(n, c.cp, ctx.elt, ctx.stack.kernels == "compiled")
    rate = ctx.gpu.hbm_bandwidth_GBps * 1e9 * hbm_efficiency(FP32 * n) / ctx.residuals.memory_scale
    return f / rate, b / rate


def _cp_exposed(ctx: Context, c: Candidate) -> tuple[float, float]:
    view = cp_view(ctx, c.cp)
    grp = CpGroup.of(ctx, c.tp, c.cp, c.cp_comm)
    comms = cp_block_comms(
        ctx.model,
        c.cp,
        c.cp_comm,
        c.micro_batch_size,
        view.training.seq_len,
        c.tp,
        ctx.elt,
        grp.inner,
        torch_ring(ctx),
    )
    g = Groups(c.tp, 1, "intra_node", 1, grp)
    cs = ctx.residuals.compute_scale
    att_f, att_b = (cs * t for t in attention_time(view, c.micro_batch_size, c.tp))
    r = comms.ring_size
    out = []
    for ring, blocking, att in (
        (comms.fwd_ring, comms.fwd_blocking, att_f),
        (comms.bwd_ring, comms.bwd_blocking, att_b),
    ):
        t = comm_seconds(view, blocking, g)
        if ring:
            steps = sum(x.count for x in ring)
            step = comm_seconds(view, ring, g) / steps
            block = att / r
            overlaps = prefetch_overlaps(ctx) and not waits_at_issue(ctx)
            exposed = overlapped(block, step, OVERLAP_SLOWDOWN) - block if overlaps else step
            t += steps * exposed
        out.append(t)
    pf, pb = ring_pass_seconds(ctx, c)
    f, b = out[0] + pf, out[1] + pb
    return f, b + rerun_share(ctx, c.recompute) * f


def class_terms(ctx: Context, c: Candidate) -> SharedTerms:
    """``terms.class_terms`` of the class, with context parallelism when cp > 1 (module docstring)."""
    if c.cp == 1:
        return plain_class_terms(ctx, c)
    key = cp_key(c)
    s = ctx.cp_terms.get(key)
    if s is None:
        base = cp_base(ctx, c)
        f, b = cp_exposed(ctx, c)
        more_f, more_b = Affine(0, ns(f)), Affine(0, ns(b))
        bwd = base.bwd.plus(more_b)
        s = ctx.cp_terms[key] = replace(
            base,
            fwd=base.fwd.plus(more_f),
            bwd=bwd,
            fwd_cp=more_f,
            bwd_cp=more_b,
            cp_tmp=ring_buffer_bytes(ctx, c),
            hidden_bwd=scaled(bwd, 1 - OVERLAP_SLOWDOWN) if base.overlap_grad_reduce else NOTHING,
            hidden_fwd=scaled(base.fwd.plus(more_f), 1 - OVERLAP_SLOWDOWN) if base.hidden_fwd != NOTHING else NOTHING,
        )
    return s


def cp_key(c: Candidate) -> tuple:
    """The fields ``class_terms`` reads of a CP class, its memo's key: ``terms.shared_key``'s and the exchange's."""
    return (*shared_key(c), c.cp, c.cp_comm)


def cp_base(ctx: Context, c: Candidate) -> SharedTerms:
    """A CP class's terms without the exchange: the cp = 1 class at dp·cp in the local view (module docstring)."""
    return plain_class_terms(cp_view(ctx, c.cp), c.variant(dp=c.dp * c.cp, cp=1))


def quick_terms(ctx: Context, c: Candidate) -> tuple[SharedTerms, int, int]:
    """What ``bounds.quick_bound`` reads of ``class_terms`` without building it: (terms, nf, nb) whose time terms but
    the layer's forward and backward are ``class_terms``' and those two ``class_terms``' less nf and nb — a CP class's
    ``cp_base`` and the ns its exchange adds to every layer (``class_terms`` adds nothing else to ``fwd`` and ``bwd``,
    and its ``opt``, ``post``, ``post_slowdown`` and whether ``hidden_fwd`` is NOTHING are the base's: checked, else
    the class's own terms). The search asks it of ~12,000 CP classes of Llama 3 405B at 131K tokens, each a quick
    bound, of ~2,400 terms; ``tests/test_quick_terms.py`` checks the bounds against ``class_terms``'."""
    if c.cp == 1:
        return plain_class_terms(ctx, c), 0, 0
    key = cp_key(c)
    hit = ctx.cp_quick.get(key)
    if hit is None:
        base = cp_base(ctx, c)
        f, b = cp_exposed(ctx, c)
        nf, nb = ns(f), ns(b)
        fwd = base.fwd.plus(Affine(0, nf))
        if base.hidden_fwd != NOTHING and scaled(fwd, 1 - OVERLAP_SLOWDOWN) == NOTHING:
            hit = (class_terms(ctx, c), 0, 0)  # (never: a layer's forward rounds to 0 ns) its own terms
        else:
            hit = (base, nf, nb)
        ctx.cp_quick[key] = hit
    return hit


def memory_class_terms(ctx: Context, c: Candidate) -> SharedTerms:
    """``class_terms``' memory terms (states, activations, buffers: the same values; with cp > 1 those of the cp = 1
    class at dp·cp in the local view, which the exchange leaves as they are) without pricing any time: never read
    its times (``terms.memory_terms``). What the memory screens before costing read (``search.screens``)."""
    if c.cp == 1:
        return memory_terms(ctx, shared_key(c, c.dp))
    key = (*shared_key(c, c.dp * c.cp), c.cp, c.cp_comm)  # every field it reads (``ring_buffer_bytes``: mbs, tp too)
    s = ctx.cp_memory.get(key)
    if s is None:
        s = memory_terms(cp_view(ctx, c.cp), key[:-2])
        s = ctx.cp_memory[key] = replace(s, cp_tmp=ring_buffer_bytes(ctx, c))
    return s


def ring_buffer_bytes(ctx: Context, c: Candidate) -> int:
    """Bytes torch's ring attention holds inside one attention call (``torch_ring`` stacks on the all-gather
    rotation; ``workload.context_parallel.torch_ring_buffer_bytes``), 0 for other stacks and exchanges."""
    if c.cp == 1 or not torch_ring(ctx) or c.cp_comm != "all_gather":
        return 0
    seq = cp_view(ctx, c.cp).training.seq_len
    return torch_ring_buffer_bytes(ctx.model, c.micro_batch_size, seq, c.tp, c.cp, ctx.elt)
