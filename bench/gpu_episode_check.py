"""CodeACT episodes on a CUDA device: the same scripted episodes on the GPU (float32 and bfloat16) as on the CPU.

Run from the repository root on a CUDA machine: ``PYTHONPATH=. python bench/gpu_episode_check.py [--sandbox
subprocess]``. It trains the tests' scripted tiny Gemma 3 (tests/unit/codeact/scripted.py) on the CPU, then runs
the three scripted episodes in one batch at depths 1 and 2 with the recorder attached, on the CPU (float32) and on
the GPU (float32, bfloat16), and prints per configuration: whether every turn's tokens equal the CPU's, the stop
reasons, and the largest position-0 logit difference from the CPU run. ``bench/gpu_check.py`` runs the same
comparison as one row of its checklist (:func:`compare_with_cpu`).
"""

from __future__ import annotations

import argparse
import copy
from dataclasses import dataclass

import torch

from sst_interp.codeact.episode import run_episodes
from sst_interp.hooks import RecordConfig, Recorder
from sst_interp.model.generation import GenerationConfig
from sst_interp.model.sst import SSTModel
from sst_interp.sandbox import SandboxConfig, check_backend
from tests.unit.codeact.scripted import EPISODE_CONFIG, SCRIPTS, question, train_scripted_backbone


class Position0:
    def __init__(self):
        self.logits = {}

    def on_pass_start(self, info):
        pass

    def on_pass_end(self, info, logits):
        if info.position == 0 and logits is not None:
            self.logits[(info.turn, info.iteration)] = logits.float().cpu()

    def on_token(self, position, token_ids, active):
        pass


@dataclass(frozen=True)
class EpisodeComparison:
    """One configuration's episodes against the CPU float32 reference.

    Args:
        depth: iteration depth.
        dtype: ``float32`` or ``bfloat16``.
        tokens_equal: every turn's tokens of every episode equal the CPU's.
        stops: the episodes' stop reasons.
        max_logit_diff: largest |logit - CPU logit| at position 0 over the turns both runs have.
        hidden: shape, dtype and device of the recorded hidden states, as text.
    """

    depth: int
    dtype: str
    tokens_equal: bool
    stops: list[str]
    max_logit_diff: float
    hidden: str


def run(backbone, tok, device: str, dtype: torch.dtype, depth: int, sandbox: SandboxConfig):
    sst = SSTModel.from_backbone(copy.deepcopy(backbone).to(device=device, dtype=dtype))
    for module in sst.state_modules().values():
        module.float()  # the SST parameters stay float32, as in checkpoints
    observer = Position0()
    config = GenerationConfig(max_new_tokens=60, eos_token_ids=(1,), pad_token_id=0, logits_every_iteration=True)
    ids = [s.question_id for s in SCRIPTS]
    with Recorder.for_model(sst, ids, RecordConfig(full_positions=2, sketch_positions=2, top_k=5,
                                                   dtype="bfloat16" if dtype == torch.bfloat16 else "float32")) as rec:
        # The recorder observes; Position0 is read from its own run below.
        batch = run_episodes(sst, tok, [question(s).prompt for s in SCRIPTS], depth, config, EPISODE_CONFIG,
                             sandbox, observer=rec)
    run_episodes(sst, tok, [question(s).prompt for s in SCRIPTS], depth, config, EPISODE_CONFIG, sandbox,
                 observer=observer)
    return batch, observer, rec.columns()


def compare_with_cpu(device: str, sandbox: SandboxConfig, steps: int = 400,
                     depths: tuple[int, ...] = (1, 2)) -> tuple[float, list[EpisodeComparison]]:
    """Train the scripted model on the CPU (``steps`` at most), run its episodes on ``device`` in float32 and
    bfloat16 and compare each with the CPU float32 run. Returns (training loss, one comparison per depth x dtype).
    """
    check_backend(sandbox)
    backbone, tok, loss = train_scripted_backbone(sandbox, steps=steps)
    comparisons = []
    for depth in depths:
        reference, ref_logits, _ = run(backbone, tok, "cpu", torch.float32, depth, sandbox)
        ref_tokens = [[t.token_ids for t in e.turns] for e in reference.episodes]
        for dtype in (torch.float32, torch.bfloat16):
            batch, logits, columns = run(backbone, tok, device, dtype, depth, sandbox)
            tokens = [[t.token_ids for t in e.turns] for e in batch.episodes]
            diff = max((logits.logits[k] - ref_logits.logits[k]).abs().max().item()
                       for k in ref_logits.logits if k in logits.logits)
            hidden = columns["hidden"]["values"]
            comparisons.append(EpisodeComparison(
                depth=depth, dtype=str(dtype).split(".")[-1], tokens_equal=tokens == ref_tokens,
                stops=[e.stop_reason for e in batch.episodes], max_logit_diff=diff,
                hidden=f"{tuple(hidden.shape)} {hidden.dtype} on {hidden.device}"))
    return loss, comparisons


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandbox", default="bwrap", choices=("bwrap", "subprocess"))
    args = parser.parse_args()
    loss, comparisons = compare_with_cpu("cuda", SandboxConfig(backend=args.sandbox))
    print(f"scripted model trained on the CPU, loss {loss:.4f}; cuda: {torch.cuda.get_device_name(0)}")
    for row in comparisons:
        print(f"depth {row.depth} cuda {row.dtype:>8}: tokens equal to cpu: {row.tokens_equal}; stops {row.stops}; "
              f"max |logit - cpu| at position 0: {row.max_logit_diff:.2e}; recorded hidden {row.hidden}")


if __name__ == "__main__":
    main()
