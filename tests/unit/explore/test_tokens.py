"""Which tokenizer the explorer reads for a run: the default backbone's cache (under the identity string record
writes), a local model folder, or none."""

from __future__ import annotations

import shutil

from sst_interp.explore.tokens import TokenText, tokenizer_file
from sst_interp.model.cache import DEFAULT_BACKBONE_ID, default_backbone_dir
from sst_interp.model.testing import char_tokenizer


def test_the_default_backbone_and_a_local_folder_resolve_to_their_tokenizer(tmp_path, monkeypatch):
    folder = tmp_path / "model"
    char_tokenizer().save_pretrained(folder)
    cache = tmp_path / "cache"
    monkeypatch.setenv("SST_INTERP_CACHE", str(cache))

    default_backbone_dir().mkdir(parents=True)
    shutil.copy(folder / "tokenizer.json", default_backbone_dir() / "tokenizer.json")
    for model in ("default", DEFAULT_BACKBONE_ID):
        assert tokenizer_file({"identity": {"model": model}}) == default_backbone_dir() / "tokenizer.json"
    assert tokenizer_file({"identity": {"model": str(folder)}}) == folder / "tokenizer.json"
    assert tokenizer_file({"identity": {"model": "synthetic"}}) is None
    text = TokenText({"identity": {"model": str(folder)}}).start()
    ids = char_tokenizer()("ab").input_ids
    from tokenizers import Tokenizer

    assert text.pieces(ids) == [Tokenizer.from_file(str(folder / "tokenizer.json")).id_to_token(i) for i in ids]
    assert TokenText({"identity": {"model": "synthetic"}}).start().pieces([7, -1]) == ["\u27e87\u27e9", "\u2205"]
