"""``memo_on``: a pricing function memoised on the object it prices for (a ``Context``, a ``Device``) in a dict that
object carries, by the function's other arguments — the search asks the same question of many shared keys (a MoE
model's classes of one (tp, dp, ep, etp) repeat the same layers), and the cache lives and dies with the request's
context rather than a process-wide ``lru_cache``. The values are shared between callers: immutable ones only."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, Concatenate, ParamSpec, TypeVar

C = TypeVar("C")
P = ParamSpec("P")
R = TypeVar("R")


def memo_on(cache: str) -> Callable[[Callable[Concatenate[C, P], R]], Callable[Concatenate[C, P], R]]:
    """``f(ctx, *args)`` memoised in the dict ``ctx.<cache>`` by ``args`` (keyword arguments too, after them)."""

    def wrap(f: Callable[Concatenate[C, P], R]) -> Callable[Concatenate[C, P], R]:
        @wraps(f)
        def memoised(ctx: C, /, *args: P.args, **kwargs: P.kwargs) -> R:
            key = (args, tuple(sorted(kwargs.items()))) if kwargs else args
            store: dict[Any, R] = getattr(ctx, cache)
            hit = store.get(key)
            if hit is None:
                hit = store[key] = f(ctx, *args, **kwargs)
            return hit

        return memoised

    return wrap
