"""Built-in residual constants per (stack preset, GPU generation). Written by ``python bench/fit_residuals.py``;
empty until it runs."""

from __future__ import annotations

from typing import Any

ROWS: dict[tuple[str, str], dict[str, float]] = {}
FITS: dict[tuple[str, str], dict[str, Any]] = {}
