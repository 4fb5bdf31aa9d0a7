"""Context parallelism (issue 24) outside the multi-process runs (those are rows of
tests/test_runtime_equivalence.py): the rules every runner reports the same way, what each stack runs,
the planner's refusal to price cp > 1, the mesh order and the sequence's split."""

from __future__ import annotations

import pytest

import planner
from api.exporters import export
from planner.specs import rules
from planner.specs.catalog import MODELS
from planner.specs.errors import MeshplanError
from planner.specs.layout import mesh_groups, mesh_layout
from planner.specs.stacks import STACKS
from runtime.testing import make_plan
from runtime.validate import validate_plan

# (id, model, seq_len, parallel, field, words in the message): a CP plan that breaks one rule; the runtime and
# the exporters report it alike (the exporters under ``plan.``).
BROKEN = [
    ("seq-not-in-2cp-chunks", "tiny-llama", 34, dict(cp=2), "training.seq_len", "2·cp = 4"),
    ("cp4-seq-not-in-8-chunks", "tiny-gpt", 36, dict(cp=4), "training.seq_len", "2·cp = 8"),
    ("sp-inside-cp-share", "tiny-llama", 36, dict(cp=2, tp=4, sequence_parallel=True), "training.seq_len", "18"),
    ("a2a-heads", "tiny-gpt", 32, dict(cp=8, cp_comm="a2a"), "parallel.cp_comm", "num_attention_heads"),
    ("a2a-kv-heads-per-tp-rank", "tiny-llama", 32, dict(cp=4, tp=2, cp_comm="a2a"), "parallel.cp_comm", "num_kv_heads"),
    ("a2a+p2p-heads", "tiny-gpt", 32, dict(cp=8, cp_comm="a2a+p2p"), "parallel.cp_comm", "num_attention_heads"),
]


@pytest.mark.parametrize("model, seq, par, field, words", [pytest.param(*c[1:], id=c[0]) for c in BROKEN])
def test_runtime_and_exporters_report_a_broken_cp_rule_alike(model, seq, par, field, words):
    plan = make_plan(model, seq_len=seq, **par)
    with pytest.raises(MeshplanError) as runtime:
        validate_plan(plan, plan.parallel.num_gpus)
    with pytest.raises(MeshplanError) as exported:
        export(plan, "torchrun")
    assert runtime.value.field == field and exported.value.field == f"plan.{field}"
    assert words in runtime.value.message and runtime.value.message == exported.value.message
    assert runtime.value.fix and runtime.value.fix == exported.value.fix


# (id, parallel, seq_len): plans the runtime accepts (the shapes of the equivalence rows and their limits).
ACCEPTED = [
    ("cp2-p2p", dict(cp=2), 32),
    ("cp4-a2a-kv-heads-exactly", dict(cp=4, cp_comm="a2a"), 32),
    ("cp2xtp2-sp", dict(cp=2, tp=2, sequence_parallel=True), 32),
    ("cp2xtp2-a2a-one-kv-head-each", dict(cp=2, tp=2, cp_comm="a2a"), 32),
    ("cp8-all-gather-2-token-chunks", dict(cp=8, cp_comm="all_gather"), 32),
]


@pytest.mark.parametrize("par, seq", [pytest.param(*c[1:], id=c[0]) for c in ACCEPTED])
def test_the_runtime_accepts_cp_plans(par, seq):
    plan = make_plan("tiny-llama", seq_len=seq, **par)
    validate_plan(plan, plan.parallel.num_gpus)
    assert plan.parallel.num_gpus == plan.parallel.tp * plan.parallel.cp


def test_the_hierarchical_exchange_runs_in_the_runtime():
    """a2a+p2p runs (runtime/context_parallel.py; equivalence rows cp4-a2a+p2p*) with the all-to-all over the cp
    ranks of a node, the split the Megatron export writes (--hierarchical-context-parallel-sizes)."""
    from planner.specs.layout import cp_a2a_size

    plan = make_plan("tiny-llama", cp=4, cp_comm="a2a+p2p", gpus_per_node=2)
    validate_plan(plan, 4)
    assert cp_a2a_size(plan.parallel, plan.cluster.gpus_per_node) == 2
    assert cp_a2a_size(make_plan("tiny-llama", cp=4, tp=2, cp_comm="a2a+p2p", gpus_per_node=4).parallel, 4) == 2
    assert cp_a2a_size(plan.parallel, 8) == 4  # the whole cp group on a node: plain Ulysses


def test_a_wrong_world_size_names_cp():
    plan = make_plan("tiny-llama", cp=2, tp=2)
    with pytest.raises(MeshplanError) as err:
        validate_plan(plan, 2)
    assert err.value.field == "parallel" and "tp × cp × pp × dp = 2×2×1×1 = 4" in err.value.message


# (stack, cp_comm, field refused or None)
STACK_CASES = [
    ("meshplan", "p2p", None),
    ("meshplan", "all_gather", None),
    ("meshplan", "a2a", None),
    ("meshplan", "a2a+p2p", None),
    ("megatron", "a2a+p2p", None),
    ("megatron", "all_gather", None),
    ("torchtitan", "p2p", None),
    ("torchtitan", "all_gather", None),
    ("torchtitan", "a2a", "parallel.cp_comm"),
    ("deepspeed", "a2a", None),
    ("deepspeed", "p2p", "parallel.cp_comm"),
]


@pytest.mark.parametrize("stack, comm, field", STACK_CASES)
def test_each_stack_runs_its_cp_exchanges(stack, comm, field):
    err = rules.stack_runs(STACKS[stack], cp=2, cp_comm=comm)
    assert (err.field if err else None) == field
    if err:
        assert stack in err.message and comm in err.message and "training.stack" in err.fix
    assert rules.stack_runs(STACKS[stack], cp=1, cp_comm=comm) is None  # cp = 1: the exchange is unused


def _request(parallel: dict) -> dict:
    return {
        "model": "tiny-llama",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 4},
        "training": {"global_batch_size": 8, "seq_len": 32},
        "parallel": parallel,
    }


@pytest.mark.parametrize("fn", [planner.estimate, planner.plan], ids=["estimate", "plan"])
@pytest.mark.parametrize("pins", [dict(cp=2), dict(cp=4, cp_comm="a2a"), dict(cp=2, tp=2)])
def test_the_planner_prices_a_pinned_cp(fn, pins):
    """A pinned cp > 1 is priced (issue 24): the plan keeps it, and its exposed exchange is in the breakdown."""
    out = fn(_request(pins))
    plan = out if fn is planner.estimate else out.plans[0]
    est = plan if fn is planner.estimate else plan.estimate
    if fn is planner.plan:
        assert plan.parallel.cp == pins["cp"] and "cp" in plan.mesh.dim_names
    assert est.breakdown.cp_comm_s > 0


def test_the_search_keeps_cp_1_when_pinned():
    response = planner.plan(_request({"cp": 1, "cp_comm": "a2a"}))
    assert response.plans and all(p.parallel.cp == 1 for p in response.plans)
    assert all("cp" not in p.mesh.dim_names for p in response.plans)


def test_the_mesh_puts_cp_between_dp_and_tp():
    """Megatron's tp-cp-dp-pp order: TP ranks adjacent, then CP, then DP, PP outermost."""
    plan = make_plan("tiny-llama", tp=2, cp=2, pp=2)
    assert (plan.mesh.dim_names, plan.mesh.shape) == (["pp", "dp", "cp", "tp"], [2, 1, 2, 2])
    assert mesh_groups(plan.mesh, "tp")[:2] == [[0, 1], [2, 3]]
    assert mesh_groups(plan.mesh, "cp")[:2] == [[0, 2], [1, 3]]
    assert mesh_groups(plan.mesh, "pp")[0] == [0, 4]
    assert mesh_layout(make_plan("tiny-llama", tp=2).parallel).dim_names == ["pp", "dp", "tp"]  # cp = 1: as before


@pytest.mark.parametrize("cp", [1, 2, 4])
def test_the_load_balanced_split_covers_the_sequence_once(cp):
    """Rank i holds chunks i and 2·cp − 1 − i; the ranks' positions partition 0..S-1, and their causal work
    (the keys each query sees) is equal."""
    import torch

    from runtime.context_parallel import CPContext

    seq = 32
    ctxs = []
    for r in range(cp):
        ctx = CPContext.__new__(CPContext)
        ctx.size, ctx.rank = cp, r
        ctxs.append(ctx)
    positions = [c.positions(seq // cp, "cpu") for c in ctxs]
    assert sorted(torch.cat(positions).tolist()) == list(range(seq))
    assert len({int((p + 1).sum()) for p in positions}) == 1  # keys seen per rank: Σ (position + 1)
    x = torch.arange(seq)[None, :]
    assert all(torch.equal(c.shard(x)[0], p) for c, p in zip(ctxs, positions, strict=True))


def test_stack_capabilities_name_the_cp_sources():
    assert STACKS["meshplan"].cp_comms == ("p2p", "all_gather", "a2a", "a2a+p2p")  # every exchange runs here
    assert MODELS["tiny-llama"].num_kv_heads % 4 == 0  # the cp4 a2a row needs it
    # every current stack runs CP; Megatron-LM v2.0, v2.5 (2021) and 2022, and torchtitan before 9dec370 had none
    without = (
        "megatron-2020",
        "megatron-2021",
        "megatron-2022",
        "deepspeed-2021",
        "torchtitan-2404",
        "torchtitan-2408",
    )
    for stack in STACKS.values():
        assert bool(stack.cp_comms) is (stack.id not in without), stack.id


# (id, cp_comm, format, text in the output, or the field refused): each target carries the layout in its own
# words, or refuses an exchange it does not run.
EXPORTS = [
    ("megatron-p2p", "p2p", "megatron", "--context-parallel-size 4\n  --cp-comm-type p2p"),
    ("megatron-a2a", "a2a", "megatron", "--cp-comm-type a2a\n"),
    ("megatron-hierarchical", "a2a+p2p", "megatron", "--hierarchical-context-parallel-sizes 2\n  2\n"),
    ("torchtitan-ring", "p2p", "torchtitan-toml", 'context_parallel_rotate_method = "alltoall"'),
    ("torchtitan-all-gather", "all_gather", "torchtitan", "p.context_parallel_rotate_method = 'allgather'"),
    ("torchtitan-a2a", "a2a", "torchtitan-toml", "plan.parallel.cp_comm"),
    ("deepspeed-ulysses", "a2a", "deepspeed", '"sequence_parallel_size": 4'),
    ("deepspeed-ring", "p2p", "deepspeed", "plan.parallel.cp_comm"),
    ("torchrun-env", "all_gather", "torchrun", "export MESHPLAN_CP=4\nexport MESHPLAN_CP_COMM=all_gather"),
    ("slurm-env", "a2a", "slurm", "export MESHPLAN_CP=4"),
]


@pytest.mark.parametrize("comm, fmt, expected", [pytest.param(*c[1:], id=c[0]) for c in EXPORTS])
def test_exports_carry_cp_or_refuse_it(comm, fmt, expected):
    # tp 2 × cp 4 on nodes of 4 GPUs: a node holds 2 consecutive cp ranks (the a2a part of a2a+p2p).
    plan = make_plan("llama3-8b", tp=2, cp=4, cp_comm=comm, seq_len=64)  # 8 kv heads: 1 per tp×cp rank
    plan = plan.model_copy(update={"cluster": plan.cluster.model_copy(update={"num_nodes": 2, "gpus_per_node": 4})})
    if expected.startswith("plan."):
        with pytest.raises(MeshplanError) as err:
            export(plan, fmt)
        assert err.value.field == expected and comm in err.value.message and err.value.fix
        return
    assert expected in export(plan, fmt).content


def test_an_export_without_cp_keeps_the_three_dim_mesh():
    out = export(make_plan("tiny-llama", tp=2), "megatron").content
    assert "--context-parallel-size" not in out
