from __future__ import annotations

import pytest

from tests.packaging.wheels import Wheels, build_wheels


@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Wheels:
    """Both wheels, built once per session from a copy of the checkout."""
    return build_wheels(tmp_path_factory.mktemp("wheels"))
