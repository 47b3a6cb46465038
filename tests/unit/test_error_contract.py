"""The error contract, one row per bad input (issue 20 item 5): every command refuses bad user input with exit code
2 and exactly one ``error: ...`` line on stderr, prints nothing on stdout, shows no traceback, creates no ``--out``,
and leaves every run directory it was pointed at byte for byte as it was.

``CASES`` is the table: each row names the command, its arguments (placeholders such as ``{model}`` and ``{run}``
are filled from the fixtures below) and a phrase the error line must contain. New flags add a row. Commands run
in-process through their ``main(argv)`` (stderr is captured at the file descriptor, so transformers' and torch's own
output counts too, and a warning logged through ``logging`` or ``warnings``, which pytest diverts from stderr, fails
the row); a row
with ``subprocess=True`` runs ``python -m`` for what only a real process shows.

The rows marked ``# issue 20`` are the cases issue 20 listed as failing (a traceback, a silent exit 0, more than
one line, or a hang); the others are a representative set of inputs that already held.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sst_interp.synthetic import SyntheticSpec, write_synthetic_run
from tests.unit.conftest import FAST, save_tiny_model
from tests.unit.store.test_store_integrity import flip_page

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[2]
GSM8K = REPO / "tests/data/gsm8k_tiny.jsonl"
MATH500 = REPO / "tests/data/math500_tiny.jsonl"
GPQA = REPO / "tests/data/gpqa_tiny.csv"
#: A small synthetic run for report and probe (the shape of test_store_integrity_cli's).
SYNTHETIC = dict(halting_dims=(5, 17, 30), halting_strength=3.0, n_questions=40, num_layers=4, hidden_size=48,
                 full_positions=1, top_k=8, vocab_size=256, batch_questions=40, extra_tokens=2, seed=1)
#: Recording flags of every record row: the tiny model (vocabulary 128, hidden size 32, context 512), 2 questions.
REC = (*FAST, "--model", "{model}", "--depths", "1", "--limit", "2")
LAUNCHER_VARIABLES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SST_INTERP_JOIN_TIMEOUT")
#: Seconds a refusal marked ``hang`` may take: far above any refusal on a busy machine (a few seconds), far below
#: what the former hangs took (no end, or 10 million generated tokens).
HANG_S = 300.0
#: A tqdm progress bar (transformers shows one while it loads weights): progress, not a message, so not counted.
PROGRESS = re.compile(r"\d+%\|.*\|")
#: CodeACT on the tiny model: action ids inside its vocabulary, code run without bubblewrap.
CODEACT = ("--protocol", "codeact", "--sandbox", "subprocess", "--action-tokens", "<execute>=100,</execute>=101")
TRAIN = ("--model", "{model}", "--train-data", "{data}/train_ok.jsonl", "--action-tokens", "<execute>=100,"
         "</execute>=101", "--out", "{out}")


def _command(name: str) -> Callable[[list[str]], object]:
    """The in-process ``main`` of a command (imported late: collecting this module stays cheap)."""
    if name == "record":
        from sst_interp.cli.record import main
    elif name == "generate":
        from sst_interp.cli.generate import main
    elif name == "train":
        from sst_interp.cli.train import main
    elif name == "codeact_data":
        from sst_interp.cli.codeact_data import main
    elif name == "store":
        from sst_interp.cli.store import main
    elif name == "report":
        from sst_interp.cli.report import main
    elif name == "probe":
        from sst_interp.cli.probe import main
    elif name == "explore":
        from sst_interp.cli.explore import main
    elif name == "intervene":
        from sst_interp.cli.intervene import main
    else:
        raise KeyError(name)
    return main


@dataclass(frozen=True)
class Case:
    """One bad input.

    Args:
        id: the test id.
        command: record | generate | train | codeact_data | store | report | probe | explore | intervene.
        argv: the arguments; ``{model}``, ``{run}``, ``{out}``, ``{data}``, ``{syn}``, ``{ro}`` are filled in.
        expect: a phrase of the one error line (``{port}`` is filled in like the arguments).
        env: environment variables set for the call.
        subprocess: run ``python -m sst_interp.<command>`` instead of ``main`` in-process.
        hang: a former hang (a wait without end, 10 million tokens generated): the refusal must come within
            :data:`HANG_S`, a bound that only a hang breaks, never a slow or busy machine.
        offline: the call must not reach for the network (the offline hub id used to spend about 50 s on retries):
            every host name lookup raises and is counted.
    """

    id: str
    command: str
    argv: tuple[str, ...]
    expect: str
    env: dict[str, str] = field(default_factory=dict)
    subprocess: bool = False
    hang: bool = False
    offline: bool = False


CASES = [
    # ---- tracebacks before (issue 20)
    Case("record-device-cuda-without-cuda", "record", (*REC, "--device", "cuda", "--out", "{out}"),
         "CUDA is not available"),
    Case("record-device-bogus", "record", (*REC, "--device", "bogus", "--out", "{out}"), "is not a device"),
    Case("generate-device-cuda-without-cuda", "generate",
         ("--model", "{model}", "--prompt", "hi", "--device", "cuda"), "CUDA is not available"),
    Case("generate-device-bogus", "generate", ("--model", "{model}", "--prompt", "hi", "--device", "bogus"),
         "is not a device"),
    Case("action-token-beyond-vocabulary", "record",
         (*REC, *CODEACT[:4], "--action-tokens", "<execute>=1000,</execute>=1001", "--out", "{out}"),
         "outside the model's vocabulary of 128"),
    Case("top-k-wider-than-vocabulary", "record", (*REC, "--top-k", "10000000", "--out", "{out}"),
         "wider than the model's vocabulary of 128"),
    Case("top-k-wider-than-vocabulary-demo-preset", "record",
         (*REC, "--demo-preset", "--top-k", "10000000", "--out", "{out}"), "wider than"),  # no preset note first
    Case("gsm8k-oversized-line", "record", (*REC, "--questions", "gsm8k", "--data", "{data}/big.jsonl",
                                            "--out", "{out}"), "line 2 is 2.0 MiB"),
    # issue 32 item 6: rows past --limit are checked too (the run identity hashes every row of the set)
    Case("gsm8k-oversized-line-past-the-limit", "record",
         (*REC, "--questions", "gsm8k", "--data", "{data}/big3.jsonl", "--out", "{out}"), "line 3 is 2.0 MiB"),
    Case("math500-duplicate-unique-id", "record", (*REC, "--questions", "math500", "--data", "{data}/dup.jsonl",
                                                   "--out", "{out}"), "repeats unique_id"),
    Case("math500-level-not-integer", "record", (*REC, "--questions", "math500", "--data", "{data}/hard.jsonl",
                                                 "--out", "{out}"), "row 1: 'level' must be an integer"),
    Case("gpqa-duplicate-record-id", "record", (*REC, "--questions", "gpqa", "--data", "{data}/gpqa_dup.csv",
                                                "--out", "{out}"), "repeats Record ID"),
    Case("gpqa-blank-option", "record", (*REC, "--questions", "gpqa", "--data", "{data}/gpqa_blank.csv",
                                         "--out", "{out}"), "row 2 has no value for ['Incorrect Answer 2']"),
    Case("intervention-unknown-stream", "record",
         (*REC, "--intervention", "{data}/spec_bad_stream.json", "--out", "{out}"),
         "unknown intervention stream 'residual'"),
    Case("intervention-layer-out-of-range", "record",
         (*REC, "--intervention", "{data}/spec_bad_layer.yaml", "--out", "{out}"),
         "layers [9] do not exist in a model with 3 layers"),
    Case("intervention-patch-run-missing", "record",
         (*REC, "--intervention", "{data}/spec_no_run.json", "--out", "{out}"), "/no/such/run"),
    Case("intervention-live-source-in-a-recording", "record",  # issue 30 item 4: batch rows are record's layout
         (*REC, "--intervention", "{data}/spec_live.json", "--out", "{out}"), "a recording lays its batches out"),
    Case("intervention-spec-missing", "record", (*REC, "--intervention", "{data}/nope.yaml", "--out", "{out}"),
         "intervention spec not found"),
    Case("intervention-mean-beyond-recorded-positions", "record",
         (*REC, "--intervention", "{data}/spec_mean_far.json", "--out", "{out}"),
         "holds hidden states only at positions 0-1"),
    Case("intervention-resample-run-of-another-width", "record",
         (*REC, "--intervention", "{data}/spec_resample_wide.json", "--out", "{out}"),
         "holds states of d = 48; this model's are d = 32"),
    Case("intervention-sites-never-fire", "record",  # issue 30: iteration 4 at depth 1
         (*REC, "--intervention", "{data}/spec_never_fires.yaml", "--out", "{out}"),
         "rule 1 (zero on layer_out) changed no (row, position, iteration, layer) site"),
    Case("intervene-window-resample-one-question", "intervene",
         ("window", "--out", "{out}", "--model", "{model}", "--limit", "1"), "raise --limit or pass --controls mean"),
    Case("intervene-depth-1", "intervene", ("window", "--out", "{out}", "--model", "{model}", "--depth", "1"),
         "--depth must be at least 2"),
    Case("intervene-window-larger-than-model", "intervene",
         ("window", "--out", "{out}", *FAST, "--model", "{model}", "--limit", "2", "--size", "9"),
         "--size 9 exceeds the model's 3 layers"),
    Case("intervene-trace-layer-out-of-range", "intervene",
         ("trace", "--out", "{out}", *FAST[2:], "--model", "{model}", "--limit", "2", "--layers", "0,7"),
         "layers [7] do not exist"),
    Case("intervene-steer-probe-missing", "intervene",
         ("steer", "--out", "{out}", "--model", "{model}", "--probe", "{data}/no_probe"), "no probe at"),
    Case("intervene-steer-probe-of-another-model", "intervene",  # issue 30
         ("steer", "--out", "{out}", *FAST, "--model", "{model}", "--limit", "2", "--depth", "2", "--probe",
          "{data}/probe_other_model"), "was trained on a run of another model"),
    Case("demo-n-0", "record", (*REC, "--source-option", "n=0", "--out", "{out}"), "holds no questions"),
    Case("codeact-data-read-only-out", "codeact_data",
         ("--gsm8k", str(GSM8K), "--out", "{ro}/traces", "--sandbox", "subprocess"), "cannot write into"),
    # ---- accepted silently before (issue 20)
    Case("carry-state-with-completion", "record", (*REC, "--carry-state-across-turns", "--out", "{out}"),
         "--carry-state-across-turns applies only to --protocol codeact"),
    Case("max-turns-with-completion", "record", (*REC, "--max-turns", "3", "--out", "{out}"),
         "--max-turns applies only to --protocol codeact"),
    Case("action-tokens-same-id-twice", "record",
         (*REC, *CODEACT[:4], "--action-tokens", "<execute>=100,</execute>=100", "--out", "{out}"),
         "need two different ids"),
    Case("max-context-shorter-than-prompt", "record",
         (*REC, *CODEACT, "--max-context-tokens", "60", "--out", "{out}"), "cannot hold the first turn"),
    Case("sketch-k-above-hidden-size", "record", (*REC, "--sketch-k", "100000", "--out", "{out}"),
         "more than the model's hidden size 32"),
    Case("attention-layer-the-model-lacks", "record", (*REC, "--attention", "7", "--out", "{out}"),
         "--attention asks for layer 7"),
    Case("attention-head-the-model-lacks", "record", (*REC, "--attention", "0:5", "--out", "{out}"),
         "--attention asks for head 5"),
    Case("device-map-every-weight-on-disk", "record",
         (*REC, "--device-map", "auto", "--max-memory", "cpu=1KiB", "--out", "{out}"), "offload the whole model",
         subprocess=True),  # a real process: accelerate's warning goes through logging, which pytest captures
    Case("gsm8k-null-question", "record", (*REC, "--questions", "gsm8k", "--data", "{data}/null.jsonl",
                                           "--out", "{out}"), "row 2: 'question' is null"),
    Case("gsm8k-empty-answer", "record", (*REC, "--questions", "gsm8k", "--data", "{data}/blank.jsonl",
                                          "--out", "{out}"), "row 1: 'answer' is empty"),
    Case("codeact-data-empty-file", "codeact_data",
         ("--gsm8k", "{data}/empty.jsonl", "--out", "{out}", "--sandbox", "subprocess"), "holds no rows"),
    Case("codeact-data-limit-0", "codeact_data",
         ("--gsm8k", str(GSM8K), "--limit", "0", "--out", "{out}", "--sandbox", "subprocess"), "--limit"),
    Case("codeact-data-limit-negative", "codeact_data",
         ("--gsm8k", str(GSM8K), "--limit", "-2", "--out", "{out}", "--sandbox", "subprocess"), "--limit"),
    # ---- more than one line before (issue 20; train: issue 26 item 4, nothing under --out either)
    Case("train-missing-data", "train", (*TRAIN[:2], "--train-data", "{data}/none.jsonl", *TRAIN[4:]), "not found"),
    Case("train-malformed-data", "train", (*TRAIN[:2], "--train-data", "{data}/not_json.jsonl", *TRAIN[4:]),
         "line 1"),
    Case("train-null-prompt", "train", (*TRAIN[:2], "--train-data", "{data}/train_null.jsonl", *TRAIN[4:]),
         "line 2: a row needs a string field"),
    Case("train-chat-row-without-model-turn", "train",
         (*TRAIN[:2], "--train-data", "{data}/train_ok.jsonl", "--val-data", "{data}/train_no_turn.jsonl",
          *TRAIN[4:]), "line 1: no model-turn tokens"),
    Case("train-bad-state-scale", "train", (*TRAIN, "--state-scale", "bogus"), "state_scale"),
    Case("train-fsdp-in-one-process", "train", (*TRAIN, "--fsdp"), "--fsdp"),
    Case("train-demo-fsdp-writes-no-data", "train", ("--demo", "--fsdp", "--out", "{out}"), "--fsdp"),
    Case("train-world-size-without-master-addr", "train", TRAIN, "MASTER_ADDR is unset",
         env={"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}),
    Case("train-device-cuda-without-cuda", "train", (*TRAIN, "--device", "cuda"), "CUDA is not available"),
    Case("train-missing-model", "train", (*TRAIN[:-2], "--model", "{data}/no-model", "--out", "{out}"),
         "could not load model"),
    Case("train-action-id-beyond-vocabulary", "train",
         (*TRAIN[:4], "--action-tokens", "<execute>=1000,</execute>=1001", "--out", "{out}"), "vocabulary of 128"),
    Case("store-no-command", "store", (), "see python -m sst_interp.store --help"),
    Case("store-unknown-command", "store", ("frob", "{run}"), "invalid choice"),
    Case("store-verify-without-run", "store", ("verify",), "see python -m sst_interp.store verify --help"),
    Case("store-unknown-flag", "store", ("verify", "{run}", "--deep"), "unrecognized arguments"),
    Case("codeact-data-no-arguments", "codeact_data", (), "see python -m sst_interp.train.codeact_data --help"),
    Case("codeact-data-unknown-flag", "codeact_data", ("--gsm8k", str(GSM8K), "--out", "{out}", "--lmit", "2"),
         "unrecognized arguments"),
    Case("store-no-command-python-m", "store", (), "see python -m sst_interp.store --help", subprocess=True),
    Case("hub-id-offline", "generate", ("--model", "nobody/no-such-model", "--prompt", "hi"),
         "cannot be reached (HF_HUB_OFFLINE is set)", env={"HF_HUB_OFFLINE": "1"}, offline=True),
    # ---- hangs before (issue 20)
    # the message's "within 2 s": SST_INTERP_JOIN_TIMEOUT, not the 60 s default, bounded the wait
    Case("record-peer-never-joins", "record", (*REC, "--out", "{out}"),
         "MASTER_ADDR=127.0.0.1 MASTER_PORT={port} within 2 s",
         env={"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
              "MASTER_PORT": "{port}", "SST_INTERP_JOIN_TIMEOUT": "2"}, hang=True),
    Case("record-rank-1-master-never-answers", "record", (*REC, "--out", "{out}"),
         "MASTER_PORT={port} within 2 s (nothing answers there)",
         env={"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
              "MASTER_PORT": "{port}", "SST_INTERP_JOIN_TIMEOUT": "2"}, hang=True),
    Case("record-join-timeout-not-a-number", "record", (*REC, "--out", "{out}"), "SST_INTERP_JOIN_TIMEOUT='soon'",
         env={"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
              "MASTER_PORT": "{port}", "SST_INTERP_JOIN_TIMEOUT": "soon"}),
    Case("record-rank-outside-world", "record", (*REC, "--out", "{out}"), "do not describe a process group",
         env={"WORLD_SIZE": "2", "RANK": "3"}),
    Case("record-world-size-without-master-addr", "record", (*REC, "--out", "{out}"), "MASTER_ADDR is unset",
         env={"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}),
    Case("generate-max-new-tokens-beyond-context", "generate",
         ("--model", "{model}", "--prompt", "hi", "--max-new-tokens", "10000000"), "the maximum after a prompt",
         hang=True),
    Case("record-max-new-tokens-beyond-context", "record", (*REC, "--max-new-tokens", "10000000", "--out", "{out}"),
         "beyond the model's context of 512", hang=True),
    Case("record-max-new-tokens-beyond-context-into-run", "record",
         (*REC, "--max-new-tokens", "10000000", "--out", "{run}"), "differ"),
    # ---- damaged runs refused by the readers (issue 20 item 4)
    Case("report-without-generations", "report", ("--run", "{syn}/no-generations", "--out", "{out}"),
         "generations.parquet"),
    Case("report-without-questions", "report", ("--run", "{syn}/no-questions", "--out", "{out}"),
         "questions.parquet"),
    Case("report-flipped-questions", "report", ("--run", "{syn}/flipped-questions", "--out", "{out}"),
         "questions.parquet"),
    Case("report-truncated-generations", "report", ("--run", "{syn}/truncated-generations", "--out", "{out}"),
         "generations.parquet"),
    Case("report-truncated-questions", "report", ("--run", "{syn}/truncated-questions", "--out", "{out}"),
         "questions.parquet"),
    Case("probe-without-generations", "probe", ("train", "--run", "{syn}/no-generations", "--out", "{out}"),
         "generations.parquet"),
    Case("probe-flipped-questions", "probe", ("train", "--run", "{syn}/flipped-questions", "--out", "{out}"),
         "questions.parquet"),
    Case("probe-without-questions", "probe", ("train", "--run", "{syn}/no-questions", "--out", "{out}"),
         "questions.parquet"),
    Case("probe-policies-unknown-rule", "probe", ("policies", "--run", "{run}", "--rules", "bogus", "--out", "{out}"),
         "unknown rule"),
    Case("probe-policies-negative-threshold", "probe",
         ("policies", "--run", "{run}", "--policy", "kl:-1", "--out", "{out}"), "must be >= 0"),
    Case("probe-policies-max-0", "probe", ("policies", "--run", "{run}", "--policy", "max=0", "--out", "{out}"),
         "integer >= 1"),
    Case("probe-policies-missing-probe", "probe",
         ("policies", "--run", "{run}", "--policy", "probe-pos:/no/such/probe", "--out", "{out}"), "no such probe"),
    Case("probe-policies-single-depth-run", "probe", ("policies", "--run", "{run}", "--out", "{out}"),
         "needs a depth >= 2"),
    # ---- a representative set that already held
    Case("record-depth-0", "record", (*REC, "--depths", "0", "--out", "{out}"), "depth"),
    Case("record-unknown-set", "record", (*REC, "--questions", "trivia", "--out", "{out}"), "unknown question set"),
    Case("record-missing-data-file", "record", (*REC, "--questions", "gsm8k", "--data", "{data}/none.jsonl",
                                                "--out", "{out}"), "does not exist"),
    Case("record-batch-size-0", "record", (*REC, "--batch-size", "0", "--out", "{out}"), "--batch-size"),
    Case("record-bad-dtype", "record", (*REC, "--dtype", "float16", "--out", "{out}"), "--dtype"),
    Case("record-unknown-flag", "record", (*REC, "--depht", "2", "--out", "{out}"), "see python -m sst_interp.record"),
    Case("record-unknown-protocol", "record", (*REC, "--protocol", "chat", "--out", "{out}"), "invalid choice"),
    Case("record-unknown-id", "record", (*REC, "--ids", "nope", "--out", "{out}"), "nope"),
    Case("record-max-memory-without-device-map", "record", (*REC, "--max-memory", "cpu=1GiB", "--out", "{out}"),
         "--device-map auto"),
    Case("record-into-run-with-other-model", "record",
         (*REC[:-6], "--model", "{data}/no-model", "--depths", "1", "--limit", "2", "--out", "{run}"), "no-model"),
    Case("record-into-run-with-other-top-k", "record", (*REC, "--top-k", "7", "--out", "{run}"), "top_k"),
    # ---- the numerics fingerprint (issue 32): the fixture's run was recorded with torch's own thread count
    Case("record-threads-0", "record", (*REC, "--threads", "0", "--out", "{out}"), "--threads must be at least 1"),
    Case("record-into-run-with-other-threads", "record", (*REC, "--threads", "97", "--out", "{run}"),
         "this command has threads=97, which changes the recorded numbers; pass --threads"),
    Case("record-into-run-with-other-batch-size", "record", (*REC, "--batch-size", "3", "--out", "{run}"),
         "batch_size: 8 -> 3"),  # the identity names it before the model loads
    Case("record-out-a-file", "record", (*REC, "--out", "{data}/empty.jsonl"), "is a file"),
    # ---- the compiled decode step (issue 35): refused before anything loads, naming --compile off
    Case("record-compile-bad-value", "record", (*REC, "--compile", "maybe", "--out", "{out}"),
         "argument --compile: invalid choice: 'maybe'"),
    Case("record-compile-on-codeact", "record", (*REC, *CODEACT, "--compile", "on", "--out", "{out}"),
         "single-turn completions on one device; use --compile off"),
    Case("record-compile-on-live-intervention", "record",
         (*REC, "--intervention", "{data}/spec_live.json", "--compile", "on", "--out", "{out}"),
         "reads another row inside the forward pass and cannot run compiled; use --compile off"),
    Case("record-compile-on-two-state-in-references", "record",
         (*REC, "--intervention", "{data}/spec_two_state_in_means.json", "--compile", "on", "--out", "{out}"),
         "one reference state per layer; use --compile off"),
    Case("generate-compile-on-device-map", "generate",
         ("--prompt", "7 + 5 =", "--model", "{model}", "--depths", "1", "--device-map", "auto", "--compile", "on"),
         "runs on one device; use --compile off"),
    # ---- latent-iteration families (issue 36): refused before any weight loads
    Case("record-family-unsupported-model-type", "record", (*FAST, "--model", "{data}/gpt2_model", "--out", "{out}"),
         "unsupported model_type 'gpt2'; supported families: sst"),
    Case("record-family-hrm-compile-on", "record",
         (*FAST, "--model", "{data}/hrm_model", "--compile", "on", "--out", "{out}"),
         "the compiled decode step serves SSTs; hrm_text runs decode eager (use --compile off)"),
    Case("record-family-hrm-sst-only-flag", "record",
         (*FAST, "--model", "{data}/hrm_model", "--prompt-mode", "two_pass", "--out", "{out}"), "hrm_text has none"),
    Case("record-family-hrm-per-position-policy", "record",
         (*FAST, "--model", "{data}/hrm_model", "--depths", "1,2", "--depth-policy", "entropy:0.5", "--out", "{out}"),
         "hrm_text runs are recorded at fixed depths only"),
    Case("record-family-hrm-freeze-where-no-state-carries", "record",
         (*FAST, "--model", "{data}/hrm_model", "--depths", "1,2", "--intervention", "{data}/spec_freeze_block0.json",
          "--out", "{out}"), "layers [0] hand no carried state on in hrm_text"),
    Case("generate-empty-prompt", "generate", ("--model", "{model}", "--prompt", "  "), "--prompt is empty"),
    Case("store-verify-not-a-run", "store", ("verify", "{data}"), "not a run directory"),
    Case("report-no-such-run", "report", ("--run", "{data}/no-run", "--out", "{out}"), "no-run"),
    # ---- comparisons (issue 34): an ablation set recorded under other conditions, malformed published accuracies
    Case("report-ablation-other-questions", "report",
         ("--run", "{syn}/ablation-main", "--run", "{syn}/ablation-fewer", "--out", "{out}"),
         "differ in questions (40 vs 30"),
    Case("report-ablation-other-depths", "report",
         ("--run", "{syn}/ablation-main", "--run", "{syn}/ablation-shallow", "--out", "{out}"),
         "differ in depths ([1, 2, 3, 4] vs [1, 2])"),
    Case("report-external-missing-column", "report",
         ("--run", "{syn}/pristine", "--external", "{data}/external_no_source.csv", "--out", "{out}"),
         "header lacks columns ['source']"),
    Case("report-external-not-a-number", "report",
         ("--run", "{syn}/pristine", "--external", "{data}/external_text.csv", "--out", "{out}"),
         "row 3 (Model B) has accuracy 'high'"),
    # ---- the explorer (issue 24): refused before it serves anything (a port in use: tests/unit/explore)
    Case("explore-not-a-run", "explore", ("{data}", "--port", "0"), "not a run directory"),
    Case("explore-no-run", "explore", (), "see python -m sst_interp.explore --help"),
    Case("explore-bad-port", "explore", ("{run}", "--port", "70000"), "--port must be 0..65535"),
    Case("explore-report-not-a-report", "explore", ("{run}", "--port", "0", "--report", "{data}"),
         "is not a report folder"),
    Case("explore-baseline-not-a-run", "explore", ("{run}", "--port", "0", "--baseline", "{data}"),
         "not a run directory"),
    Case("explore-flipped-questions", "explore", ("{syn}/flipped-questions", "--port", "0"), "questions.parquet"),
    Case("explore-truncated-generations", "explore", ("{syn}/truncated-generations", "--port", "0"),
         "generations.parquet"),
]


# ------------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """The tiny model, a recorded run of it, bad data files and damaged synthetic runs, made once."""
    from sst_interp.cli.record import main as record_main

    root = tmp_path_factory.mktemp("contract")
    model = save_tiny_model(root / "model")
    run = root / "run"
    record_main([part.format(model=model) for part in REC] + ["--out", str(run)])
    data = root / "data"
    data.mkdir()
    rows = [json.loads(line) for line in GSM8K.read_text().splitlines() if line.strip()]
    (data / "null.jsonl").write_text("".join(json.dumps(dict(r, question=None) if i == 1 else r) + "\n"
                                             for i, r in enumerate(rows)))
    (data / "blank.jsonl").write_text("".join(json.dumps(dict(r, answer=" ") if i == 0 else r) + "\n"
                                              for i, r in enumerate(rows)))
    (data / "big.jsonl").write_text(json.dumps(rows[0]) + "\n" + json.dumps({"question": "x" * (2 << 20),
                                                                              "answer": "#### 1"}) + "\n")
    (data / "big3.jsonl").write_text(json.dumps(rows[0]) + "\n" + json.dumps(rows[1]) + "\n"
                                     + json.dumps({"question": "x" * (2 << 20), "answer": "#### 1"}) + "\n")
    problems = [json.loads(line) for line in MATH500.read_text().splitlines() if line.strip()]
    (data / "dup.jsonl").write_text("".join(json.dumps(r) + "\n" for r in problems + problems[:1]))
    (data / "hard.jsonl").write_text("".join(json.dumps(dict(r, level="hard") if i == 0 else r) + "\n"
                                             for i, r in enumerate(problems)))
    (data / "empty.jsonl").write_text("")
    with GPQA.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        columns, gpqa = reader.fieldnames, list(reader)
    for name, edited in (("gpqa_dup.csv", gpqa + gpqa[:1]),
                         ("gpqa_blank.csv", [dict(r, **{"Incorrect Answer 2": ""}) if i == 1 else r
                                             for i, r in enumerate(gpqa)])):
        with (data / name).open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, columns)
            writer.writeheader()
            writer.writerows(edited)
    (data / "not_json.jsonl").write_text("not json\n")
    (data / "gpt2_model").mkdir()
    (data / "gpt2_model" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    save_tiny_model(data / "hrm_model", "hrm_text")
    (data / "spec_freeze_block0.json").write_text(json.dumps({"interventions": [
        {"site": {"stream": "layer_out", "layers": [0]}, "operation": {"kind": "freeze"}}]}))
    (data / "spec_bad_stream.json").write_text(json.dumps({"interventions": [
        {"site": {"stream": "residual"}, "operation": {"kind": "zero"}}]}))
    (data / "spec_bad_layer.yaml").write_text("interventions:\n  - site: {stream: layer_out, layers: [9]}\n"
                                              "    operation: {kind: zero}\n")
    (data / "spec_never_fires.yaml").write_text("interventions:\n  - site: {stream: layer_out, iterations: [4]}\n"
                                                "    operation: {kind: zero}\n")
    from sst_interp.probe.io import ProbeMeta, save_probe
    from sst_interp.probe.model import HaltingProbe, ProbeConfig

    save_probe(data / "probe_other_model", HaltingProbe(ProbeConfig(input_size=32)),
               ProbeMeta(layer=1, provenance={"identity": {"model": "another/model"}, "n_must_halt": 10}))
    (data / "spec_live.json").write_text(json.dumps({"interventions": [
        {"site": {"stream": "layer_out"}, "operation": {"kind": "patch", "source": 1}}]}))
    (data / "spec_two_state_in_means.json").write_text(json.dumps({"interventions": [
        {"site": {"stream": "state_in", "layers": [1], "iterations": [2]}, "operation": {"kind": "mean", "run": "r"}},
        {"site": {"stream": "state_in", "iterations": [2, 3]}, "operation": {"kind": "resample", "run": "r"}}]}))
    (data / "spec_no_run.json").write_text(json.dumps({"interventions": [
        {"site": {"stream": "layer_out"}, "operation": {"kind": "patch", "run": "/no/such/run"}}]}))
    (data / "spec_mean_far.json").write_text(json.dumps({"interventions": [
        {"site": {"stream": "layer_out", "positions": [5]}, "operation": {"kind": "mean", "run": str(run)}}]}))
    (data / "train_ok.jsonl").write_text(json.dumps({"prompt": "1 + 1 =", "completion": " 2"}) + "\n")
    (data / "train_null.jsonl").write_text(json.dumps({"prompt": "1 + 1 =", "completion": " 2"}) + "\n"
                                           + json.dumps({"prompt": None, "completion": " 2"}) + "\n")
    (data / "train_no_turn.jsonl").write_text(json.dumps({"text": "<start_of_turn>user\nhi<end_of_turn>\n"}) + "\n")
    syn = root / "syn"
    write_synthetic_run(syn / "pristine", SyntheticSpec(**SYNTHETIC))
    (data / "spec_resample_wide.json").write_text(json.dumps({"interventions": [  # d = 48, the tiny model's is 32
        {"site": {"stream": "layer_out", "positions": [0]},
         "operation": {"kind": "resample", "run": str(syn / "pristine")}}]}))
    for name, damage in (("no-generations", lambda r: (r / "generations.parquet").unlink()),
                         ("no-questions", lambda r: (r / "questions.parquet").unlink()),
                         ("flipped-questions", lambda r: flip_page(r / "questions.parquet", "prompt")),
                         ("truncated-generations", lambda r: _truncate(r / "generations.parquet")),
                         ("truncated-questions", lambda r: _truncate(r / "questions.parquet"))):
        shutil.copytree(syn / "pristine", syn / name)
        damage(syn / name)
    ablation = {"theta_init": -1.8, "update": "direct"}
    write_synthetic_run(syn / "ablation-main", SyntheticSpec(**SYNTHETIC, sst=ablation))
    for name, change in (("ablation-fewer", {"n_questions": 30}), ("ablation-shallow", {"depths": (1, 2)})):
        write_synthetic_run(syn / name, SyntheticSpec(**{**SYNTHETIC, **change}, sst=dict(ablation, theta_init=0.0)))
    (data / "external_no_source.csv").write_text("model,parameters,accuracy,prompting\nModel A,1B,50,0-shot\n")
    (data / "external_text.csv").write_text("model,parameters,accuracy,prompting,source\nModel A,1B,50,0-shot,x\n"
                                            "Model B,2B,high,0-shot,y\n")
    return {"model": model, "run": run, "data": data, "syn": syn}


@pytest.fixture(scope="module")
def read_only_folder(tmp_path_factory) -> Iterator[Path]:
    """A folder nothing can be written into: a read-only tmpfs where the tests may mount one, else mode 0o555."""
    folder = tmp_path_factory.mktemp("read-only")
    mounted = shutil.which("mount") is not None and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)], capture_output=True).returncode == 0
    if not mounted:
        folder.chmod(0o555)
        if os.access(folder, os.W_OK):  # root without mount: permission bits do not stop it
            pytest.skip("no read-only folder on this machine (root, and mounting is not allowed)")
    yield folder
    if mounted:
        subprocess.run(["umount", str(folder)], check=True)
    else:
        folder.chmod(0o755)


def _truncate(target: Path) -> None:
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _no_lookup(lookups: list[str]) -> Callable[..., object]:
    """A ``socket.getaddrinfo`` that records the host and refuses, as a machine without a network would."""

    def lookup(host, *args, **kwargs):
        lookups.append(str(host))
        raise socket.gaierror(socket.EAI_NONAME, "no network in this test")

    return lookup


def _hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder`` by relative path (empty when it does not exist)."""
    if not folder.exists():
        return {}
    if folder.is_file():
        return {folder.name: hashlib.sha256(folder.read_bytes()).hexdigest()}
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------------------------------ the test
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_one_line_and_exit_2(case, files, tmp_path, capfd, caplog, monkeypatch, request):
    values = {key: str(value) for key, value in files.items()}
    values["out"] = str(tmp_path / "out")
    values["port"] = str(_free_port())
    if "{ro}" in " ".join(case.argv):
        values["ro"] = str(request.getfixturevalue("read_only_folder"))
    argv = [part.format(**values) for part in case.argv]
    env = {key: value.format(**values) for key, value in case.env.items()}
    protected = [files["run"], files["syn"], files["data"], files["model"]]
    before = {str(p): _hashes(p) for p in protected}
    capfd.readouterr()
    for name in LAUNCHER_VARIABLES:  # none inherited from the shell that runs the tests
        if name not in env:
            monkeypatch.delenv(name, raising=False)
    lookups: list[str] = []
    started = time.monotonic()
    if case.subprocess:
        result = subprocess.run([sys.executable, "-m", f"sst_interp.{case.command}", *argv], capture_output=True,
                                text=True, env={**os.environ, **env}, cwd=tmp_path, timeout=120)
        code, stdout, stderr = result.returncode, result.stdout, result.stderr
    else:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        if "HF_HUB_OFFLINE" in env:  # huggingface_hub reads it once, at import
            import huggingface_hub.constants

            monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        monkeypatch.chdir(tmp_path)  # a command that falls back to a default --out writes here, not in the repo
        if case.offline:
            monkeypatch.setattr(socket, "getaddrinfo", _no_lookup(lookups))
        with pytest.raises(SystemExit) as exit_info, warnings.catch_warnings(record=True) as warned:
            # what a real process shows: Python's default filters (pytest would take the warnings away)
            warnings.resetwarnings()
            for hidden in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", hidden)
            _command(case.command)(argv)
        code = exit_info.value.code
        stdout, stderr = capfd.readouterr()
        assert not warned, [f"{w.category.__name__}: {w.message}" for w in warned]
    elapsed = time.monotonic() - started
    lines = [line for line in stderr.splitlines() if line.strip() and not PROGRESS.search(line)]
    assert code == 2, (code, stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-2000:]
    assert "Traceback" not in stderr
    assert case.expect.format(**values) in lines[0], lines[0]
    assert stdout.strip() == "", stdout[-2000:]
    # in-process, pytest takes what libraries log away from stderr: a warning logged on the way counts as a line
    logged = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.WARNING]
    assert not logged, logged
    assert not (tmp_path / "out").exists(), sorted(p.name for p in (tmp_path / "out").iterdir())
    assert {str(p): _hashes(p) for p in protected} == before
    assert lookups == [], f"looked up {lookups} while offline"
    if case.hang:
        assert elapsed < HANG_S, f"refused after {elapsed:.1f} s"
