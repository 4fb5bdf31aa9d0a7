"""Measures what the planner prices: per-layer costs of the model zoo (``profiler.model_profile``)
and the network (``profiler.cluster``). PyTorch is imported only by those modules, not here."""
