import pytest

from sst_interp.model.loading import ModelSpec, build_sst


@pytest.fixture(scope="session")
def default_sst():
    """The embedded default backbone as an untrained SST (demo preset), loaded once per test session."""
    return build_sst(ModelSpec())
