"""``bench/mpt_scale.growth``: a series' unpriced-gap and priced-communication growth against its smallest-n row,
checked against hand arithmetic (table of cases)."""

from __future__ import annotations

import pytest

from bench.mpt_scale import growth


def _row(series: str, gpus: int, ga: int, micro: int, measured: float, physics: float, comm: float) -> dict:
    return {"series": series, "gpus": gpus, "ga": ga, "micro": micro, "measured_s": measured, "physics_s": physics,
            "dp_comm_s": comm}  # fmt: skip


# (rows, expected [(gpus, gap growth per micro-batch, comm growth per micro-batch)]), worked by hand:
# base gap 0.1 on a 1.0 s step (10 %); a 2.0 s step at 10 % would be 2.2 s, measured 2.5: +0.3 s; comm 0.5 − 0.2
CASES = [
    (
        [_row("a", 8, 1, 4, 1.1, 1.0, 0.2), _row("a", 16, 1, 4, 2.5, 2.0, 0.5)],
        [(16, 0.3, 0.3)],
    ),
    # GA 2: per micro-batch halves; 1.2 − 1.0 − 0.0·1.0 = 0.2 → 0.1; comm (0.3 − 0.1) / 2 = 0.1
    (
        [_row("b", 16, 2, 2, 2.0, 2.0, 0.1), _row("b", 32, 2, 2, 1.2, 1.0, 0.3)],
        [(32, 0.1, 0.1)],
    ),
    # a different micro-batch is another series: nothing to compare
    ([_row("c", 8, 1, 4, 1.1, 1.0, 0.2), _row("c", 16, 1, 8, 2.5, 2.0, 0.5)], []),
]


@pytest.mark.parametrize(("rows", "expected"), CASES)
def test_growth(rows: list[dict], expected: list[tuple[int, float, float]]) -> None:
    got = [(n, gap, comm) for _, _, n, gap, comm in growth(rows)]
    assert len(got) == len(expected)
    for (n, gap, comm), (n_e, gap_e, comm_e) in zip(got, expected):
        assert n == n_e
        assert gap == pytest.approx(gap_e)
        assert comm == pytest.approx(comm_e)
