"""``needs_spu``: skip a test where SecretFlow SPU's own environment is missing."""

from __future__ import annotations

import pytest

from islands.errors import ValidationError
from islands.psi.spu_engine import SPU_PYTHON_ENV, spu_python


def _spu_available() -> bool:
    try:
        spu_python()
    except ValidationError:
        return False
    return True


needs_spu = pytest.mark.skipif(
    not _spu_available(),
    reason="SecretFlow SPU's environment is missing: `make spu` builds .venv-spu (Python "
           f"3.10/3.11), or set {SPU_PYTHON_ENV}")
