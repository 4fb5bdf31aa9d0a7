"""The search over configuration classes and stage cuts: the space, lower bounds, chains, the CP-SAT cut
solver, the best-first driver and the brute-force reference. It sees ``planner.compose``'s integers and
affine forms."""

from planner.search.driver import SearchResult, search

__all__ = ["SearchResult", "search"]
