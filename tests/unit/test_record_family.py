"""``record --model <tiny HRM-Text or Inkling-2 Loop folder> --depths 1,2`` then ``report --run``: the family's run
directory, addressed by (turn, position, iteration, layer) with the manifest naming the family and its loop, read by
the same reader and report as an SST run; and the family's refusals (one ``error:`` line, exit 2, nothing
written)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from sst_interp.cli.record import main as record_main
from sst_interp.store import Run
from tests.unit.conftest import FAMILY_ARTEFACTS, FAST, fails_with_one_error_line, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


#: per family: the manifest's depth key, a phrase of its lens and carry, how often each layer runs at depths 1 and 2
EXPECTED = {
    "hrm_text": ("H_cycles", "z_H", "z_L", [1] * 6, [2] * 6),
    "inkling2_loop": ("loop_num_passes", "looped block", "messages", [1] * 6, [1, 1, 2, 2, 1, 1]),
    "dory": ("n_recurrent_loops", "looped block", "input section", [1] * 6, [1, 1, 2, 2, 1, 1]),
}


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def family(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def family_folder(family: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp(family) / "model", family)


@pytest.fixture(scope="module")
def family_run(family_folder: Path, family: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / family
    torch.set_num_threads(1)
    assert record_main([*FAST, "--model", str(family_folder), "--depths", "1,2", "--limit", "2",
                        "--out", str(out)]) == 0
    return out


def test_family_record_writes_a_run_addressed_by_iteration_and_layer(family_run: Path, family: str) -> None:
    run = Run.open(family_run)
    manifest = run.manifest
    key, lens, carries, once, twice = EXPECTED[family]
    assert manifest["family"] == family and run.depths == [1, 2]
    loop = manifest["loop"]
    assert loop["depth_key"] == key and lens in loop["lens"] and carries in loop["carries"]
    assert loop["iterations_per_layer"] == {"1": once, "2": twice}
    assert run.num_layers == 6 and manifest["hidden_size"] == 32
    for depth in (1, 2):
        blocks = list(run.hidden(depth))
        assert len(blocks) == 2
        for block in blocks:
            # FAST records 2 full positions; a layer is NaN exactly at the iterations the family does not visit it
            assert block.values.shape == (2, depth, 6, 32)
            visited = np.array([[iteration <= loop["iterations_per_layer"][str(depth)][layer]
                                 for layer in range(6)] for iteration in range(1, depth + 1)])
            assert (np.isnan(block.values).all(axis=(0, 3)) == ~visited).all()
            assert not np.isnan(block.values[:, visited]).any()
        logits = list(run.logits(depth))
        assert all(block.entropy.shape[1] == depth for block in logits)
    gens = run.generations()
    assert set(gens["depth"]) == {1, 2} and (gens["n_tokens"] > 0).all()


def test_family_record_then_report_writes_artefacts(family_run: Path, tmp_path: Path) -> None:
    from sst_interp.cli.report import main as report_main

    out = tmp_path / "report"
    assert report_main(["--run", str(family_run), "--out", str(out)]) == 0
    assert (out / "index.html").is_file()
    assert (out / "tab_staged_breakdown.csv").is_file() or any(out.glob("tab_staged_breakdown*"))
    # the family's own artefacts (state and capacity per iteration, convergence), read from its loop
    for name in FAMILY_ARTEFACTS:
        assert any(out.glob(f"{name}.*")), name


def test_family_rerun_resumes_without_recording_again(family_folder: Path, family_run: Path, capsys) -> None:
    before = json.loads((family_run / "manifest.json").read_text())["status"]
    assert record_main([*FAST, "--model", str(family_folder), "--depths", "1,2", "--limit", "2",
                        "--out", str(family_run)]) == 0
    assert "4 of 4 question-depths already recorded" in capsys.readouterr().out
    assert json.loads((family_run / "manifest.json").read_text())["status"] == before


def test_hrm_unsupported_model_type_folder_is_one_error_line(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "gpt2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    out = tmp_path / "out"
    fails_with_one_error_line(capsys, record_main, [*FAST, "--model", str(folder), "--out", str(out)],
                              "unsupported model_type 'gpt2'; supported families: sst")
    assert not out.exists()


@pytest.mark.parametrize("flags, phrase", [
    (["--checkpoint", "demo-codeact"], "--checkpoint loads an SST checkpoint; hrm_text has none"),
    (["--prompt-mode", "two_pass"], "hrm_text has none"),
    (["--depth-policy", "kl:0.01"], "hrm_text runs are recorded at fixed depths only"),
])
def test_hrm_flags_the_family_cannot_honour_are_one_error_line(tmp_path: Path, capsys, flags: list[str],
                                                               phrase: str) -> None:
    folder = save_tiny_model(tmp_path / "hrm", "hrm_text")
    out = tmp_path / "out"
    fails_with_one_error_line(capsys, record_main, [*FAST, "--model", str(folder), "--depths", "1,2",
                                                    *flags, "--out", str(out)], phrase)
    assert not out.exists()


def test_family_cross_family_profiles_read_the_declared_state_layer(family_run: Path, tmp_path: Path) -> None:
    from sst_interp.analyses.families import capacity_profile, state_profile
    from sst_interp.cli.report import main as report_main

    run = Run.open(family_run)
    layer = run.manifest["loop"]["state_layer"]
    assert layer == {"hrm_text": 5, "inkling2_loop": 3, "dory": 3}[run.manifest["family"]]
    profile = state_profile(run, "r")
    # by hand: relative L2 change of the state layer from iteration 1 to 2, over every recorded full position
    changes = [np.linalg.norm(s[1] - s[0]) / np.linalg.norm(s[0])
               for block in run.hidden(2, layers=[layer]) for s in block.values[:, :, 0].astype(np.float64)]
    assert profile["iteration"].tolist() == [2] and profile["n_positions"].tolist() == [len(changes)]
    assert profile["relative_change"].iloc[0] == pytest.approx(np.mean(changes), rel=1e-9)
    capacity = capacity_profile(run, "r")
    gens = run.generations()
    by_depth = gens.groupby("depth")["correct"].mean() * 100
    assert capacity["accuracy_pct"].tolist() == pytest.approx([by_depth[1], by_depth[2]])
    out = tmp_path / "report"
    assert report_main(["--run", str(family_run), "--out", str(out), "--only", "fig_family_*"]) == 0
    assert (out / "fig_family_state.png").is_file() and (out / "fig_family_capacity.png").is_file()


def save_inkling_wrapper(folder: Path) -> Path:
    """The tiny Inkling-2 Loop text model of :func:`save_tiny_model` saved under the multimodal wrapper type
    (``model_type`` ``inkling2_loop``: a tiny vision tower beside it, the text weights under
    ``model.language_model``)."""
    from transformers import Inkling2LoopConfig, Inkling2LoopForConditionalGeneration

    from sst_interp.model.testing import char_tokenizer
    from tests.unit.conftest import tiny_backbone

    text = tiny_backbone("inkling2_loop", dtype=torch.float32)
    config = Inkling2LoopConfig(text_config=text.config.to_dict(), vision_config=dict(
        model_type="inkling2_vision", hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, projection_hidden_dim=16, text_hidden_size=32, posemb_grid_size=4))
    wrapper = Inkling2LoopForConditionalGeneration(config)
    wrapper.model.language_model.load_state_dict(text.model.state_dict())
    wrapper.lm_head.load_state_dict(text.lm_head.state_dict())
    wrapper.save_pretrained(folder)
    char_tokenizer().save_pretrained(folder)
    return folder


def test_inkling_wrapper_type_records_its_text_model(tmp_path: Path) -> None:
    """A checkpoint saved under the wrapper type records exactly what its text model records."""
    wrapper = save_inkling_wrapper(tmp_path / "wrapper")
    assert json.loads((wrapper / "config.json").read_text())["model_type"] == "inkling2_loop"
    text = save_tiny_model(tmp_path / "text", "inkling2_loop")
    runs = {}
    for name, folder in (("wrapper", wrapper), ("text", text)):
        runs[name] = Run.open(tmp_path / f"run-{name}") if record_main(
            [*FAST, "--model", str(folder), "--depths", "2", "--limit", "1", "--out",
             str(tmp_path / f"run-{name}")]) == 0 else None
    assert runs["wrapper"].manifest["family"] == "inkling2_loop"
    assert runs["wrapper"].generations()["token_ids"].map(list).tolist() == \
        runs["text"].generations()["token_ids"].map(list).tolist()
    mine, theirs = next(iter(runs["wrapper"].hidden(2))), next(iter(runs["text"].hidden(2)))
    assert np.array_equal(np.isnan(mine.values), np.isnan(theirs.values))
    # the prefill is bit for bit; cached steps differ by up to ~1e-8 between the two loads of the same weights and
    # config (not explained yet: module attributes, buffers and a plain forward are identical), so float32 rounding
    np.testing.assert_allclose(mine.values, theirs.values, atol=1e-6, rtol=0)


@pytest.mark.parametrize("family, damage, phrase", [
    ("hrm_text", "truncated", "could not load the weights of model folder"),
    ("hrm_text", "no weights", "could not load the weights of model folder"),
    ("hrm_text", "no tokenizer", "could not load the tokenizer of model folder"),
    # an SST folder without a tokenizer records with the backbone's (sst_interp.model.loading), so only weights
    ("gemma3", "truncated", "could not load the weights of model folder"),
    ("gemma3", "no weights", "could not load the weights of model folder"),
])
def test_damaged_model_folder_is_one_error_line(tmp_path: Path, capsys, family: str, damage: str,
                                                phrase: str) -> None:
    """Defect 4: a folder with truncated or missing weights, or no tokenizer, was a traceback (exit 1)."""
    folder = save_tiny_model(tmp_path / family, family)
    weights = folder / "model.safetensors"
    if damage == "truncated":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif damage == "no weights":
        weights.unlink()
    else:
        for path in folder.glob("*token*"):
            path.unlink()
    out = tmp_path / "out"
    fails_with_one_error_line(capsys, record_main, [*FAST, "--model", str(folder), "--depths", "1", "--out",
                                                    str(out)], phrase)
    assert not out.exists()


def test_inkling_manifest_vocab_size_is_the_heads_width(tmp_path: Path) -> None:
    """Defect 3: the manifest's vocab_size was the config's (128), not the head's width (101), so the kl rule's
    --top-k could never be met."""
    from sst_interp.model.testing import char_tokenizer, tiny_inkling2_loop

    folder = tmp_path / "inkling"
    tiny_inkling2_loop(unpadded_vocab_size=101).save_pretrained(folder)
    char_tokenizer().save_pretrained(folder)
    out = tmp_path / "run"
    assert record_main([*FAST[:-4], "--top-k", "101", "--device", "cpu", "--model", str(folder), "--depths", "1",
                        "--limit", "1", "--out", str(out)]) == 0
    manifest = Run.open(out).manifest
    assert manifest["vocab_size"] == 101 and manifest["top_k"] == 101


def test_demo_preset_note_names_the_backbone_loaded(tmp_path: Path) -> None:
    """Defect 8: ``record --model DIR --demo-preset`` said it ran "the default Gemma 3 270M backbone"."""
    from sst_interp.record.options import RecordOptions
    from sst_interp.record.plan import plan_record
    from sst_interp.record.ranks import ranks_from_environment

    folder = save_tiny_model(tmp_path / "gemma", "gemma3")
    plan = plan_record(RecordOptions(model=str(folder), demo_preset=True, depths=[1], limit=1,
                                     out=str(tmp_path / "out"), device="cpu"), ranks_from_environment())
    notes = " ".join(plan.notes)
    assert f"the backbone {folder}" in notes and "Gemma 3 270M" not in notes
