"""The --model argument: local HF folders load; bad paths are one-line usage errors; depth lists parse strictly."""

import pytest
import torch

from sst_interp.kernels.errors import UsageError
from sst_interp.model.backbone import load_backbone, parse_dtype
from sst_interp.model.loading import ModelSpec, build_sst, check_depths
from sst_interp.model.testing import char_tokenizer, tiny_llama


def test_local_folder_loads_with_its_tokenizer(tmp_path):
    model = tiny_llama(dtype=torch.float32)
    model.save_pretrained(tmp_path / "tiny")
    char_tokenizer().save_pretrained(tmp_path / "tiny")
    loaded, tokenizer = load_backbone(str(tmp_path / "tiny"))
    ids = torch.tensor([tokenizer("abc").input_ids])
    assert torch.equal(loaded(ids).logits, model(ids).logits)
    sst, _ = build_sst(ModelSpec(model=str(tmp_path / "tiny")))
    assert sst.config.state_scale == "unit"  # the paper's variant unless the demo preset applies


@pytest.mark.parametrize("model, message", [
    ("missing.gguf", "GGUF file not found"),
    ("no/such/hub-repo-offline", "could not load model"),
])
def test_bad_model_arguments_are_usage_errors(model, message):
    with pytest.raises(UsageError, match=message):
        load_backbone(model)


def test_folder_without_config_is_refused(tmp_path):
    with pytest.raises(UsageError, match="not a Hugging Face model folder"):
        load_backbone(str(tmp_path))


@pytest.mark.parametrize("depths", [[1, 2, 3, 4], [3], (2, 5)])
def test_depth_lists_pass_the_check(depths):
    assert check_depths(depths) == list(depths)


@pytest.mark.parametrize("depths", [[0], [1, 0], ["1"], [], [1, 1], [-1], [True], [1.5]])
def test_invalid_depth_lists_are_refused(depths):
    with pytest.raises(UsageError, match="depth"):
        check_depths(depths)


def test_unknown_dtype():
    with pytest.raises(UsageError, match="unknown dtype"):
        parse_dtype("int8")
