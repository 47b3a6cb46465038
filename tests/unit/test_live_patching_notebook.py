"""examples/live_patching.ipynb (the ~10-line live cross-prompt patching sweep) executed headless with a real kernel
on a tiny model: every printed (layer, iteration) logit difference equals the one computed here independently, one
generation per cell, patching from a recorded run of the clean prompt (float32: the recorded states are exact)."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from sst_interp.model import GenerationConfig, SSTConfig, SSTModel, generate, load_backbone
from tests.unit.conftest import save_tiny_model
from tests.unit.notebooks import executed_code_cells, output_text

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "live_patching.ipynb"
DEPTH = 3


class _Logits:
    """Observer: the logits of position 0's last iteration, [V]."""

    def __init__(self) -> None:
        self.logits: torch.Tensor | None = None

    def on_pass_start(self, info) -> None:
        pass

    def on_pass_end(self, info, logits) -> None:
        if info.position == 0 and info.iteration == DEPTH:
            self.logits = logits[0].clone()

    def on_token(self, position, token_ids, active) -> None:
        pass


def _record(sst: SSTModel, prompt: list[int], folder: Path) -> torch.Tensor:
    """Record ``prompt`` alone as question "clean" (position 0 in full) into the run ``folder``; its position-0
    last-iteration logits [V]."""
    from sst_interp.hooks import RecordConfig, Recorder
    from sst_interp.model.observers import ObserverGroup
    from sst_interp.store import RunWriter

    observer = _Logits()
    with Recorder.for_model(sst, ["clean"], RecordConfig(full_positions=1, sketch_positions=0, top_k=4)) as recorder:
        generate(sst, [prompt], DEPTH, GenerationConfig(max_new_tokens=1), observer=ObserverGroup(observer, recorder))
    extra = {"hidden_size": sst.hidden_size, "num_layers": sst.num_layers, "dtype": "float32", "top_k": 4,
             "full_positions": 1, "sketch_positions": 0, "protocol": "completion", "prompt_mode": "two_pass",
             "depths": [DEPTH]}
    with RunWriter.create_or_resume(folder, {"test": "live notebook"}, extra) as writer:
        writer.submit(DEPTH, ["clean"], **recorder.columns())
    return observer.logits


def _run(sst: SSTModel, prompt: list[int], patch: tuple[Path, int, int] | None = None) -> torch.Tensor:
    """Position 0's last-iteration logits [V] of ``prompt`` alone, patched (when ``patch`` = (run, layer,
    iteration)) from the recorded run's state at that site: the recorded-run path, not the live one."""
    from sst_interp.interventions import InterventionSpec, Operation, Site, intervene

    observer = _Logits()
    if patch is None:
        generate(sst, [prompt], DEPTH, GenerationConfig(max_new_tokens=1), observer=observer)
        return observer.logits
    run, layer, iteration = patch
    spec = InterventionSpec.of(Site("layer_out", layers=layer, positions=0, iterations=iteration),
                               Operation("patch", run=str(run)))
    from sst_interp.model.observers import ObserverGroup

    with intervene(sst, spec, ["clean"]) as intervener:
        generate(sst, [prompt], DEPTH, GenerationConfig(max_new_tokens=1),
                 observer=ObserverGroup(intervener, observer))
    return observer.logits


def test_the_live_patching_notebook_prints_the_sweep_computed_independently(tmp_path, monkeypatch):
    model = save_tiny_model(tmp_path / "model", seed=1)  # a seed whose two prompts answer differently
    for key, value in (("SST_INTERP_MODEL", model), ("OMP_NUM_THREADS", "1")):
        monkeypatch.setenv(key, str(value))
    code = executed_code_cells(NOTEBOOK, tmp_path)
    printed = {(int(l), int(i)): float(d)
               for l, i, d in re.findall(r"layer (\d+) iteration (\d+): ([-+]\d+\.\d+)", output_text(code[1]))}
    ends = re.search(r"corrupted: ([-+]\d+\.\d+)  clean: ([-+]\d+\.\d+)", output_text(code[1]))

    backbone, tokenizer = load_backbone(str(model))
    sst = SSTModel.from_backbone(backbone, SSTConfig())
    clean, corrupt = (tokenizer(text)["input_ids"] for text in ("The capital of France is", "The capital of Greece is"))
    clean_logits = _record(sst, clean, tmp_path / "clean")
    corrupt_logits = _run(sst, corrupt)
    a, b = int(clean_logits.argmax()), int(corrupt_logits.argmax())
    assert a != b  # the two prompts answer differently, so the sweep measures something
    assert len(printed) == sst.num_layers * DEPTH
    for (layer, iteration), value in printed.items():
        logits = _run(sst, corrupt, patch=(tmp_path / "clean", layer, iteration))
        assert abs(value - float(logits[a] - logits[b])) < 1e-4, (layer, iteration)
    assert abs(float(ends.group(1)) - float(corrupt_logits[a] - corrupt_logits[b])) < 1e-4
    assert abs(float(ends.group(2)) - float(clean_logits[a] - clean_logits[b])) < 1e-4
    # the last layer at the last iteration hands the clean final state to the LM head: the clean difference
    assert printed[(sst.num_layers - 1, DEPTH)] == float(ends.group(2))
    assert "logit_diff" in output_text(code[2]) or "iteration" in output_text(code[2])  # the heat map's table
