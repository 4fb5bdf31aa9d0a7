import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"


def pytest_collection_modifyitems(config, items):
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
