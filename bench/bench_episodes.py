"""The CodeACT episode loop's overhead beyond generation, per episode, on a real backbone.

Run: ``python bench/bench_episodes.py [--model default|PATH] [--episodes 4] [--depth 2] [--turn-tokens 48]
[--sandbox bwrap|subprocess]``

Each episode is a two-turn CodeACT exchange driven through the same pieces ``record --protocol codeact`` uses, on a
GSM8K-style first turn (the first GSM8K test questions when ``--data`` is given, else built-in demo items):

1. model turn 0: :meth:`GenerationSession.run_turn` for ``--turn-tokens`` tokens at ``--depth``;
2. the tool round trip: a sandboxed interpreter starts (:class:`~sst_interp.sandbox.PythonSession`) and runs a
   block of the kind the CodeACT traces hold (three named arithmetic steps and a ``print``);
3. its output is appended as a tool-response turn and prefilled on the kept cache (:meth:`GenerationSession.append`);
4. model turn 1: ``--turn-tokens`` more tokens; then the interpreter is closed.

The base model does not write ``<execute>`` blocks itself, so the turn text is whatever it writes; the loop's costs
(interpreter start and round trip, appended prefill) do not depend on it. Printed per episode: generation seconds
(both turns' decoding, the appended prefill excluded), appended-prefill seconds, sandbox seconds, and
``overhead / generation`` = (sandbox + appended prefill) / generation. Run with OMP_NUM_THREADS=1 on a shared CPU.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from sst_interp.codeact.episode import tool_output_text
from sst_interp.codeact.format import ActionFormat, encode_with_actions
from sst_interp.codeact.prompts import codeact_question
from sst_interp.data import load_questions
from sst_interp.model import GenerationConfig, SSTConfig, SSTModel
from sst_interp.model.backbone import load_backbone
from sst_interp.model.depth_policy import FixedDepth
from sst_interp.model.generation import GenerationSession
from sst_interp.sandbox import PythonSession, SandboxConfig, check_backend

BLOCK = "step1 = 48 / 2\nstep2 = 48 + step1\nstep3 = step2 * 3\nprint(step3)"


def one_episode(sst, tokenizer, prompt: str, args, sandbox: SandboxConfig) -> dict[str, float]:
    fmt = ActionFormat()
    ids = encode_with_actions(prompt, tokenizer, fmt.action_tokens)[0]
    config = GenerationConfig(max_new_tokens=args.turn_tokens, prompt_mode="two_pass", eos_token_ids=(),
                              pad_token_id=tokenizer.pad_token_id or 0, logits_every_iteration=True)
    times = {}
    with torch.no_grad(), GenerationSession(sst, [ids], FixedDepth(args.depth), config) as session:
        started = time.perf_counter()
        session.run_turn()
        times["turn0"] = time.perf_counter() - started
        started = time.perf_counter()
        with PythonSession(sandbox) as interpreter:
            result = interpreter.execute(BLOCK)
            times["sandbox_run"] = time.perf_counter() - started
            segment = encode_with_actions(fmt.tool_turn(tool_output_text(result.stdout, result.stderr, 2000)),
                                          tokenizer, fmt.action_tokens)[0]
            session.append([segment])
            started = time.perf_counter()
            session.run_turn()
            times["turn1"] = time.perf_counter() - started
            times["append_prefill"] = session.last_prefill_s
            closing = time.perf_counter()
        times["sandbox"] = times["sandbox_run"] + (time.perf_counter() - closing)
    times["generation"] = times["turn0"] + times["turn1"] - times["append_prefill"]
    times["segment_tokens"] = len(segment) + 1
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--data", default=None, help="GSM8K folder/file (default: built-in demo items)")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--turn-tokens", type=int, default=48)
    parser.add_argument("--sandbox", default="bwrap", choices=("bwrap", "subprocess"))
    args = parser.parse_args()
    backbone, tokenizer = load_backbone(args.model, dtype="float32")
    sst = SSTModel.from_backbone(backbone, SSTConfig())
    source = "gsm8k" if args.data else "demo"
    questions = [codeact_question(q) for q in load_questions(source, args.data)[: args.episodes]]
    sandbox = SandboxConfig(backend=args.sandbox)
    check_backend(sandbox)
    one_episode(sst, tokenizer, questions[0].prompt, args, sandbox)  # warm-up (first-call allocations)
    print(f"model {args.model}, depth {args.depth}, {args.turn_tokens} tokens per turn, sandbox {args.sandbox}, "
          f"torch threads {torch.get_num_threads()}")
    print(f"{'episode':>7} {'generation s':>12} {'append prefill s':>16} {'segment tok':>11} {'sandbox s':>9} "
          f"{'overhead/gen':>12}")
    ratios = []
    for index, question in enumerate(questions):
        t = one_episode(sst, tokenizer, question.prompt, args, sandbox)
        ratio = (t["sandbox"] + t["append_prefill"]) / t["generation"]
        ratios.append(ratio)
        print(f"{index:>7} {t['generation']:>12.2f} {t['append_prefill']:>16.3f} {int(t['segment_tokens']):>11} "
              f"{t['sandbox']:>9.3f} {ratio:>12.3f}")
    print(f"median overhead / generation: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
