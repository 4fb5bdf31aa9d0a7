"""Cost model 52: the DP gradient sync of interleaved 1F1B launched chunk by chunk (Megatron-core df72712
megatron/core/pipeline_parallel/schedules.py:534-544, :619-628, :917-926), checked against an event-by-event
computation of that launch rule: rank r's backward slots of one micro-batch each, chunk j's sync launched after
slot (its last slot) + r, the chunks never reached after the rank's last slot, the syncs one after another on one
stream; the exposed sync is when the stream ends minus when the rank's last backward ends."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from planner.compose.affine import Affine
from planner.compose.step_end import end_parts, end_terms, exposed_sync, param_gather_parts


def by_events(pp: int, v: int, groups: int, r: int, b: list[int], s: list[int]) -> int:
    """Exposed sync of rank r, by the schedule's launch rule: ``b``/``s`` per local chunk j (0-th first)."""
    total = groups * pp * v  # backward slots of the rank (micro-batches × chunks)
    group = pp * v

    def chunk(slot: int) -> int:  # get_model_chunk_id(forward=False)
        return v - 1 - (slot % group) // pp

    ends, t = [], 0
    for slot in range(total):
        t += b[chunk(slot)]
        ends.append(t)
    launch = {}
    for slot in range(total):  # is_last_microbatch_for_model_chunk(slot - r), launched after slot
        g = slot - r
        if g >= 0 and g // group == groups - 1 and (g % group) % pp == pp - 1:
            launch[chunk(g)] = ends[slot]
    stream = 0
    for j in sorted(range(v), key=lambda j: (launch.get(j, t), -j)):  # remaining ones after the last slot
        stream = max(stream, launch.get(j, t)) + s[j]
    return max(0, stream - t)


def terms(pp: int, v: int, b: int, s: int, sigma: float):
    shared = SimpleNamespace(
        sync=Affine(0, s),
        post=Affine(),
        opt=Affine(),
        hidden_bwd=Affine(0, round((1 - sigma) * b)),
        sync_slowdown=Affine(0, round(sigma * s)),
        chunk_grad_sync=True,
        tied_sync=0,
        moe_prefix=None,
        own_head=lambda c: True,
        hidden_fwd=Affine(),
        post_slowdown=Affine(),
    )
    cand = SimpleNamespace(pp=pp, virtual_stages=v, schedule="interleaved-1f1b", chunks=pp * v)
    return shared, cand


#: (pp, v, layers a chunk, backward ns a layer, sync ns a layer): syncs far below, near and above the backward
#: between two launches (pp backward slots)
CASES = [
    (8, 12, 1, 4270, 11800),  # MLPerf v3.1 GPT-3 175B: 4.3 ms a chunk backward, 11.8 ms a chunk's sync
    (8, 12, 1, 4270, 40000),  # a sync longer than pp slots: the whole sync against the backward after the 1st launch
    (4, 2, 3, 1000, 2000),
    (2, 4, 2, 1000, 5000),
    (4, 3, 1, 1000, 100),
]


@pytest.mark.parametrize("pp,v,n,b,s", CASES)
def test_exposed_sync_matches_the_launch_rule(pp: int, v: int, n: int, b: int, s: int) -> None:
    shared, cand = terms(pp, v, b, s, 0.0)
    cut = [n] * (pp * v)
    for r in range(pp):
        t = end_terms(shared, cand, cut, r)  # type: ignore[arg-type]
        want = by_events(pp, v, 3, r, [n * b] * v, [n * s] * v)
        assert exposed_sync(t) == want, (r, t)
        assert max(end_parts(t)) == want


def test_slowdown_and_non_interleaved() -> None:
    """With σ: the compute under the overlapped syncs is slowed by σ of them, chunk 0's sync is not overlapped
    (σ·sync + (1 − σ)·sync_0 when the stream keeps up); v = 1 keeps the rank's last backward as the window."""
    sigma, pp, v, b, s = 0.189, 8, 12, 4270, 11800
    shared, cand = terms(pp, v, b, s, sigma)
    t = end_terms(shared, cand, [1] * (pp * v), 0)  # type: ignore[arg-type]
    assert exposed_sync(t) == round(sigma * s) * v + (s - round(sigma * s))
    cand1 = SimpleNamespace(pp=pp, virtual_stages=1, schedule="1f1b", chunks=pp)
    t1 = end_terms(shared, cand1, [12] * pp, 0)  # type: ignore[arg-type]
    assert t1.last == 0 and t1.overlap == 12 * round((1 - sigma) * b)


def gather_by_events(pp: int, v: int, r: int, f: list[int], a: list[int]) -> int:
    """The forward's stall waiting on the ZeRO-1 all-gathers (schedules.py:510-513, :552-563): chunks 0 and 1
    launched before the first forward, chunk j ≥ 2 at forward slot (j − 1)·pp − r, one stream; chunk j's first
    forward (slot j·pp) waits for its gather. Forward slots of the first group back to back (σ = 0)."""
    stream, t, stall, done = 0, 0, 0, {}
    launches = {0: 0, 1: 0} | {j: (j - 1) * pp - r for j in range(2, v)}
    for slot in range(pp * v):
        for j in sorted(x for x, at in launches.items() if at == slot):
            stream = max(stream, t) + a[j]
            done[j] = stream
        j = slot // pp
        if slot % pp == 0 and done[j] > t:
            stall, t = stall + done[j] - t, done[j]
        t += f[j]
    return stall


@pytest.mark.parametrize("pp,v,n,f,a", [(8, 12, 1, 2180, 11800), (8, 12, 1, 2180, 30000), (4, 3, 2, 1000, 2500)])
def test_param_gather_matches_the_launch_rule(pp: int, v: int, n: int, f: int, a: int) -> None:
    shared, cand = terms(pp, v, 0, 0, 0.0)
    shared.post, shared.hidden_fwd = Affine(0, a), Affine(0, f)
    cut = [n] * (pp * v)
    for r in range(pp):
        got = max(param_gather_parts(shared, cand, cut, r, None, r == 0, False))  # type: ignore[arg-type]
        assert got == gather_by_events(pp, v, r, [n * f] * v, [n * a] * v), r
        t = end_terms(shared, cand, cut, r)  # type: ignore[arg-type]
        assert exposed_sync(t) == got and max(end_parts(t)) == got
