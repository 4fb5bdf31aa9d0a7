"""The large DeepSpeed cases of ``bench/bench_plan_wide.py`` (issue 26) are proven optimal, and fast.

Up to cost model 26 two of them (gpt-530b on 4,480 A100, gpt-510b on 1,024 H100) stayed unproven at the 10 s
limit: the lazy loop of one deep 1F1B class each (TP8×PP28, m = 96: 53 CP-SAT rounds, 17 s CPU; TP4×PP32,
m = 128: 39 rounds, 7.6 s CPU), with the pipeline sends priced as lags between stages. DeepSpeed's sends block
both ends (cost model 28, ``Stack.p2p_blocking``): the transfer is part of the stage's forward and backward, no
lag is left between stages, and the window and steady-state chains are exact at the first solutions (1–4 rounds).

Checked here, each against something computed apart from the search:
* every case is OPTIMAL within the default time limit, bound = objective;
* no CP-SAT class of the search needs more than ``MAX_ROUNDS`` lazy rounds (53 and 39 before: the test fails on
  the old pricing);
* the first plan's step time equals ``planner.estimate`` of its configuration (pinned, no search), and no move of
  one layer between adjacent stages that fits is faster (an independent local-optimality check of the cut).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import planner.search.uneven as uneven
from planner import estimate, plan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_plan_wide import large_cases  # noqa: E402

CASES = [(cid, body) for cid, body in large_cases() if "deepspeed" in cid]
MAX_ROUNDS = 8


@pytest.mark.parametrize("case", CASES, ids=[c[0].removeprefix("large: ") for c in CASES])
def test_large_deepspeed_case_is_proven_in_few_rounds(case, monkeypatch):
    _cid, body = case
    rounds: list[tuple[str, int]] = []
    solve = uneven.solve_class

    def counted(cc, options, **kw):
        res = solve(cc, options, **kw)
        if kw.get("fixed") is None:
            c = cc.cand
            rounds.append(
                (f"TP{c.tp}×PP{c.pp} mbs {c.micro_batch_size} {c.recompute} ZeRO-{c.zero_stage}", res.iterations)
            )
        return res

    monkeypatch.setattr(uneven, "solve_class", counted)
    resp = plan(dict(body, top_k=3))
    assert resp.solver.status == "OPTIMAL"
    assert resp.solver.best_objective_bound == pytest.approx(resp.solver.objective_value, abs=1e-9)
    assert len(resp.plans) == 3
    assert all(r <= MAX_ROUNDS for _c, r in rounds), rounds

    best = resp.plans[0]
    parallel = best.parallel.model_dump()
    again = estimate(dict(body, parallel=parallel))
    assert again.fits
    assert again.step_time_s == pytest.approx(best.estimate.step_time_s, rel=1e-12)
    cut = list(parallel["stage_layers"])
    for a in range(len(cut) - 1):
        for src, dst in ((a, a + 1), (a + 1, a)):
            if cut[src] <= 1:
                continue
            moved = list(cut)
            moved[src] -= 1
            moved[dst] += 1
            est = estimate(dict(body, parallel=dict(parallel, stage_layers=moved)))
            if est.fits:
                assert est.step_time_s >= best.estimate.step_time_s - 1e-9, (moved, est.step_time_s)
