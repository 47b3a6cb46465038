"""The intervention experiments' configs, in a module without torch or pandas: what each experiment of
:mod:`sst_interp.experiments` takes, and the one declaration of the ``python -m sst_interp.intervene`` flags (each
field's default and help text; :mod:`sst_interp.cli.intervene` builds the parser from them, and ``--help`` answers
without loading the model stack).

:class:`ExperimentOptions` holds what every experiment records with (as ``record`` does), where, and at which depth
k; :class:`WindowConfig` (:mod:`~sst_interp.experiments.window`), :class:`TraceConfig`
(:mod:`~sst_interp.experiments.trace`), :class:`SteerConfig` (:mod:`~sst_interp.experiments.steer`) and
:class:`AttributionConfig` (:mod:`~sst_interp.experiments.attribution`) hold each experiment's own options. Their
``depth`` is the experiment's ``--depth``, set by the command from :class:`ExperimentOptions`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.fields import Flags, arg, setting
from sst_interp.model.device_flags import Dtype, device_arg, dtype_arg
from sst_interp.model.loop_options import LOOP_OPTION_FLAGS
from sst_interp.sandbox import SandboxConfig

WINDOW_MODES: tuple[str, ...] = ("freeze", "zero", "mean", "resample")
#: the modes that read the clean run's recorded states (and so only act at its full positions)
READS_CLEAN: tuple[str, ...] = ("mean", "resample")
_DEPTH_HELP = "k (>= 2): the depth compared with depth 1 (the command's --depth)"
_LOGPROB_HELP = ("generated position whose clean depth-k token's log-prob change is measured (default 0: the first "
                 "token)")


def require_depth(depth: int) -> None:
    """Experiments compare depth k with depth 1: k must be at least 2."""
    if depth < 2:
        raise UsageError(f"--depth must be at least 2 (the experiment compares depth k with depth 1), got {depth}")


def layer_set(text: str | None, flag: str = "--layers") -> tuple[int, ...] | None:
    """``all``/None -> None; ``a-b`` ranges and comma lists -> the sorted layer indices (not yet checked against a
    model: :func:`parse_layers`). A malformed list is a UsageError."""
    if text is None or text.strip() == "all":
        return None
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        first, sep, last = part.partition("-")
        try:
            out.update(range(int(first), int(last) + 1) if sep else [int(part)])
        except ValueError as err:
            raise UsageError(f"{flag} {text!r}: write layer indices like 0,3,5-7 or all") from err
    return tuple(sorted(out))



@dataclass(frozen=True)
class ExperimentOptions:
    """Flags every experiment takes: what to record (as ``record`` does) and where."""

    out: Path = arg(help="experiment folder (created; rerunning the same command resumes it)")
    depth: int = arg(2, help="k: the depth compared with depth 1")
    questions: str = arg("demo", help="question set: demo | gsm8k | gpqa | math500 | humaneval")
    data: str | None = arg(None, help="local data file or folder for the question set")
    limit: int | None = arg(None, help="only the first N questions")
    ids: list[str] | None = arg(None, help="comma-separated question ids")
    model: str | None = arg(None, help="backbone (as record --model)")
    loop: str | None = arg(None, metavar="FILE.py:NAME",
                           help="a looped model transformers does not ship: the loop declaration NAME in your file "
                                "(as record --loop; docs/bring-your-own.md)")
    trust_remote_code: bool = arg(False, help="run the modelling code in the --model folder (as record "
                                              "--trust-remote-code)")
    loop_options: dict[str, str] = arg(default_factory=dict, flags=LOOP_OPTION_FLAGS,
                                       help="settings the looped family declares changeable at inference (as record "
                                            "--loop-option KEY=VALUE; dory: recurrent_kv_cache_mode); every "
                                            "condition runs and records with them")
    checkpoint: str | None = arg(None, help="SST checkpoint folder or name (demo-codeact)")
    demo_preset: bool | None = arg(None, help="untrained SST with state_scale='hidden' (as record)")
    protocol: str = arg("completion", choices=("completion", "codeact"), help="completion | codeact")
    max_new_tokens: int | None = arg(None, help="most tokens per answer (per model turn under codeact)")
    max_turns: int = arg(5, help="codeact: most model turns per episode")
    batch_size: int = arg(8, help="questions per batch")
    full_positions: int = arg(10, help="generated positions recorded in full")
    sketch_positions: int = arg(0, help="further positions recorded as sketches")
    top_k: int = arg(128, help="K of the recorded top-K logits (the answer log-probs are read there)")
    dtype: Dtype = dtype_arg(stored=True)
    device: str = device_arg()
    prompt_mode: str | None = arg(None, help="two_pass | sequential | none (default as record)")
    sandbox: str = arg("bwrap", choices=("bwrap", "subprocess"), help="how model code runs under codeact")

    def record_options(self) -> Any:
        """The :class:`~sst_interp.record.options.RecordOptions` every condition shares (``depths``, ``out`` and
        ``intervention`` are set per condition)."""
        from sst_interp.record.options import RecordOptions

        fields = {name: getattr(self, name) for name in (
            "questions", "data", "limit", "ids", "model", "loop", "trust_remote_code", "loop_options", "checkpoint",
            "demo_preset",
            "protocol", "max_new_tokens", "batch_size", "full_positions", "sketch_positions", "top_k", "dtype",
            "device", "prompt_mode")}
        if self.protocol == "codeact":
            fields["max_turns"] = self.max_turns
        return RecordOptions(depths=[self.depth], sandbox=SandboxConfig(backend=self.sandbox), **fields)


@dataclass(frozen=True)
class _Controls:
    """How ``WindowConfig.controls`` is typed: ``--controls mean,resample``, ``none`` for none."""

    controls: list[str] = arg(default_factory=lambda: ["mean", "resample"],
                              help="baselines every window is also recorded under, beside --mode (default: "
                                   "mean,resample; none for no control)")


def _controls(flags: _Controls) -> tuple[str, ...]:
    return () if [c.strip() for c in flags.controls] == ["none"] else tuple(flags.controls)


@dataclass(frozen=True)
class WindowConfig:
    """Experiment a (:mod:`sst_interp.experiments.window`): one ``intervene window`` flag per field but ``depth``.

    Args:
        depth: k (>= 2).
        size: layers per window.
        stride: layers between the first layers of consecutive windows.
        mode: ``freeze``, ``zero``, ``mean`` or ``resample`` (the window module's docstring).
        controls: further modes every window is recorded under beside ``mode`` (default: the ``mean`` and
            ``resample`` baselines; () for none).
        resamples: unused: the intervals stopped bootstrapping (issues 44 and 58: exact intervals, see
            :mod:`sst_interp.experiments.intervals`); kept so earlier command lines and saved configs still load.
        seed: unused, as ``resamples``.
        logprob_position: the generated position whose clean depth-k token's log-prob change is measured (0: the
            first token).
    """

    depth: int = setting(2, help=_DEPTH_HELP)
    size: int = arg(4, help="layers per window")
    stride: int = arg(4, help="layers between consecutive windows' first layers")
    mode: str = arg("freeze", choices=WINDOW_MODES,
                    help="freeze: iterations 2..k read the state iteration 1 read | zero: state_in zeroed at 2..k | "
                         "mean: they read the clean run's mean state there | resample: another question's state")
    controls: tuple[str, ...] = arg(("mean", "resample"), flags=Flags(_Controls, _controls),
                                    help="further modes every window is recorded under beside mode (--controls)")
    resamples: int = arg(10_000, help="unused (the intervals are exact or t since issue 44); kept for old "
                                      "command lines")
    seed: int = arg(0, help="unused (as --resamples); kept for old command lines")
    logprob_position: int = arg(0, help=_LOGPROB_HELP)

    @property
    def modes(self) -> tuple[str, ...]:
        """``mode``, then the controls that differ from it, in order."""
        return tuple(dict.fromkeys((self.mode, *self.controls)))

    def check(self, num_layers: int | None = None, full_positions: int | None = None,
              update: str | None = None) -> None:
        """UsageError for a config this model (its layer count, its SST's state ``update``) or recording (its
        full positions) cannot take; None: any."""
        require_depth(self.depth)
        for name, modes in (("--mode", (self.mode,)), ("--controls", self.controls)):
            bad = [m for m in modes if m not in WINDOW_MODES]
            if bad:
                raise UsageError(f"{name} must be among {', '.join(WINDOW_MODES)}, got {', '.join(map(str, bad))}")
        reads = [m for m in self.modes if m in READS_CLEAN]
        if reads and full_positions is not None and self.logprob_position >= full_positions:
            raise UsageError(f"--logprob-position {self.logprob_position} is beyond --full-positions "
                             f"{full_positions}, where the {'/'.join(reads)} baseline acts (it reads the clean run's "
                             f"states there); raise --full-positions or pass --controls none")
        if reads and update is not None and update != "direct":
            raise UsageError(f"the {'/'.join(reads)} baseline reads the clean run's layer outputs as carried states, "
                             f"which they are only under the update 'direct' (this SST's is {update!r}); pass "
                             f"--controls none")
        if self.size < 1:
            raise UsageError(f"--size must be at least 1, got {self.size}")
        if num_layers is not None and self.size > num_layers:
            raise UsageError(f"--size {self.size} exceeds the model's {num_layers} layers")
        if self.stride < 1:
            raise UsageError(f"--stride must be at least 1, got {self.stride}")
        if self.resamples < 1:
            raise UsageError(f"--resamples must be at least 1, got {self.resamples}")
        if self.logprob_position < 0:
            raise UsageError(f"--logprob-position must be >= 0, got {self.logprob_position}")


@dataclass(frozen=True)
class _TraceLayers:
    """How ``TraceConfig.layers`` is typed."""

    layers: str = arg("all", help="layers patched: all, or e.g. 0,3,5-7")


@dataclass(frozen=True)
class _AttributedLayers:
    """How ``AttributionConfig.layers`` is typed."""

    layers: str = arg("all", help="layers attributed: all, or e.g. 0,3,5-7")


def _layers(flags: _TraceLayers | _AttributedLayers) -> tuple[int, ...] | None:
    """The typed layers (None: all); their bounds are checked against the model once it is loaded."""
    return layer_set(flags.layers)


@dataclass(frozen=True)
class TraceConfig:
    """Experiment b (:mod:`sst_interp.experiments.trace`): one ``intervene trace`` flag per field but ``depth`` and
    ``resample_control``.

    Args:
        depth: k (>= 2).
        positions: targets are looked for at generated positions 0..positions-1 (at most ``--full-positions``,
            where the clean run holds the states to patch).
        layers: the layers patched (None: every layer).
        target_position: None (the first position where the depths' tokens differ) or a fixed position P <
            ``positions`` (depth k's token there, for questions whose tokens agree before P).
        resample_control: also patch each layer x position cell with depth k's state of *another* question
            (``resample``, seed 0): the corruption by resampled states beside the corruption by depth.
    """

    depth: int = setting(2, help=_DEPTH_HELP)
    positions: int = arg(6, help="look for the first depth-1/depth-k difference at positions 0..N-1")
    layers: tuple[int, ...] | None = arg(None, flags=Flags(_TraceLayers, _layers),
                                         help="the layers patched (None: every layer; --layers)")
    target_position: int | None = arg(None, help="target depth k's token at this position, for questions whose "
                                                 "tokens agree before it (default: the first position where the "
                                                 "depths' tokens differ)")
    resample_control: bool = setting(True, help="also patch each cell with another question's depth-k state")

    def check(self, num_layers: int, full_positions: int) -> None:
        """UsageError for a config this model or recording cannot take."""
        require_depth(self.depth)
        if self.positions < 1:
            raise UsageError(f"--positions must be at least 1, got {self.positions}")
        if self.positions > full_positions:
            raise UsageError(f"--positions {self.positions} exceeds --full-positions {full_positions}: the clean run "
                             f"holds the states to patch only at positions recorded in full")
        if self.target_position is not None and not 0 <= self.target_position < self.positions:
            raise UsageError(f"--target-position must be in 0..--positions-1 ({self.positions - 1}), got "
                             f"{self.target_position}")
        bad = [layer for layer in (self.layers or ()) if not 0 <= layer < num_layers]
        if bad:
            raise UsageError(f"--layers {bad} do not exist in a model with {num_layers} layers")


@dataclass(frozen=True)
class _SteerPositions:
    """How ``SteerConfig.positions`` is typed."""

    steer_positions: str = arg("0", help="generated positions steered: all, or e.g. 0,1")


def _positions(flags: _SteerPositions) -> tuple[int, ...] | None:
    text = flags.steer_positions
    if text.strip() == "all":
        return None
    try:
        values = tuple(sorted({int(v) for v in text.split(",") if v.strip()}))
    except ValueError as err:
        raise UsageError(f"--steer-positions {text!r}: write all or positions like 0,1") from err
    if not values or values[0] < 0:
        raise UsageError(f"--steer-positions {text!r}: write all or positions >= 0 like 0,1")
    return values


@dataclass(frozen=True)
class SteerConfig:
    """Experiment c (:mod:`sst_interp.experiments.steer`): one ``intervene steer`` flag per field but ``depth``.

    Args:
        probe: a saved halting probe (``python -m sst_interp.probe train``).
        depth: k (>= 2).
        scales: the sweep, in units of the state's mean norm (0 is the clean run and is not recorded again).
        positions: generated positions steered (None: every position).
        resamples: unused: the intervals stopped bootstrapping (issues 44 and 58: exact intervals, see
            :mod:`sst_interp.experiments.intervals`); kept so earlier command lines and saved configs still load.
        seed: unused, as ``resamples``.
        logprob_position: the generated position whose clean depth-k token's log-prob change is measured (0: the
            first token).
        random_directions: control: this many random directions of the same norm, each steered at every scale.
    """

    probe: Path = arg(help="a saved halting probe (python -m sst_interp.probe train)")
    depth: int = setting(2, help=_DEPTH_HELP)
    scales: tuple[float, ...] = arg((-1.0, -0.5, 0.5, 1.0),
                                    help="scale sweep in units of the state's mean norm; write --scales=-1,1 when it "
                                         "starts with a minus (default: -1,-0.5,0.5,1)")
    positions: tuple[int, ...] | None = arg((0,), flags=Flags(_SteerPositions, _positions),
                                            help="generated positions steered (None: every position; "
                                                 "--steer-positions)")
    resamples: int = arg(10_000, help="unused (the intervals are exact or t since issue 44); kept for old "
                                      "command lines")
    seed: int = arg(0, help="unused (as --resamples); kept for old command lines")
    logprob_position: int = arg(0, help=_LOGPROB_HELP)
    random_directions: int = arg(3, help="control: this many random directions of the same norm (seeds 0..N-1), each "
                                         "steered at every scale; 0 for none")

    def check(self) -> None:
        """UsageError for a config no model can take."""
        require_depth(self.depth)
        if not self.scales:
            raise UsageError("--scales is empty; give e.g. -1,-0.5,0.5,1")
        if self.resamples < 1:
            raise UsageError(f"--resamples must be at least 1, got {self.resamples}")
        if self.logprob_position < 0:
            raise UsageError(f"--logprob-position must be >= 0, got {self.logprob_position}")
        if self.random_directions < 0:
            raise UsageError(f"--random-directions must be >= 0, got {self.random_directions}")


@dataclass(frozen=True)
class AttributionConfig:
    """``python -m sst_interp.intervene attribute`` (:mod:`sst_interp.experiments.attribution`): causal tracing's
    question (which (layer, position) of depth k carries its answer into depth 1) answered by attribution patching
    over layer x position x depth k's iteration, then the top cells checked by real patching. One flag per field but
    ``depth``.

    Args:
        depth: k (>= 2).
        positions: targets are looked for at generated positions 0..positions-1 (at most ``--full-positions``).
        layers: the layers attributed (None: every layer).
        target_position: as :class:`TraceConfig`.
        verify_top: how many cells (layer, position, source iteration), ranked by |mean estimate|, are patched for
            real (one forced generation per cell and batch).
    """

    depth: int = setting(2, help=_DEPTH_HELP)
    positions: int = arg(6, help="look for the first depth-1/depth-k difference at positions 0..N-1")
    layers: tuple[int, ...] | None = arg(None, flags=Flags(_AttributedLayers, _layers),
                                         help="the layers attributed (None: every layer; --layers)")
    target_position: int | None = arg(None, help="target depth k's token at this position (as trace)")
    verify_top: int = arg(5, help="cells (layer, position, source iteration) with the largest |mean estimate| "
                                  "patched for real, one forced generation each per batch; 0 for none")

    def check(self, num_layers: int, full_positions: int) -> None:
        """UsageError for a config this model or recording cannot take."""
        TraceConfig(self.depth, self.positions, self.layers, self.target_position).check(num_layers, full_positions)
        if self.verify_top < 0:
            raise UsageError(f"--verify-top must be >= 0, got {self.verify_top}")
