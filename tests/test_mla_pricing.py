"""The bundled runtime's latent attention priced as it runs (issue 23; ``runtime.models.mla``, docs/runtime.md
"Multi-head latent attention"), on the meshplan stack only (``Stack.mla_pad_v``): P·V at v padded to the q/k width
and the pad's and slice's copies; under TP the column-parallel up projections' input gradients at the latents'
widths and the shared rotary key's gradient all-reduced in the backward (``workload.collectives.per_linear_grads``).
Every number written out by hand; Megatron-core's (Transformer Engine's) P·V at v's width is unchanged."""

from __future__ import annotations

import pytest

from planner.answer.request import context
from planner.pricing.gpu import local_attention_time
from planner.specs import PlanRequest
from planner.specs.catalog import get_model
from planner.specs.stacks import STACKS
from planner.workload.collectives import issuing, tp_comms
from planner.workload.ops import attention_core_flops, memory_ops

DSV3 = get_model("deepseek-v3")  # h 7168, 128 heads, q_lora 1536, kv_lora 512, rope 64, nope 128, v 128; dense 18432
NO_Q_LORA = DSV3.model_copy(update={"mla": DSV3.mla.model_copy(update={"q_lora_rank": None})})  # type: ignore[union-attr]
T, E = 4096, 2  # tokens of the micro-batch, bytes per element (bf16)
ACT = T * 7168 * E  # one residual-stream tensor

#: (model, sp, recompute) → the block's backward TP collectives on the meshplan stack at tp 8, as (op, bytes, count):
#: wq_b at 1536 (or wq at h), wkv_b at 512, w1 and w3 at h, the rotary key at 64; with SP the row-parallel outputs'
#: gradients all-gathered (2); with full recompute the forward's again (all-reduces of wo's and w2's outputs, or
#: with SP their reduce-scatters and the attention's and MLP's input all-gathers: 4 at a reduce-scatter's time).
TABLE = [
    (DSV3, False, "none", [("all_reduce", T * 1536 * E, 1), ("all_reduce", T * 512 * E, 1), ("all_reduce", ACT, 2),
                           ("all_reduce", T * 64 * E, 1)]),
    (DSV3, True, "none", [("all_reduce", T * 1536 * E, 1), ("all_reduce", T * 512 * E, 1), ("all_reduce", ACT, 2),
                          ("all_reduce", T * 64 * E, 1), ("all_gather", ACT, 2)]),
    (DSV3, False, "full", [("all_reduce", T * 1536 * E, 1), ("all_reduce", T * 512 * E, 1), ("all_reduce", ACT, 2),
                           ("all_reduce", T * 64 * E, 1), ("all_reduce", ACT, 2)]),
    (DSV3, True, "full", [("all_reduce", T * 1536 * E, 1), ("all_reduce", T * 512 * E, 1), ("all_reduce", ACT, 2),
                          ("all_reduce", T * 64 * E, 1), ("all_gather", ACT, 2), ("reduce_scatter", ACT, 4)]),
    (NO_Q_LORA, False, "none", [("all_reduce", ACT, 3), ("all_reduce", T * 512 * E, 1), ("all_reduce", T * 64 * E, 1)]),
]  # fmt: skip


@pytest.mark.parametrize("model, sp, recompute, expected", TABLE, ids=["ar", "sp", "full", "sp-full", "no-q-lora"])
def test_the_runtimes_tp_collectives_of_latent_attention(model, sp, recompute, expected) -> None:
    comms = tp_comms(model, issuing(STACKS["meshplan"]), ACT, 8, sp, recompute, T)
    assert all(c.axis == "tp" for c in comms.bwd[0])
    assert sorted((c.op, c.nbytes, c.count) for c in comms.bwd[0]) == sorted(expected)
    fwd = {("reduce_scatter", ACT, 4)} if sp else {("all_reduce", ACT, 2)}  # the forward: wo's and w2's outputs
    assert {(c.op, c.nbytes, c.count) for c in comms.fwd[0]} == fwd


def test_the_rotary_key_and_latent_widths_are_what_moved() -> None:
    """Against the pattern of a dense block (every column-parallel linear's input gradient at h: the down
    projections counted too): DeepSeek-V3's block all-reduced 6 × h per token before, 2·h + 1536 + 512 + 64 now
    (0.38×); Megatron's pattern (the megatron stack) is unchanged: 2 all-reduces of h."""
    comms = tp_comms(DSV3, issuing(STACKS["meshplan"]), ACT, 8, False, "none", T)
    assert sum(c.nbytes * c.count for c in comms.bwd[0]) == T * E * (2 * 7168 + 1536 + 512 + 64)
    mega = tp_comms(DSV3, issuing(STACKS["megatron"]), ACT, 8, False, "none", T)
    assert [(c.op, c.nbytes, c.count) for c in mega.bwd[0]] == [("all_reduce", ACT, 2)]
    assert tp_comms(DSV3, issuing(STACKS["meshplan"]), ACT, 1, False, "none", T).bwd[0] == ()


def _ctx(stack: str):
    body = {
        "model": "deepseek-v3",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 64, "gpus_per_node": 8},
        "training": {"global_batch_size": 1024, "seq_len": 4096, "stack": stack},
    }
    return context(PlanRequest.model_validate(body))


def test_padded_pv_on_the_meshplan_stack_only() -> None:
    """The core's FLOPs: 2·b·s²·(192 + 192)·a/t on meshplan (v padded to q/k's 192), 2·b·s²·(192 + 128)·a/t on megatron;
    meshplan's flash time is a 192-wide MHA head's (the same FLOPs at the same rate), megatron's a 160-wide one's."""
    s, heads = 4096, 128 // 8
    assert attention_core_flops(DSV3, 1, s, 8, pad_v=True) == 2.0 * s * s * (192 + 192) * heads
    assert attention_core_flops(DSV3, 1, s, 8) == 2.0 * s * s * (192 + 128) * heads
    mesh, mega = _ctx("meshplan"), _ctx("megatron")
    assert mesh.stack.mla_pad_v and not mega.stack.mla_pad_v
    twin = DSV3.model_copy(update={"mla": None, "moe": None, "num_kv_heads": 128, "attention_head_dim": 192})
    mha = context(
        PlanRequest.model_validate(
            {"model": twin.model_dump(), "cluster": mesh.cluster.model_dump(), "training": {"seq_len": 4096,
             "global_batch_size": 1024, "stack": "meshplan"}}
        )
    )  # fmt: skip
    assert local_attention_time(mesh, 1, 8) == pytest.approx(local_attention_time(mha, 1, 8), rel=1e-12)
    f_mesh, b_mesh = local_attention_time(mesh, 1, 8)
    f_mega, b_mega = local_attention_time(mega, 1, 8)
    assert f_mesh / f_mega == pytest.approx(384 / 320, rel=1e-12) and b_mesh / b_mega == pytest.approx(1.2, rel=1e-12)


def test_the_pad_and_slice_copies_are_memory_ops_of_the_meshplan_block() -> None:
    """``F.pad`` of v (fill 192 wide, copy 128 in: 2 kernels) and the sliced output's contiguous copy for ``wo`` (read
    and write 128 wide: 1 kernel), per local head and token; none on megatron (Transformer Engine runs v at 128)."""
    s, heads = 4096, 128 // 8
    ops = {op.name: op for op in memory_ops(_ctx("meshplan"), "transformer_block", 1, 8, False)}
    assert (ops["pad_v"].nbytes, ops["pad_v"].kernels) == (s * heads * (192 + 2 * 128) * E, 2)
    assert (ops["slice_out"].nbytes, ops["slice_out"].kernels) == (2 * s * heads * 128 * E, 1)
    names = {op.name for op in memory_ops(_ctx("megatron"), "transformer_block", 1, 8, False)}
    assert "concat" in names and not names & {"pad_v", "slice_out"}


# ------------------------------------------------------------------------------------------------
# The runtime's collectives, counted on a real two-process gloo TP group


def _count_block_collectives(rank: int, world: int, init: str, variant: str, out: str) -> None:
    """One rank of a TP2 group (gloo): a one-block latent-attention chunk of the zoo, split by ``layout.tp_plan``
    (``runtime.parallelize.apply_tp``), forward and backward on 16 tokens, recording each functional collective
    DTensor issues (op, elements) per pass."""
    import json

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.utils._python_dispatch import TorchDispatchMode

    from planner.specs.inputs import ParallelConfig
    from planner.specs.layout import tp_plan
    from runtime.models.transformer import build_model
    from runtime.parallelize import apply_tp
    from tests.test_runtime_mla import MLAS, spec

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        m = spec(MLAS[variant], num_layers=1)
        chunk = build_model(m, seed=0)
        chunk.embed = chunk.norm = chunk.head = None  # the block alone: its input the residual stream
        apply_tp(
            chunk,
            init_device_mesh("cpu", (world,)),
            tp_plan(m, ParallelConfig(tp=world, pp=1, dp=1, micro_batch_size=1, stage_layers=[1])),
        )
        seen: dict[str, list] = {"fwd": [], "bwd": []}
        phase = ["fwd"]

        class Record(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                space, _, rest = str(func).partition(".")
                op = rest.split(".")[0]
                if space.endswith("c10d_functional") and op in (
                    "all_reduce",
                    "all_gather_into_tensor",
                    "reduce_scatter_tensor",
                ):
                    seen[phase[0]].append([op, args[0].numel()])
                return func(*args, **(kwargs or {}))

        torch.manual_seed(0)
        x = torch.randn(1, 16, m.hidden_size, requires_grad=True)
        with Record():
            y = chunk(x)
            phase[0] = "bwd"
            y.float().sum().backward()
        if rank == 0:
            with open(out, "w") as f:
                json.dump(seen, f)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("variant", ["v3", "no-q-lora"])
def test_the_runtime_issues_the_listed_tp_collectives(variant, tmp_path) -> None:
    """The bundled runtime at tp 2 (two processes, gloo) issues in a latent-attention block's backward exactly the
    all-reduces ``tp_comms`` lists for the meshplan stack — the up projections' input gradients at the latents'
    widths (24, 16; or wq's at h), w1's and w3's at h and the rotary key's at 8 per token — and in its forward wo's
    and w2's outputs' all-reduces. Without the rotary key's sum (a runtime that did not issue it) or with the old
    listing (6 all-reduces at h) this fails."""
    import json

    import torch.multiprocessing as mp

    from tests.test_runtime_mla import MLAS, spec

    out = tmp_path / "seen.json"
    mp.spawn(_count_block_collectives, args=(2, f"file://{tmp_path}/store", variant, str(out)), nprocs=2, join=True)
    seen = json.loads(out.read_text())
    m = spec(MLAS[variant], num_layers=1)
    tokens, elt = 16, 4  # fp32
    comms = tp_comms(m, issuing(STACKS["meshplan"]), tokens * m.hidden_size * elt, 2, False, "none", tokens)

    def listed(cs) -> list:
        return sorted(["all_reduce", int(c.nbytes) // elt] for c in cs for _ in range(int(c.count)))

    assert all(c.op == "all_reduce" for c in comms.fwd[0] + comms.bwd[0])
    assert sorted(seen["fwd"]) == listed(comms.fwd[0])
    assert sorted(seen["bwd"]) == listed(comms.bwd[0])
    assert ["all_reduce", 16 * 8] in seen["bwd"]  # the rotary key's (rope 8)
