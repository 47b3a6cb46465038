"""A looped model transformers does not ship, for the bring-your-own tests: the toy Huginn-style model's code (in
``toy_huginn/``, written into a folder as its remote code) and its loop declaration (``huginn_loops.py``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

HERE = Path(__file__).parent
LOOP_FILE = HERE / "huginn_loops.py"
CODE = ("configuration_toy_huginn.py", "modeling_toy_huginn.py")


def save_toy_huginn(folder: Path, dtype: torch.dtype = torch.float32, seed: int = 0, **fields: int) -> Path:
    """Write the toy Huginn-style model (random weights, 1 prelude block, 2 core blocks repeated 3 times, 1 coda
    block; ``fields`` override the config's, e.g. ``n_spare=1`` for a block it never calls) with its code, an
    ``auto_map`` config and the character tokenizer into ``folder``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from sst_interp.model.testing import char_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    for name in CODE:
        shutil.copy(HERE / "toy_huginn" / name, folder / name)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "toy_huginn", "architectures": ["ToyHuginnForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_toy_huginn.ToyHuginnConfig",
                     "AutoModelForCausalLM": "modeling_toy_huginn.ToyHuginnForCausalLM"},
        "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2, **fields}))
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, trust_remote_code=True).to(dtype)
    model.save_pretrained(folder)
    char_tokenizer().save_pretrained(folder)
    return folder
