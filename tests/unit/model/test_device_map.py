"""Device maps (--device-map, --max-memory): a model loaded through accelerate's big-model loading generates and
records exactly what the same model on one device does.

The CPU offers one device, so the maps here put every module on ``cpu`` or offload some to ``disk`` (accelerate then
dispatches the model with its hooks: parameters of offloaded modules are ``meta`` tensors between forwards, and the
hooks run each module on the CPU). That exercises the dispatch path the SST must survive on GPUs (hooked layer
forwards, state parameters made where a layer runs, no ``.to(device)`` after loading); what it cannot exercise is
layers on two different devices and the copies between them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sst_interp.kernels.errors import UsageError
from sst_interp.cli.generate import main as generate_main
from sst_interp.hooks import RecordConfig, Recorder
from sst_interp.model import GenerationConfig, SSTModel, generate
from sst_interp.model.checkpoint import save_checkpoint
from sst_interp.model.loading import ModelSpec, build_sst
from sst_interp.model.placement import (
    check_placement,
    execution_device,
    offloaded_modules,
    parse_device_map,
    parse_max_memory,
    placement_summary,
)
from sst_interp.cli.record import main as record_main
from sst_interp.store import Run
from tests.unit.conftest import FAST, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

MODULES = ("model.embed_tokens", "model.layers.0", "model.layers.1", "model.layers.2", "model.norm",
           "model.rotary_emb", "lm_head")
ALL_CPU = dict.fromkeys(MODULES, "cpu")
#: A budget that holds the embeddings and layer 0 only: accelerate offloads the rest to the disk and dispatches the
#: model. (A budget that holds no module at all is refused: the whole model would run from the disk.)
SMALL_BUDGET = "cpu=120KB"
SMALL_BUDGET_MAP = {"model.embed_tokens": "cpu", "lm_head": "cpu", "model.layers.0": "cpu", "model.layers.1": "disk",
                    "model.layers.2": "disk", "model.norm": "disk", "model.rotary_emb": "disk"}
#: Layer 1 offloaded to the disk: accelerate dispatches the model with hooks (one device alone is never dispatched).
LAYER1_ON_DISK = {**ALL_CPU, "model.layers.1": "disk"}
PROMPTS = ("12 + 7 =", "Q: name a colour.\nA:")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "gemma")


def _generate_and_record(sst: SSTModel, tokenizer, prompt_mode: str, depth: int = 3):
    """(tokens per row, recorder columns) of one batch of PROMPTS at ``depth`` with the recorder attached."""
    prompts = [tokenizer(text).input_ids for text in PROMPTS]
    config = GenerationConfig(max_new_tokens=6, prompt_mode=prompt_mode, logits_every_iteration=True)
    with Recorder.for_model(sst, ["a", "b"], RecordConfig(full_positions=2, sketch_positions=2, top_k=5)) as rec:
        result = generate(sst, prompts, depth, config, observer=rec)
    return result.token_ids, rec.columns()


def _assert_columns_equal(expected: dict, got: dict) -> None:
    assert set(expected) == set(got)
    for table, columns in expected.items():
        assert set(columns) == set(got[table]), table
        for name, value in columns.items():
            left, right = _numpy(value), _numpy(got[table][name])
            assert left.dtype == right.dtype and np.array_equal(left, right), (table, name)


def _numpy(value) -> np.ndarray:
    return value.cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


@pytest.mark.parametrize("device_map", ["auto", ALL_CPU, LAYER1_ON_DISK], ids=["auto", "all-cpu", "layer1-disk"])
def test_device_map_generates_and_records_exactly_as_one_device(folder, device_map):
    reference, tokenizer = build_sst(ModelSpec(str(folder), state_scale="hidden"))
    mapped, _ = build_sst(ModelSpec(str(folder), state_scale="hidden", device_map=device_map))
    if device_map is LAYER1_ON_DISK:
        # the path under test: dispatched with hooks, layer 1's weights offloaded, its state made where it runs
        assert placement_summary(mapped.backbone) == {k: str(v) for k, v in LAYER1_ON_DISK.items()}
        assert all(hasattr(layer, "_hf_hook") for layer in mapped.layers)
        assert mapped.layers[1].self_attn.q_proj.weight.device.type == "meta"
        assert mapped.layers[1].sst_state.theta.device == execution_device(mapped.layers[1]) == torch.device("cpu")
        assert offloaded_modules(mapped.backbone) == ["model.layers.1"]
    for prompt_mode in ("two_pass", "sequential", "none"):
        tokens, columns = _generate_and_record(reference, tokenizer, prompt_mode)
        got_tokens, got_columns = _generate_and_record(mapped, tokenizer, prompt_mode)
        assert got_tokens == tokens, prompt_mode
        _assert_columns_equal(columns, got_columns)
        # the blend is live in what is compared: a later iteration changes the recorded states
        hidden = columns["hidden"]
        first, third = hidden["values"][hidden["iteration"] == 1], hidden["values"][hidden["iteration"] == 3]
        assert not torch.equal(first, third)


def test_checkpoint_state_loads_into_an_offloaded_layer(folder, tmp_path):
    sst, tokenizer = build_sst(ModelSpec(str(folder), state_scale="hidden"))
    torch.manual_seed(3)
    with torch.no_grad():
        for module in sst.state_modules().values():
            module.theta.normal_(0.0, 2.0)
    save_checkpoint(sst, tmp_path / "ckpt", backbone_id="tiny")
    expected, _ = _generate_and_record(sst, tokenizer, "two_pass")
    mapped, _ = build_sst(ModelSpec(str(folder), checkpoint=str(tmp_path / "ckpt"), device_map=LAYER1_ON_DISK))
    assert torch.equal(mapped.alphas(), sst.alphas())
    assert _generate_and_record(mapped, tokenizer, "two_pass")[0] == expected


def test_an_adapter_cannot_be_merged_into_offloaded_modules(folder, tmp_path):
    from peft import LoraConfig, get_peft_model

    sst, _ = build_sst(ModelSpec(str(folder)))
    peft_model = get_peft_model(sst.backbone, LoraConfig(r=2, target_modules=["q_proj"]))
    sst.peft_model = peft_model
    save_checkpoint(sst, tmp_path / "ckpt", backbone_id="tiny")
    with pytest.raises(UsageError, match=r"LoRA adapter.*offloads to cpu or disk \(model.layers.1\)"):
        build_sst(ModelSpec(str(folder), checkpoint=str(tmp_path / "ckpt"), device_map=LAYER1_ON_DISK))
    merged, _ = build_sst(ModelSpec(str(folder), checkpoint=str(tmp_path / "ckpt"), device_map=ALL_CPU))
    assert isinstance(merged, SSTModel)  # nothing offloaded: the adapter merges as without a map


def test_record_cli_with_device_map_records_the_same_run(folder, tmp_path):
    argv = FAST + ["--model", str(folder), "--depths", "1,2", "--limit", "2", "--batch-size", "2", "--demo-preset"]
    record_main(argv + ["--out", str(tmp_path / "plain")])
    # a budget for the embeddings and layer 0: accelerate offloads the rest to the disk and dispatches the model
    record_main(argv + ["--out", str(tmp_path / "mapped"), "--device-map", "auto", "--max-memory", SMALL_BUDGET])
    plain, mapped = Run.open(tmp_path / "plain"), Run.open(tmp_path / "mapped")
    assert plain.manifest["device_map"] is None and mapped.manifest["device_map"] == SMALL_BUDGET_MAP
    assert plain.generations().token_ids.map(list).tolist() == mapped.generations().token_ids.map(list).tolist()
    for depth in (1, 2):
        pairs = list(zip(plain.hidden(depth), mapped.hidden(depth), strict=True))
        assert pairs
        for x, y in pairs:
            assert x.question_id == y.question_id
            assert np.array_equal(x.values.view(np.uint32), y.values.view(np.uint32))
        for x, y in zip(plain.logits(depth), mapped.logits(depth), strict=True):
            assert np.array_equal(x.top_logprobs, y.top_logprobs) and np.array_equal(x.argmax, y.argmax)


def test_generate_cli_with_device_map_prints_the_same_completions(folder, capsys, monkeypatch):
    import sst_interp.model.loading as loading  # generate imports build_sst from here after parsing its flags

    placements = []

    def spying_build_sst(spec):
        sst, tokenizer = build_sst(spec)
        placements.append(placement_summary(sst.backbone))
        return sst, tokenizer

    monkeypatch.setattr(loading, "build_sst", spying_build_sst)
    argv = ["--prompt", "12 + 7 =", "--model", str(folder), "--state-scale", "hidden", "--depths", "1,3",
            "--max-new-tokens", "5"]

    def completions() -> list[str]:
        # "--- depth k (n tokens, s, stop: ...)" headers carry timings: keep their depth, drop the seconds
        lines = capsys.readouterr().out.splitlines()
        return [line.split(" (")[0] if line.startswith("--- depth") else line for line in lines]

    generate_main(argv)
    plain = completions()
    generate_main(argv + ["--device-map", "auto", "--max-memory", SMALL_BUDGET])  # layers 1.. offloaded
    assert completions() == plain and len(plain) == 4
    assert placements == [None, SMALL_BUDGET_MAP]  # the flags reached the loader


def test_the_spec_keeps_its_budget_as_given(folder):
    spec = ModelSpec(str(folder), device_map="auto", max_memory={"cpu": "120KB"})
    sst, _ = build_sst(spec)
    assert placement_summary(sst.backbone) == SMALL_BUDGET_MAP  # the budget reached accelerate
    assert spec.max_memory == {"cpu": "120KB"}  # accelerate rewrites the dict it gets; the spec's is untouched


@pytest.mark.parametrize("flags, message", [
    (["--device-map", "gpu"], "argument --device-map: invalid choice: 'gpu'"),
    (["--device-map", "auto", "--max-memory", "cpu:60GiB"], "write DEVICE=SIZE pairs"),
    (["--device-map", "auto", "--max-memory", "cpu=lots"], "write DEVICE=SIZE pairs"),
    (["--device-map", "auto", "--max-memory", "tpu=1GiB"], "unknown device 'tpu'"),
    (["--device-map", "auto", "--max-memory", "cpu=1GiB,cpu=2GiB"], "given twice"),
    (["--max-memory", "cpu=60GiB"], "add --device-map auto"),
])
@pytest.mark.parametrize("cli", ["record", "generate"])
def test_bad_placement_flags_are_one_line_and_exit_2(capsys, tmp_path, folder, cli, flags, message):
    if cli == "record":
        argv, main = FAST + ["--model", str(folder), "--out", str(tmp_path / "run")] + flags, record_main
    else:
        argv, main = ["--prompt", "x", "--model", str(folder)] + flags, generate_main
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(torch.cuda.device_count() > 0, reason="the machine has a GPU 0")
def test_a_budget_for_a_gpu_the_machine_lacks_is_refused():
    with pytest.raises(UsageError, match="no GPU 0"):
        parse_max_memory("0=20GiB,cpu=60GiB")


def test_placement_values_parse():
    assert parse_device_map(None) is None and parse_device_map("none") is None and parse_device_map("auto") == "auto"
    assert parse_max_memory(None) is None
    assert parse_max_memory(" CPU = 60GiB ") == {"cpu": "60GiB"}
    assert parse_max_memory("cpu=1000") == {"cpu": "1000"}
    check_placement("auto", {"cpu": "1GiB"})
    check_placement(ALL_CPU, None)
    with pytest.raises(UsageError, match="is 'auto' or a"):
        check_placement(["cpu"], None)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="--device-map must be one of"):
        ModelSpec(device_map="balanced")
