"""``pricing.memo.memo_on``: a function memoised in a dict its first argument carries, by the other arguments — each
distinct call computed once, repeats answered from that dict (the same object), other owners not shared."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from planner.pricing.memo import memo_on


@dataclass
class Owner:
    cache: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)


@memo_on("cache")
def priced(owner: Owner, a: int, b: tuple[int, int], c: int = 0) -> tuple[int, ...]:
    owner.calls.append((a, b, c))
    return (a + sum(b) + c,)


#: calls in order -> the calls that compute (the others hit), by hand
CASES = [
    ([(1, (2, 3))], [(1, (2, 3), 0)]),
    ([(1, (2, 3)), (1, (2, 3))], [(1, (2, 3), 0)]),
    ([(1, (2, 3)), (1, (3, 2)), (2, (2, 3)), (1, (2, 3))], [(1, (2, 3), 0), (1, (3, 2), 0), (2, (2, 3), 0)]),
    ([(1, (2, 3), 4), (1, (2, 3)), (1, (2, 3), 4)], [(1, (2, 3), 4), (1, (2, 3), 0)]),
]


@pytest.mark.parametrize(("calls", "computed"), CASES)
def test_each_distinct_call_computed_once(calls: list, computed: list) -> None:
    owner, other = Owner(), Owner()
    first = {}
    for args in calls:
        got = priced(owner, *args)
        assert got == (args[0] + sum(args[1]) + (args[2] if len(args) > 2 else 0),)
        assert first.setdefault(args, got) is got  # a repeat answers the stored object
    assert owner.calls == computed and len(owner.cache) == len(computed)
    priced(other, *calls[0])
    assert len(other.calls) == 1  # another owner computes its own


def test_keyword_arguments_key_apart_from_positional() -> None:
    owner = Owner()
    assert priced(owner, 1, (0, 0), c=2) == priced(owner, 1, (0, 0), c=2) == (3,)
    assert priced(owner, 1, (0, 0), 2) == (3,)
    assert owner.calls == [(1, (0, 0), 2), (1, (0, 0), 2)]  # c=2 and 2 are two keys, one value
    assert priced.__wrapped__(owner, 5, (0, 0)) == (5,) and len(owner.cache) == 2  # the function itself, not stored
