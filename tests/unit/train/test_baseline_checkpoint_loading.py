"""A matched-baseline checkpoint (train --baseline) loads for recording as an SST without a state stream."""

import torch

from sst_interp.model import GenerationConfig, generate
from sst_interp.model.loading import ModelSpec, build_sst
from sst_interp.train import Trainer
from sst_interp.model.baseline_checkpoint import load_baseline_checkpoint

from .conftest import chat_tokenizer, tiny_backbone, tiny_config


def test_baseline_checkpoint_records_as_the_fine_tuned_backbone(tmp_path):
    config = tiny_config(tmp_path, baseline=True, max_steps=2, lr_lora=3e-2, warmup_steps=0)
    Trainer(config, backbone=tiny_backbone(), tokenizer=chat_tokenizer(), backbone_id="tiny",
            progress=False).run()
    folder = tmp_path / "tiny-model"
    tiny_backbone().save_pretrained(folder)
    chat_tokenizer().save_pretrained(folder)
    checkpoint = tmp_path / "run" / "last"

    sst, tokenizer = build_sst(ModelSpec(model=str(folder), checkpoint=str(checkpoint), dtype="float64"))
    assert sst.state_parameters() == []
    reference = load_baseline_checkpoint(tiny_backbone(), checkpoint)
    untrained = tiny_backbone()
    ids = torch.tensor([tokenizer("3+4?").input_ids])
    with torch.no_grad():
        got = sst.lm_logits(sst.decoder_forward(input_ids=ids))
        # 1e-6, not 1e-12: the in-memory tiny model computed its rotary frequencies in float32 before its cast to
        # float64, while from_pretrained builds them in float64.
        assert (got - reference(ids).logits).abs().max() < 1e-6
        assert (got - untrained(ids).logits).abs().max() > 1e-4  # the adapter was applied
    prompt = [tokenizer("3+4?").input_ids]
    config = GenerationConfig(max_new_tokens=6)
    assert generate(sst, prompt, 3, config).token_ids == generate(sst, prompt, 1, config).token_ids
