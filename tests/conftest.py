import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# a statistic a backend reports without declaring it fails the test that meets it (solvers.stats); the CLI tests'
# subprocesses inherit it
os.environ["TACOS_STRICT_STATS"] = "1"


@pytest.fixture
def root() -> Path:
    return ROOT
