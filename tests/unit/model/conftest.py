import pytest
import torch

from sst_interp.model import SSTConfig, SSTModel
from sst_interp.model.testing import char_tokenizer
from tests.unit.conftest import tiny_backbone


@pytest.fixture(scope="session")
def tokenizer():
    return char_tokenizer()


def make_sst(family: str, dtype=torch.float64, **config) -> SSTModel:
    """A tiny SST; ``state_scale='hidden'`` by default so iterations visibly move a random model."""
    config.setdefault("state_scale", "hidden")
    return SSTModel.from_backbone(tiny_backbone(family, dtype=dtype), SSTConfig(**config))
