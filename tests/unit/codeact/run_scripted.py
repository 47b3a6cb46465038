"""Record the scripted episodes into a run directory (a module so a test can run it in a child process and kill it).

    python -m tests.unit.codeact.run_scripted MODEL_DIR OUT [BATCH_SIZE]
"""

from __future__ import annotations

import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from sst_interp.model.sst import SSTModel
from sst_interp.record import RecordOptions, record_questions
from tests.unit.codeact.scripted import SCRIPTS, question


def scripted_args(batch_size: int = 3) -> RecordOptions:
    return RecordOptions(questions="demo", protocol="codeact", depths=[1, 2], max_new_tokens=60, batch_size=batch_size,
                      full_positions=2, sketch_positions=3, top_k=6, device="cpu", max_turns=4,
                      max_context_tokens=600, tool_output_chars=400, prompt_mode="two_pass",
                      action_tokens=(("<execute>", 120), ("</execute>", 121)))


def record_scripted(model_dir: str, out: str, batch_size: int = 3) -> dict[int, float]:
    torch.set_num_threads(1)
    backbone = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    sst = SSTModel.from_backbone(backbone)
    tok = AutoTokenizer.from_pretrained(model_dir)
    return record_questions(sst, tok, [question(s) for s in SCRIPTS], scripted_args(batch_size), out)


if __name__ == "__main__":
    record_scripted(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 3)
