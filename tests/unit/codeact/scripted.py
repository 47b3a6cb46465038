"""A tiny Gemma 3 whose weights are trained here, in seconds, to act out known CodeACT episodes.

The issue allows "a tiny model whose weights or logits you set so that it emits a known code block"; these weights
are set by memorisation: a 2-layer Gemma 3 is trained on the exact conversations below, whose tool responses are
produced by the real sandbox, until greedy decoding reproduces every model turn. It then runs through the real
episode loop, with nothing mocked, so the tests can assert exact conversation text.

Episodes (task -> model turns):

- ``mul``: computes 6 * 7 in one block, then calls ``finish_session(str(x))`` in a second block, which only works
  if ``x`` survived in the interpreter: ``finish_session`` with ``"42"``.
- ``err``: prints 2 + 3 (after a short sleep, so a test can kill the run while this episode runs), then reads an
  undefined name (a NameError comes back), then answers ``5`` in text: ``no_code`` after 3 turns.
- ``text``: answers ``5`` in text at once: ``no_code`` after 1 turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from sst_interp.codeact.episode import EpisodeConfig, tool_output_text
from sst_interp.codeact.format import ActionFormat, encode_with_actions
from sst_interp.data.question import Question
from sst_interp.model.testing import char_tokenizer, tiny_gemma3
from sst_interp.sandbox import PythonSession, SandboxConfig

FORMAT = ActionFormat(action_tokens=(("<execute>", 120), ("</execute>", 121)))
TURN_MARKERS = ["<start_of_turn>", "<end_of_turn>"]


@dataclass(frozen=True)
class Script:
    question_id: str
    task: str
    reference: str
    turns: tuple[str, ...]


SCRIPTS = (
    Script("mul", "6*7=", "42", ("<execute>\nx = 6 * 7\nprint(x)\n</execute>",
                                 "<execute>\nfinish_session(str(x))\n</execute>")),
    Script("err", "2+3=", "5", ("<execute>\nimport time\ntime.sleep(1.5)\nprint(2 + 3)\n</execute>",
                                "<execute>\nprint(y)\n</execute>", "5<end_of_turn>")),
    Script("text", "9-4=", "5", ("5<end_of_turn>",)),
)
EPISODE_CONFIG = EpisodeConfig(max_turns=4, max_context_tokens=600, tool_output_chars=400, fmt=FORMAT)


def tokenizer():
    """The character tokenizer plus the two Gemma turn markers as single special tokens."""
    tok = char_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": TURN_MARKERS})
    return tok


def question(script: Script) -> Question:
    """The demo-graded question whose prompt is the episode's first turn (no system text: short sequences)."""
    return Question(script.question_id, "demo", FORMAT.first_turn("", script.task), script.reference)


def conversation(script: Script, sandbox: SandboxConfig) -> list[tuple[str, bool]]:
    """The episode as (text piece, is a model turn) pieces; tool responses come from running the code for real."""
    pieces = [(FORMAT.first_turn("", script.task), False)]
    with PythonSession(sandbox) as session:
        for turn in script.turns:
            pieces.append((turn, True))
            if turn.endswith("</execute>"):
                code = turn[len("<execute>\n"): -len("\n</execute>")]
                result = session.execute(code)
                if result.finish_answer is not None:
                    break
                output = tool_output_text(result.stdout, result.stderr, EPISODE_CONFIG.tool_output_chars)
                pieces.append((FORMAT.tool_turn(output), False))
    return pieces


def encode(pieces: list[tuple[str, bool]], tok) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids [T] and next-token labels [T] (-100 outside model turns)."""
    ids, labels = [], []
    for text, is_model in pieces:
        piece = encode_with_actions(text, tok, FORMAT.action_tokens)[0]
        ids.extend(piece)
        labels.extend(piece if is_model else [-100] * len(piece))
    return torch.tensor(ids), torch.tensor(labels)


def train_scripted_backbone(sandbox: SandboxConfig, steps: int = 400, seed: int = 0):
    """Train the tiny backbone on the three conversations; returns (backbone, tokenizer, final loss)."""
    tok = tokenizer()
    torch.manual_seed(seed)
    model = tiny_gemma3(num_layers=2, hidden_size=64, sliding_window=16, vocab_size=128, dtype=torch.float32,
                        seed=seed)
    data = [encode(conversation(script, sandbox), tok) for script in SCRIPTS]
    width = max(len(ids) for ids, _ in data)
    input_ids = torch.zeros(len(data), width, dtype=torch.long)
    labels = torch.full((len(data), width), -100, dtype=torch.long)
    mask = torch.zeros(len(data), width, dtype=torch.long)
    for row, (ids, lab) in enumerate(data):
        input_ids[row, : len(ids)], labels[row, : len(ids)], mask[row, : len(ids)] = ids, lab, 1
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        optimiser.zero_grad()
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimiser.step()
        if loss.item() < 1e-3:
            break
    model.eval()
    return model, tok, float(loss.detach())


def save_scripted_model(folder: Path, sandbox: SandboxConfig) -> Path:
    """Train and save the scripted backbone and its tokenizer as a Hugging Face folder."""
    model, tok, loss = train_scripted_backbone(sandbox)
    if loss > 0.01:
        raise AssertionError(f"the scripted model did not memorise its episodes (loss {loss:.4f})")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
