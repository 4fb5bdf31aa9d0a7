"""``search.prescreen``: ``quick_may_fit`` with its first pass at each rank's heaviest peak gives the same verdict
as the full screen alone, class by class (interleaved and 1F1B/GPipe classes with several peaks, dense and MoE)."""

from __future__ import annotations

import pytest

import planner.search.screens as screens
from planner.answer.request import context
from planner.search.space import enumerate_candidates
from planner.specs import PlanRequest

REQUESTS = [
    ("llama3-70b", "h100-sxm5-80gb", 8, 8, 1024, 8192, {}),
    ("llama3-8b", "h100-sxm5-80gb", 1, 8, 256, 8192, {"stack": "torchtitan"}),
    ("mixtral-8x22b", "h100-sxm5-80gb", 16, 8, 256, 4096, {"stack": "megatron"}),
]


@pytest.mark.parametrize("spec", REQUESTS, ids=lambda s: s[0])
def test_prescreen_same_verdict(spec: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    model, gpu, nodes, gpn, gbs, seq, extra = spec
    req = PlanRequest.model_validate(
        {
            "model": model,
            "cluster": {"gpu": gpu, "num_nodes": nodes, "gpus_per_node": gpn},
            "training": {"global_batch_size": gbs, "seq_len": seq, **extra},
        }
    )
    ctx = context(req)
    cands = [c for c in enumerate_candidates(ctx, req.parallel, req.options) if c.pp > 1][::3]
    with_pre = [screens._quick_may_fit(ctx, c, None) for c in cands]
    monkeypatch.setattr(screens, "heaviest", lambda ctx, live, done, key: (live, done))  # the full screen twice
    without = [screens._quick_may_fit(ctx, c, None) for c in cands]
    assert with_pre == without
    assert 0 < sum(with_pre) < len(cands)  # both verdicts occur


def test_heaviest_peaks_live_on_the_request_context() -> None:
    """The heaviest peaks are memoised on the request's ``Context`` (``top_peaks``), not in the process: a new
    request's context starts empty, and the module keeps no cache of its own."""
    import planner.search.prescreen as prescreen

    def ctx_of() -> object:
        req = PlanRequest.model_validate(
            {
                "model": "llama3-70b",
                "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 8, "gpus_per_node": 8},
                "training": {"global_batch_size": 1024, "seq_len": 8192},
            }
        )
        return context(req), req

    ctx, req = ctx_of()
    for c in [c for c in enumerate_candidates(ctx, req.parallel, req.options) if c.virtual_stages > 1][:200]:
        screens.quick_may_fit(ctx, c)
    assert ctx.top_peaks  # type: ignore[attr-defined]
    assert not ctx_of()[0].top_peaks  # type: ignore[attr-defined]
    assert not [k for k, v in vars(prescreen).items() if isinstance(v, dict) and not k.startswith("__")]
