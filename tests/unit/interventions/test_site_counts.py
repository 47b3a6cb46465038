"""Every intervened generation counts the (row, position, iteration, layer) sites each rule changed (issue 30,
defect 4); record keeps the counts in each batch's manifest entry and refuses, before anything is written, a spec
with a rule that changed nothing in the first batch, unless --allow-empty-sites."""

from __future__ import annotations

import pytest
import torch

from sst_interp.cli.record import main
from sst_interp.interventions import Intervention, InterventionSpec, Operation, Site, intervene, run_site_counts
from sst_interp.model import GenerationConfig, SSTConfig, SSTModel, generate
from sst_interp.model.testing import tiny_gemma3
from sst_interp.store import Run
from tests.unit.conftest import FAST, fails_with_one_error_line, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPTS = [[2, 5, 6, 7, 8, 9], [2, 11, 12, 13, 14, 15]]


def counts(spec: InterventionSpec, depth: int = 2, mode: str = "two_pass", layers=(0, 2)) -> list[int]:
    sst = SSTModel.from_backbone(tiny_gemma3(dtype=torch.float64, seed=1),
                                 SSTConfig(state_scale="hidden", layers=list(layers)))
    with intervene(sst, spec) as intervener:
        generate(sst, PROMPTS, depth, GenerationConfig(max_new_tokens=4, prompt_mode=mode), observer=intervener)
    return intervener.site_counts


def rule(stream: str, kind: str, **site) -> Intervention:
    operation = Operation(kind, value=0.0) if kind == "set_alpha" else Operation(kind)
    return Intervention(Site(stream, **site), operation)


def test_each_rule_counts_the_rows_positions_iterations_and_layers_it_changed():
    spec = InterventionSpec((
        rule("layer_out", "zero", layers=[1], positions=[0, 2], iterations=[2]),  # 2 rows x 2 positions x 1 x 1
        rule("state_in", "zero", layers=[0, 2], iterations=[1, 2]),  # 2 rows x 4 positions x 2 iterations x 2
        rule("layer_out", "freeze", layers=[0], positions=[1]),  # 2 rows x 1 x 2 iterations x 1
    ))
    assert counts(spec) == [4, 32, 4]


@pytest.mark.parametrize("item", [
    rule("layer_out", "zero", iterations=[3]),  # beyond depth 2
    rule("state_in", "zero", layers=[1]),  # layer 1 has no state stream
    rule("alpha", "set_alpha", layers=[1]),
    rule("layer_out", "freeze", layers=[1]),  # nothing carried to freeze
    rule("layer_out", "zero", positions=[9]),  # beyond max_new_tokens
], ids=["iteration-beyond-depth", "state_in-of-stateless", "alpha-of-stateless", "freeze-of-stateless",
        "position-beyond-tokens"])
def test_a_rule_whose_sites_never_fire_counts_zero(item):
    assert counts(InterventionSpec((rule("layer_out", "zero", layers=[0], positions=[0]), item))) == [
        4, 0]  # position 0 at iterations 1 and 2, 2 rows


def test_set_alpha_where_the_stream_is_off_counts_zero():
    # prompt mode none: position 0, iteration 1 runs with the stream off, so alpha is never read there
    assert counts(InterventionSpec((rule("alpha", "set_alpha", positions=[0], iterations=[1]),)), mode="none") == [0]


def _argv(model, out, *extra):
    return FAST + ["--model", str(model), "--out", str(out), "--depths", "2", "--limit", "3", "--batch-size", "2",
                   "--demo-preset", *extra]


def test_record_refuses_a_rule_that_touched_nothing_before_writing_and_keeps_the_counts(tmp_path, capsys):
    model = save_tiny_model(tmp_path / "model")
    spec = tmp_path / "spec.yaml"
    spec.write_text("interventions:\n  - site: {stream: layer_out, iterations: [2], positions: [0]}\n"
                    "    operation: {kind: zero}\n  - site: {stream: layer_out, iterations: [5]}\n"
                    "    operation: {kind: zero}\n")
    fails_with_one_error_line(capsys, main, _argv(model, tmp_path / "out", "--intervention", str(spec)),
                              "rule 2 (zero on layer_out) changed no (row, position, iteration, layer) site")
    assert not (tmp_path / "out").exists()
    main(_argv(model, tmp_path / "out", "--intervention", str(spec), "--allow-empty-sites"))
    manifest = Run.open(tmp_path / "out").manifest
    # 3 questions, position 0 at iteration 2, in every layer (3): 9 sites; the second rule none
    assert [row["sites"] for row in run_site_counts(manifest)] == [9, 0]
    assert [len(entry["intervention_sites"]) for entry in manifest["batches"]["2"]] == [2, 2]
