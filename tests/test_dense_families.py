"""A model of one block kind queued one item a family (``search.dense_families``): the classes that differ only in
ZeRO stage and CP exchange enter as one FAMILY item at the FLOOR key each would enter at (a CP class's
``floor_bound``; the others class by class), raised at the front to their one lean bound, then unfolded into its
classes at their LEAN keys.
Checked against the class-by-class queue (``Frontier`` without the families) it replaces: the same classes popped,
settled at the same bounds, in the same order; the probe's scan (``by_quick_bound``) and ``remaining`` the same — on
Megatron CP (Llama 3 405B at 131,072 tokens), torchtitan's CP with FP8 (its 2024-12 405B row: a FLOOR key at the FP8
GEMM ceiling, none for its TP-overlapped classes) and a request without CP.
"""

from __future__ import annotations

from itertools import islice

import pytest

from planner.answer.request import context
from planner.search import frontier
from planner.search.space import enumerate_classes
from tests.plan_support import search_request

TITAN_405B = {  # bench/data/published_runs.json: torchtitan_2412_t6_405b_fsdp8_cp1's model and training
    "name": "titan-405b",
    "family": "llama",
    "num_layers": 126,
    "hidden_size": 16384,
    "num_attention_heads": 128,
    "num_kv_heads": 8,
    "ffn_hidden_size": 53248,
    "vocab_size": 128000,
    "activation": "swiglu",
    "norm": "rmsnorm",
    "tie_embeddings": False,
    "max_seq_len": 32768,
}
CASES = [
    ("llama3-405b", "h100-sxm5-80gb", 2048, 8, 128, 131072, None),  # bench_plan's CP case (FLOOR keys)
    (
        TITAN_405B,
        "h100-sxm-96gb-hbm2e",
        64,
        8,
        64,
        32768,
        {  # compiled, as the run was: async TP is an Inductor pass
            "precision": "fp8",
            "fp8_recipe": "tensorwise",
            "stack": {"base": "torchtitan", "pp_kept_outputs": True, "kernels": "compiled"},
        },
    ),
    ("llama3-70b", "h100-sxm5-80gb", 8, 8, 1024, 8192, None),  # no CP
]
POPS = 4000


def queues(case):
    req = search_request(*case)
    out = []
    for with_families in (True, False):
        ctx = context(req)  # a fresh context each: no memo shared between the two queues
        cands, families = enumerate_classes(ctx, req.parallel, req.options)
        out.append((ctx, cands, frontier.Frontier(ctx, req.parallel, cands, families if with_families else None)))
    return out


def popped(q: frontier.Frontier, n: int) -> list[tuple]:
    out = []
    while len(out) < n and (item := q.pop()) is not None:
        out.append((item.bound, item.key, item.cand))
    return out


@pytest.mark.parametrize("case", CASES, ids=["megatron-cp", "torchtitan-cp-fp8", "no-cp"])
def test_the_family_queue_pops_as_the_class_by_class_one(case) -> None:
    (_, cands, fam), (_, _, one) = queues(case)
    if case is CASES[0]:  # CP classes with a FLOOR key: one item a family
        assert len(fam.heap) < len(one.heap) == len(cands)
        assert sum(item.key == frontier.Key.FAMILY for item in fam.heap) > len(cands) // 8
    elif case is CASES[1]:  # FP8 CP classes have a FLOOR key too (``floors.gemm_ceiling``), but not TP-overlapped ones
        assert len(fam.heap) < len(one.heap) == len(cands)
        assert any(item.key == frontier.Key.FAMILY for item in fam.heap)
        assert any(item.cand.tp_comm_overlap for item in fam.heap if item.key != frontier.Key.FAMILY)
    else:  # no CP: class by class, as before
        assert len(fam.heap) == len(one.heap) == len(cands)
    got, want = popped(fam, POPS), popped(one, POPS)
    assert len(got) == min(POPS, len(cands)) and got == want
    # what is left, lazily, by bound (``remaining``: the time limit's fallback)
    assert list(islice(fam.remaining(), 2000)) == list(islice(one.remaining(), 2000))


@pytest.mark.parametrize("case", CASES, ids=["megatron-cp", "torchtitan-cp-fp8", "no-cp"])
def test_the_probe_scans_the_family_queue_as_the_class_by_class_one(case) -> None:
    (_, _, fam), (_, _, one) = queues(case)
    for keep in (lambda c: c.pp == c.virtual_stages == 1, lambda c: c.virtual_stages > 1, lambda c: True):
        got = [(i.bound, i.key, i.cand) for i in islice(fam.by_quick_bound(keep), 300)]
        want = [(i.bound, i.key, i.cand) for i in islice(one.by_quick_bound(keep), 300)]
        assert got and got == want
