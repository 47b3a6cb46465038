"""The five CLIs are built from their dataclass configs by sst_interp.cli.args: same flags as before, every one
documented, bad input one ``error:`` line with exit code 2."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from sst_interp.cli import generate, report
from sst_interp.cli.args import add_config_flags, arg, config_from_namespace, config_parser, given_fields
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.fields import Flags, setting
from sst_interp.cli import probe as probe_cli
from sst_interp.cli import record as record_cli
from sst_interp.cli import train as train_cli
from sst_interp.train.config import TrainConfig

# Every flag the CLIs had before they were built from their configs (spelling pinned).
OLD_FLAGS = {
    "generate": "--prompt --depths --model --checkpoint --state-scale --max-new-tokens --prompt-mode --dtype --device",
    "report": "--run --baseline --probe --checkpoint --training-log --out --only --runs-root --quiet",
    "record": "--questions --data --depths --model --checkpoint --demo-preset --no-demo-preset --max-new-tokens "
              "--batch-size --dtype --out --full-positions --sketch-positions --sketch-k --top-k --gates --limit --ids "
              "--prompt-mode --device --source-option --depth-policy --protocol --max-turns --max-context-tokens "
              "--carry-state-across-turns --no-carry-state-across-turns --tool-output-chars --sandbox "
              "--sandbox-timeout --action-tokens",
    "train": "--demo --train-data --val-data --out --model --baseline --no-baseline --state-scale --theta-init --a-min "
             "--a-max --update --sst-layers --text-field --model-turn-start --turn-end --action-tokens --max-seq-len "
             "--pack --no-pack --lora-r --lora-alpha --lora-dropout --lora-targets --quantize --lr-lora --lr-sst "
             "--warmup-steps --weight-decay --adam-beta1 --adam-beta2 --adam-eps --max-grad-norm --micro-batch-size "
             "--grad-accum --max-steps --eval-every --patience --gradient-checkpointing --no-gradient-checkpointing "
             "--offload-checkpoints --no-offload-checkpoints --ce-chunk-size --dtype --device --seed --threads "
             "--preset",
}
PROBE_COMMON = "--run --layer --out --hidden --activation --threshold --epochs --seed --probe"
OLD_PROBE_FLAGS = {"train": "", "evaluate": "", "sweep": "--layers --loocv-layers", "loocv": "--criterion",
                   "ablate": "--ks --keep --top --linear-loocv --activation-swap"}


def _parsers() -> dict[str, argparse.ArgumentParser]:
    parsers = {"generate": generate.build_parser(), "report": report.build_parser(),
               "record": record_cli.build_parser(), "train": train_cli.build_parser()}
    root = probe_cli.build_parser()
    sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    parsers.update({f"probe {name}": command for name, command in sub.choices.items()})
    return parsers


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {o: a for a in parser._actions for o in a.option_strings if o not in ("-h", "--help")}


def test_every_old_flag_keeps_its_spelling():
    parsers = _parsers()
    for name, flags in OLD_FLAGS.items():
        assert set(flags.split()) <= set(_options(parsers[name])), name
    for command, extra in OLD_PROBE_FLAGS.items():
        assert set(f"{PROBE_COMMON} {extra}".split()) <= set(_options(parsers[f"probe {command}"])), command


def test_every_flag_has_help():
    for name, parser in _parsers().items():
        for option, action in _options(parser).items():
            assert action.help and action.help != argparse.SUPPRESS, f"{name} {option} has no help"
        assert "--help" in parser.format_help()


@pytest.mark.parametrize("main, argv, message", [
    (record_cli.main, ["--top-k", "many"], "argument --top-k: invalid int value: 'many'"),
    (record_cli.main, ["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (train_cli.main, ["--sst-layers", "1,x"], "expected a comma-separated list of int"),
    (train_cli.main, ["--action-tokens", "<execute>"], "KEY=ID"),
    (report.main, ["--out"], "argument --out: expected one argument"),
    (generate.main, [], "the following arguments are required: --prompt"),
    (probe_cli.main, ["train"], "the following arguments are required: --run"),
    (probe_cli.main, ["fit", "--run", "x"], "invalid choice: 'fit'"),
])
def test_bad_flags_are_one_error_line_and_exit_2(capsys, main, argv, message):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert err[0].endswith("--help")


def test_train_flags_layer_over_the_demo_preset_only_where_given():
    parse = train_cli.build_parser().parse_args
    config = train_cli.config_from_args(parse(["--demo", "--no-pack", "--train-data", "t.jsonl", "--lr-sst", "0.5"]))
    assert (config.preset, config.pack, config.lr_sst, config.lora_r) == ("demo", False, 0.5, 8)
    paper = train_cli.config_from_args(parse(["--sst-layers", "3,1,1", "--lora-targets", "q_proj, v_proj",
                                              "--action-tokens", "a=1,b=2", "--no-gradient-checkpointing"]))
    assert paper == TrainConfig(sst_layers=[1, 3], lora_targets=["q_proj", "v_proj"], action_tokens={"a": 1, "b": 2},
                                gradient_checkpointing=False)
    assert train_cli.config_from_args(parse([])) == TrainConfig()


def test_report_flags_become_the_report_config(monkeypatch):
    seen = []
    monkeypatch.setattr("sst_interp.reporting.build_report", lambda config: seen.append(config) or 1 / 0)
    with pytest.raises(ZeroDivisionError):
        report.main(["--run", "a", "--run", "b", "--training-log", "t", "--only", " x, y,,", "--quiet"])
    config = seen[0]
    assert config.runs == (Path("a"), Path("b")) and config.training_logs == (Path("t"),)
    assert config.only == ("x", "y") and config.progress is False and config.out == Path("reports")


@dataclasses.dataclass
class _Example:
    """Every kind of field the mechanism maps."""

    name: str = arg(help="required text")
    count: int = arg(3, help="a number")
    ratio: float | None = arg(None, help="an optional number")
    folder: Path = arg(Path("out"), help="a path")
    switch: bool | None = arg(None, help="on, off or unset")
    items: list[int] = arg(default_factory=list, help="comma-separated")
    repeated: list[str] | None = arg(None, repeat=True, help="one per flag")
    mapping: dict[str, int] = arg(default_factory=dict, help="KEY=ID pairs")
    mode: str = arg("a", choices=("a", "b"), help="a choice")


def _example_parser(**kwargs) -> argparse.ArgumentParser:
    parser = config_parser("example", "an example")
    add_config_flags(parser, _Example, **kwargs)
    return parser


def test_field_types_map_to_flags():
    args = _example_parser().parse_args(["--name", "n", "--count", "4", "--ratio", "0.5", "--folder", "f",
                                         "--no-switch", "--items", "1, 2", "--repeated", "x", "--repeated", "y",
                                         "--mapping", "a=1,b=2", "--mode", "b"])
    assert config_from_namespace(_Example, args) == _Example(
        name="n", count=4, ratio=0.5, folder=Path("f"), switch=False, items=[1, 2], repeated=["x", "y"],
        mapping={"a": 1, "b": 2}, mode="b")
    assert config_from_namespace(_Example, _example_parser().parse_args(["--name", "n"])) == _Example(name="n")
    assert "a number (default: 3)" in " ".join(_example_parser().format_help().split())
    with pytest.raises(UsageError, match="invalid choice: 'c'"):
        _example_parser().parse_args(["--name", "n", "--mode", "c"])


def test_omit_unset_leaves_out_the_flags_not_given():
    args = _example_parser(omit_unset=True).parse_args(["--name", "n", "--count", "5"])
    assert given_fields(_Example, args) == {"name": "n", "count": 5}


def test_a_field_without_help_is_refused():
    @dataclasses.dataclass
    class Undocumented:
        value: int = 1

    with pytest.raises(TypeError, match="has no help"):
        add_config_flags(config_parser("x", "y"), Undocumented)


@dataclasses.dataclass
class _PairForm:
    """The command-line form of :attr:`_Declared.pair`."""

    pair: str | None = arg(None, help="KEY=VALUE")


@dataclasses.dataclass
class _Declared:
    """A library config declaring a positional, a field typed as another flag, and a library-only setting."""

    target: Path = arg(positional=True, help="a positional")
    pair: tuple[str, str] | None = arg(
        None, help="held as a tuple", flags=Flags(_PairForm, lambda form: None if form.pair is None
                                                  else tuple(form.pair.split("=", 1))))
    hidden: bool = setting(True, help="library only")


def test_forms_positionals_and_library_only_settings():
    parser = config_parser("declared", "an example")
    add_config_flags(parser, _Declared)
    assert {"--pair"} == set(_options(parser))
    parsed = config_from_namespace(_Declared, parser.parse_args(["t", "--pair", "a=b"]))
    assert parsed == _Declared(target=Path("t"), pair=("a", "b"), hidden=True)
    unset = config_parser("declared", "an example")
    add_config_flags(unset, _Declared, omit_unset=True)
    assert given_fields(_Declared, unset.parse_args(["t"])) == {"target": Path("t")}
