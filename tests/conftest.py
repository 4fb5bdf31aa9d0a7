import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"


#: The longest files (multi-process launches, servers), run first: with `make test`'s two workers
#: (pytest-xdist, one file per worker at a time) a long file started last would run alone at the end.
LONG_FILES = (
    "test_runtime_equivalence.py",
    "test_runtime_cli.py",
    "test_dashboard.py",
    "test_api_postgres.py",
    "test_profiler_cluster.py",
    "test_consumers.py",
)


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: LONG_FILES.index(item.path.name) if item.path.name in LONG_FILES else len(LONG_FILES))
    if shutil.which("chromium") or os.environ.get("MESHPLAN_REQUIRE_BROWSER"):
        return
    skip = pytest.mark.skip(reason="Debian chromium not installed (apt-get install chromium); CI installs it")
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
