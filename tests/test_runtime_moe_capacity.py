"""Capacity-factor token dropping in the model zoo's MoE (``MoeSpec.capacity_factor``, runtime.models.moe; issue 23),
in one process, against computations written here independently: the capacity (Megatron-core core_v0.16.1
``moe_utils.get_capacity`` as ``router.py`` calls it), the kept assignments by a brute force (per group and expert,
sort by probability, keep the first C; ties, capacity below and above the load, several groups) and by a
transcription of Megatron's own ``apply_router_token_dropping`` (policy ``probs``, no padding), the block's output
with dropped assignments left out (a per-token loop), and the reference's token groups
(``runtime.split_reference.drop_groups``) against the ranks' own shards. The multi-process equivalence rows are in
tests/test_runtime_equivalence_moe_capacity.py."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F

from planner.specs.catalog import MODELS
from runtime.models import build_model
from runtime.models.moe import MoE, capacity_keep, expert_capacity
from runtime.testing import make_plan
from runtime.validate import validate_plan


def _with_capacity(name: str, cf: float | None, policy: str = "probs"):
    m = MODELS[name]
    return m.model_copy(update={"moe": m.moe.model_copy(update={"capacity_factor": cf, "drop_policy": policy})})


@pytest.mark.parametrize(
    ("tokens", "k", "experts", "cf", "want"),
    [
        (64, 2, 8, 1.25, 20),  # 16 × 1.25 exactly
        (5, 2, 4, 1.0, 3),  # 2.5 rounds up
        (3, 1, 8, 1.0, 1),  # below one: 0.375 → 1 (no min_capacity: the router passes none)
        (32, 2, 8, 0.5, 4),  # a factor below 1
        (7, 3, 16, 2.0, 3),  # 21/16 × 2 = 2.625
        # Megatron's float expression, not exact arithmetic: (200 / 4) × 1.1 = 55.00000000000001 → 56
        (100, 2, 4, 1.1, 56),
    ],
)
def test_expert_capacity_is_megatrons_get_capacity(tokens, k, experts, cf, want):
    assert expert_capacity(tokens, k, experts, cf) == want
    exact = math.ceil(Fraction(tokens * k, experts) * Fraction(str(cf)))
    assert want == exact or (tokens, cf) == (100, 1.1)  # the one row where float and exact arithmetic part


def _brute_keep(gates, idx, experts, cf, groups, policy="probs", rows=1):
    """Per group and expert: its assignments sorted by (−gate, token) ("probs") or by (sequence position, row) of
    the token in a [rows, n / rows] batch ("position"), the first C kept (C from exact arithmetic, Megatron's float
    expression only where they part, which these rows avoid)."""
    n, k = len(idx), len(idx[0])
    t = n // rows
    keep = [[False] * k for _ in range(n)]
    for g in sorted(set(groups)):
        members = [i for i in range(n) if groups[i] == g]
        cap = math.ceil(Fraction(len(members) * k, experts) * Fraction(str(cf)))
        for e in range(experts):
            if policy == "probs":
                mine = [((-gates[i][j], i), i, j) for i in members for j in range(k) if idx[i][j] == e]
            else:
                mine = [((i % t, i // t), i, j) for i in members for j in range(k) if idx[i][j] == e]
            for _, i, j in sorted(mine)[:cap]:
                keep[i][j] = True
    return keep


def _megatron_keep(gates: torch.Tensor, idx: torch.Tensor, experts: int, cf: float) -> torch.Tensor:
    """Megatron-core core_v0.16.1 ``apply_router_token_dropping`` (drop_policy "probs", pad_to_capacity False),
    transcribed: probabilities as a dense [N, E] map, ``topk`` of capacity down each expert's column, and-ed with
    the routing map."""
    n, _ = idx.shape
    probs = torch.zeros(n, experts).scatter(1, idx, gates)
    routing_map = torch.zeros(n, experts, dtype=torch.bool).scatter(1, idx, True)
    cap = math.ceil((n * idx.shape[1] / experts) * cf)
    if cap > n:
        mask = torch.ones_like(routing_map)
    else:
        _, top = torch.topk(probs, k=cap, dim=0, sorted=False)
        mask = torch.zeros_like(probs).scatter(0, top, 1).bool()
    final = routing_map & mask
    return final.gather(1, idx)


def _routing(n: int, k: int, experts: int, seed: int, ties: bool = False):
    gen = torch.Generator().manual_seed(seed)
    idx = torch.stack([torch.randperm(experts, generator=gen)[:k] for _ in range(n)])
    gates = torch.rand(n, k, generator=gen)
    if ties:  # gates from a set of three values: many equal gates at every capacity boundary
        gates = torch.tensor([0.25, 0.5, 0.75])[torch.randint(0, 3, (n, k), generator=gen)]
    return gates, idx


# (id, tokens, top-k, experts, capacity factor, groups, ties)
TABLE = [
    ("below-load", 64, 2, 8, 0.75, 1, False),
    ("at-balance", 64, 2, 8, 1.0, 1, False),
    ("above-load", 32, 2, 4, 8.0, 1, False),  # capacity 128 > any load: nothing dropped
    ("ties", 48, 2, 4, 0.5, 1, True),
    ("ties-groups", 48, 2, 4, 0.75, 3, True),
    ("groups-unequal", 40, 1, 4, 1.0, 0, False),  # groups of 10, 14 and 16 tokens
    ("top4-of-16", 60, 4, 16, 1.25, 2, False),
]


@pytest.mark.parametrize("policy", ["probs", "position"])
@pytest.mark.parametrize(
    ("n", "k", "experts", "cf", "ngroups", "ties"), [r[1:] for r in TABLE], ids=[r[0] for r in TABLE]
)
def test_kept_assignments_equal_a_brute_force(n, k, experts, cf, ngroups, ties, policy):
    gates, idx = _routing(n, k, experts, seed=n + k, ties=ties)
    if ngroups:
        groups = torch.arange(n) * ngroups // n
    else:
        groups = torch.tensor([0] * 10 + [1] * 14 + [2] * 16)
    rows = 2  # "position": a batch of 2 rows, so sequence-major order is not the flat order
    got = capacity_keep(gates, idx, experts, cf, groups, policy, (rows, n // rows))
    want = _brute_keep(gates.tolist(), idx.tolist(), experts, cf, groups.tolist(), policy, rows)
    assert got.tolist() == want
    loads = torch.bincount(idx.reshape(-1), minlength=experts)
    if cf == 8.0:
        assert got.all()
    else:
        assert not got.all(), "the row must drop something"
    if policy == "probs" and not ties and ngroups == 1:  # one group, distinct gates: Megatron's algorithm agrees
        assert torch.equal(got, _megatron_keep(gates, idx, experts, cf))
    assert int(got.sum()) <= int(loads.sum())


def _loop_with_drops(moe: MoE, x: torch.Tensor, groups: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Token by token: the router's choice and gates (``MoE.route``, covered by test_runtime_moe_units), the
    brute-force kept set, each kept expert's SwiGLU × its gate; dropped assignments add nothing."""
    _, idx, gates = moe.route(x)
    keep = _brute_keep(
        gates.tolist(), idx.tolist(), moe.num_experts, moe.capacity_factor, groups.tolist(), moe.drop_policy, x.shape[0]
    )
    flat = x.reshape(-1, x.shape[-1])
    out = torch.zeros_like(flat)
    dropped = 0
    for n in range(flat.shape[0]):
        for j in range(moe.top_k):
            if not keep[n][j]:
                dropped += 1
                continue
            i = int(idx[n, j])
            w1, w3, w2 = moe.experts.w1[i], moe.experts.w3[i], moe.experts.w2[i]
            out[n] += gates[n, j] * ((F.silu(flat[n] @ w1) * (flat[n] @ w3)) @ w2)
    return out, dropped


@pytest.mark.parametrize("name", ["tiny-moe", "tiny-moe-shared"])
@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("policy", ["probs", "position"])
def test_moe_block_drops_what_the_brute_force_drops(name, split, policy):
    """The block's output is the per-token loop over the kept assignments (+ the shared expert); ``dropped`` counts
    the rest; with ``drop_groups`` (two groups of one sequence each) the capacity is per group."""
    torch.manual_seed(2)
    model = build_model(_with_capacity(name, 1.0, policy), seed=0)
    moe = model.layers["1"].moe
    x = torch.randn(2, 16, 64)
    groups = torch.arange(2)[:, None].expand(2, 16) if split else torch.zeros(2, 16, dtype=torch.long)
    moe.drop_groups = groups if split else None
    got = moe(x)
    with torch.no_grad():
        want, dropped = _loop_with_drops(moe, x, groups.reshape(-1))
        if moe.shared is not None:
            want = want + moe.shared(x).reshape(-1, 64)
    assert dropped > 0
    assert moe.dropped == dropped
    torch.testing.assert_close(got.detach().reshape(-1, 64), want, rtol=1e-5, atol=1e-6)


def test_a_capacity_above_every_load_is_dropless():
    torch.manual_seed(3)
    x = torch.randn(2, 16, 64)
    dropless = build_model(MODELS["tiny-moe"], seed=0).layers["0"].moe
    roomy = build_model(_with_capacity("tiny-moe", 64.0), seed=0).layers["0"].moe
    torch.testing.assert_close(roomy(x), dropless(x), rtol=0, atol=0)
    assert roomy.dropped == 0


@pytest.mark.parametrize("name", ["tiny-moe", "tiny-moe-shared"])
def test_gradients_flow_through_the_kept_assignments_only(name):
    """The experts' and the router's gradients equal the per-token loop's (autograd through the kept assignments
    only), at a capacity of 1 row per expert per sequence group, where almost everything is dropped."""
    torch.manual_seed(4)
    moe = build_model(_with_capacity(name, 0.1), seed=0).layers["1"].moe
    moe.aux_coeff = 0.0  # the balance loss counts the routing before dropping; here only the routed output
    x = torch.randn(2, 16, 64)
    groups = torch.arange(2)[:, None].expand(2, 16)
    moe.drop_groups = groups
    g = torch.randn(32, 64)
    (moe(x).reshape(-1, 64) * g).sum().backward()
    got = {n: p.grad.clone() for n, p in moe.named_parameters() if n.startswith(("experts", "router"))}
    moe.zero_grad()
    want, dropped = _loop_with_drops(moe, x, groups.reshape(-1))
    (want * g).sum().backward()
    assert dropped >= 32 * moe.top_k - 2 * moe.num_experts  # at most one kept row per expert and group
    for n, grad in got.items():
        torch.testing.assert_close(grad, moe.get_parameter(n).grad, rtol=1e-5, atol=1e-6, msg=n)


def _padded(name: str, cf: float, policy: str = "probs"):
    m = _with_capacity(name, cf, policy)
    return m.model_copy(update={"moe": m.moe.model_copy(update={"pad_to_capacity": True})})


@pytest.mark.parametrize("name", ["tiny-moe", "tiny-moe-shared"])
@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize(("cf", "policy"), [(1.0, "probs"), (0.5, "position"), (2.0, "probs")])
def test_padding_to_capacity_runs_every_expert_at_capacity_and_changes_nothing(name, split, cf, policy):
    """``MoeSpec.pad_to_capacity`` (Megatron-core ``--moe-pad-expert-input-to-capacity``): the grouped experts get
    exactly C rows per expert (Σ of the groups' C with ``drop_groups``; C from ``get_capacity`` written out here)
    whatever the load, the kept rows first in each slot and zero rows after; the output, the drop count and every
    parameter's gradient are the unpadded block's (the per-token loop's too), up to the grouped GEMMs' summation
    order over the extra zero rows (fp32: 1e-6)."""
    torch.manual_seed(5)
    x = torch.randn(2, 16, 64)
    groups = torch.arange(2)[:, None].expand(2, 16) if split else None
    g = torch.randn(2, 16, 64)
    runs = []
    for spec in (_with_capacity(name, cf, policy), _padded(name, cf, policy)):
        moe = build_model(spec, seed=0).layers["1"].moe
        moe.drop_groups = groups
        seen: list = []
        moe.experts.register_forward_hook(
            lambda mod, args, out, seen=seen: seen.append((args[0].detach(), args[1].clone()))
        )
        (moe(x) * g).sum().backward()
        grads = {n: p.grad.clone() for n, p in moe.named_parameters()}
        runs.append((moe, seen[0], grads))
    (plain, (rows, counts), want), (padded, (prows, pcounts), got) = runs
    E, k = padded.num_experts, padded.top_k
    sizes = [16, 16] if split else [32]
    C = sum(math.ceil(Fraction(n * k, E) * Fraction(str(cf))) for n in sizes)
    assert pcounts.tolist() == [C] * E and prows.shape == (E * C, 64)
    assert int(counts.sum()) == rows.shape[0] <= E * C  # the unpadded block ran only its kept rows
    assert rows.shape[0] < E * C or cf < 1  # zero rows at cf ≥ 1 (at 0.5 the experts are mostly full)
    for e in range(E):  # expert e's slot: its kept rows (as the unpadded block orders them), then zero rows
        start = int(counts[:e].sum())
        kept = rows[start : start + int(counts[e])]
        slot = prows[e * C : (e + 1) * C]
        torch.testing.assert_close(slot[: kept.shape[0]], kept, rtol=0, atol=0)
        assert not slot[kept.shape[0] :].any()
    assert padded.dropped == plain.dropped
    with torch.no_grad():
        loop, dropped = _loop_with_drops(
            padded, x, (groups if split else torch.zeros(2, 16, dtype=torch.long)).reshape(-1)
        )
    assert dropped == padded.dropped
    for n in want:
        torch.testing.assert_close(got[n], want[n], rtol=1e-5, atol=1e-6, msg=n)


def test_pad_to_capacity_needs_a_capacity_factor_and_the_megatron_export_writes_its_flag():
    """Left out of a dump when off (MoE models dump and hash as before); without a capacity factor, or with a
    capacity above every token (top_k × capacity_factor > num_experts), it names the field; the megatron export
    writes --moe-pad-expert-input-to-capacity with the capacity factor, and not without padding."""
    from pydantic import ValidationError

    from api.exporters import ExportOptions, export

    moe = MODELS["tiny-moe"].moe
    assert "pad_to_capacity" not in _with_capacity("tiny-moe", 1.0).moe.model_dump()
    assert _padded("tiny-moe", 1.0).moe.model_dump()["pad_to_capacity"] is True
    for bad in ({"pad_to_capacity": True}, {"pad_to_capacity": True, "capacity_factor": 4.5}):  # E 8, k 2
        with pytest.raises(ValidationError) as err:
            type(moe).model_validate({**moe.model_dump(), **bad})
        assert "pad_to_capacity" in str(err.value) and "capacity_factor" in str(err.value)
    for spec, flag in ((_padded("tiny-moe", 1.25), True), (_with_capacity("tiny-moe", 1.25), False)):
        plan = make_plan(type(MODELS["tiny-moe"]).model_validate_json(spec.model_dump_json()), dp=2, ep=2)
        validate_plan(plan, 2)
        words = export(plan, "megatron", ExportOptions()).content.split()
        assert ("--moe-pad-expert-input-to-capacity" in words) == flag
        assert words[words.index("--moe-expert-capacity-factor") + 1] == "1.25"


def test_drop_groups_are_the_ranks_token_shards():
    """``drop_groups`` of a plan with micro-batch 2, cp 2 and tp 2 with SP: each group is exactly the tokens one
    rank routes in one forward — a micro-batch's rows × the cp rank's two load-balanced chunks (``CPContext``:
    chunks c and 2·cp−1−c of 2·cp) × one contiguous SP half of those."""
    from runtime.split_reference import drop_groups

    spec = _with_capacity("tiny-moe", 1.0)
    plan = make_plan(spec, dp=2, ep=2, cp=2, tp=2, sequence_parallel=True, micro_batch_size=2, cp_comm="a2a")
    groups = drop_groups(plan)
    assert groups is not None and groups.shape == (8, 32)
    seen = set()
    for micro in range(4):
        for c in range(2):
            local = list(range(c * 8, c * 8 + 8)) + list(range((3 - c) * 8, (3 - c) * 8 + 8))
            for s in range(2):
                tokens = groups[2 * micro : 2 * micro + 2][:, local[s * 8 : s * 8 + 8]]
                assert tokens.unique().numel() == 1
                seen.add(int(tokens[0, 0]))
    assert len(seen) == 16
    assert drop_groups(make_plan(MODELS["tiny-moe"], dp=2, ep=2)) is None


def test_validate_accepts_a_capacity_factor():
    plan = make_plan(_with_capacity("tiny-moe", 1.25), dp=2, ep=2)
    validate_plan(plan, 2)


def test_drop_policy_is_megatrons_and_needs_a_capacity_factor():
    """``MoeSpec.drop_policy``: left out of a dump at its default "probs" (MoE models dump and hash as before);
    "position" without a capacity factor names the field; the megatron export writes the policy."""
    from pydantic import ValidationError

    from api.exporters import ExportOptions, export

    moe = MODELS["tiny-moe"].moe
    assert (
        "drop_policy" not in moe.model_dump() and "drop_policy" not in _with_capacity("tiny-moe", 1.0).moe.model_dump()
    )
    assert _with_capacity("tiny-moe", 1.0, "position").moe.model_dump()["drop_policy"] == "position"
    with pytest.raises(ValidationError) as err:
        type(moe).model_validate({**moe.model_dump(), "drop_policy": "position"})
    assert "drop_policy" in str(err.value) and "capacity_factor" in str(err.value)
    with pytest.raises(ValidationError):
        type(moe).model_validate({**moe.model_dump(), "capacity_factor": 1.0, "drop_policy": "random"})
    plan = make_plan(
        type(MODELS["tiny-moe"]).model_validate_json(_with_capacity("tiny-moe", 1.0, "position").model_dump_json()),
        dp=2,
        ep=2,
    )
    words = export(plan, "megatron", ExportOptions()).content.split()
    assert words[words.index("--moe-token-drop-policy") + 1] == "position"
