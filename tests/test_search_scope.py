"""What an unpinned search leaves out by policy (issue 26: an OPTIMAL answer says over what): the note names each part
a pin reaches and the pin, and is absent once the request pins it. The CP policies apply from
``cp_degrees.CP_FULL_GPUS`` GPUs up: the requests here have 32 GPUs unless they say otherwise. Free interleaved
classes are searched over every cut (``planner.search.uneven``): the note names them only when the search's budget
leaves some unproven (``tests/test_uneven_budget.py``)."""

from __future__ import annotations

import pytest

import planner
from planner.answer.request import context
from planner.search.scope import unsearched
from planner.search.space import enumerate_candidates
from planner.specs import PlanRequest, SearchOptions
from tests.test_planner_cli import SMALL, run

CLUSTER = {"gpu": "h100-sxm5-80gb", "num_nodes": 4, "gpus_per_node": 8}


def request(
    seq: int = 4096, stack: str = "meshplan", model: str = "llama3.1-8b", nodes: int = 4, **parallel
) -> PlanRequest:
    return PlanRequest.model_validate(
        {
            "model": model,
            "cluster": {**CLUSTER, "num_nodes": nodes},
            "training": {"global_batch_size": 64, "seq_len": seq, "stack": stack}
            | ({"precision": "fp16"} if stack == "megatron-2020" else {}),  # v2.0 has no --bf16
            "parallel": parallel,
        }
    )


@pytest.mark.parametrize(
    "req, says, not_says",
    [
        (request(), ["context parallelism"], ["interleaved"]),
        # 32 layers: pp 2 searches v 2…8 and 16 (a layer a chunk); v 9…15 a pin reaches (``space.virtual_stage_options``)
        (
            request(cp=1),
            ["interleaving deeper than 8 virtual stages other than a layer a chunk (pp 2: v 9-15)"],
            ["context parallelism", "cp degrees", "interleaved"],
        ),
        (request(cp=1, virtual_stages=4), [], ["context parallelism", "cp degrees", "interleav"]),
        (request(schedule="1f1b"), ["context parallelism"], ["interleaved"]),
        (
            request(seq=16384, nodes=4),
            ["cp degrees above 16 (fewer than 1,024 tokens per CP rank)"],
            ["context parallelism ("],
        ),
        # 16 GPUs (``CP_FULL_GPUS``): every CP degree is searched, at any length
        (
            request(nodes=2),
            ["interleaving deeper than 8 virtual stages other than a layer a chunk (pp 2: v 9-15)"],
            ["context parallelism", "cp degrees", "interleaved"],
        ),
        (
            request(seq=16384, nodes=2),
            ["interleaving deeper than 8 virtual stages other than a layer a chunk (pp 2: v 9-15)"],
            ["context parallelism", "cp degrees"],
        ),
        (
            request(seq=2048, stack="megatron-2020", model="gpt3-1.3b"),
            [],
            ["context parallelism", "cp degrees", "interleaved"],
        ),  # runs neither
        (
            request(seq=2048, stack="megatron-2021", model="gpt3-1.3b"),
            [],
            ["context parallelism", "cp degrees", "interleaved"],
        ),  # interleaves, but splits evenly only (Stack.even_stages): no uneven cut left out
        (
            request(seq=2048, stack="megatron-2022", model="gpt3-1.3b"),
            [],
            ["context parallelism", "cp degrees", "interleaved"],
        ),  # the same in 2022 (52e636888c: num_layers % pp asserted)
    ],
)
def test_the_note_names_what_the_policies_left_out(req: PlanRequest, says: list[str], not_says: list[str]) -> None:
    ctx = context(req)
    note = unsearched(ctx, req.parallel, enumerate_candidates(ctx, req.parallel, SearchOptions())) or ""
    for words in says:
        assert words in note, note
    for words in not_says:
        assert words not in note, note
    assert (note == "") == (not says)


def test_nothing_left_out_when_the_request_pins_cp_and_the_schedule() -> None:
    r = planner.plan(request(cp=1, schedule="1f1b"))
    assert r.solver.status == "OPTIMAL" and not any(n.startswith("scope:") for n in r.solver.notes)
    r = planner.plan(request())
    assert any(n.startswith("scope:") for n in r.solver.notes)


def test_the_cli_prints_the_note_beside_an_optimal_answer() -> None:
    nodes = SMALL.index("--nodes") + 1
    out = run("plan", *SMALL[:nodes], "4", *SMALL[nodes + 1 :])  # 32 GPUs: the CP policies apply
    assert out.returncode == 0, out.stderr
    assert (
        "OPTIMAL" in out.stdout
        and "scope: the search, and an OPTIMAL proof" in out.stdout
        and "Pin parallel.cp" in out.stdout
    )


def test_a_pin_reaches_the_virtual_stages_the_note_names() -> None:
    """v = 12 on pp 2 (of 32 layers), named by the free answer's note, is planned when pinned."""
    r = planner.plan(request(cp=1, pp=2, schedule="interleaved-1f1b", virtual_stages=12))
    assert r.plans and r.plans[0].parallel.virtual_stages == 12, r.solver.notes
