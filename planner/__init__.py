"""meshplan's core: specs, catalogs, cost model and search. Imports none of meshplan's other packages.

``planner.plan``, ``planner.estimate`` and ``planner.estimate_plan`` load lazily, so importing
``planner.specs`` stays light."""

__all__ = ["plan", "estimate", "estimate_plan"]


def __getattr__(name: str):
    if name in __all__:
        from planner import api

        return getattr(api, name)
    raise AttributeError(f"module 'planner' has no attribute {name!r}")
