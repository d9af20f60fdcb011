import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# numba caches compiled kernels next to the sources; keep CI reproducible and quiet.
os.environ.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".numba_cache"))


@pytest.fixture
def root() -> Path:
    return ROOT
