"""A model-independent fake: a tiny stack of gated-MLP layers and a driver that calls the observer protocol.

The driver mimics iterative generation: a prompt pass that emits nothing, then for each position ``depth``
passes (iteration 1 runs the whole prompt at position 0; later passes feed the last output back in), logits from
a fixed head, and rows that finish at chosen positions. It keeps, independently of any hook, what every layer
produced at the last column of every pass, so the tests can compare the recorder against it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Info:
    position: int | None
    iteration: int
    depth: int
    active: torch.Tensor
    turn: int = 0


class GatedMLP(nn.Module):
    def __init__(self, d: int, f: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d, f, bias=True)
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, d: int, f: int) -> None:
        super().__init__()
        self.mlp = GatedMLP(d, f)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(x)


class Stack(nn.Module):
    def __init__(self, d: int = 16, f: int = 20, layers: int = 3, vocab: int = 12, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.layers = nn.ModuleList(Layer(d, f) for _ in range(layers))
        self.head = nn.Linear(d, vocab, bias=False)
        self.hidden_size = d


@dataclass
class Truth:
    outputs: dict  # (turn, position, iteration, layer) -> [B, d] float32 output at the last column
    gates: dict  # (turn, position, iteration, layer) -> [B, F] gate pre-activation at the last column
    logits: dict  # (turn, position, iteration) -> [B, V]
    active: dict  # (turn, position) -> [B] bool during that position's passes
    prompt_outputs: list  # last-column outputs of the passes that emit nothing


def drive(stack: Stack, prompt: torch.Tensor, depth: int, positions: int, finish_at: list[int], observer,
          turn: int = 0, fail_at: tuple[int, int] | None = None) -> Truth:
    """Run the fake generation. prompt: [B, T, d]; row b finishes after emitting its token at finish_at[b]."""
    batch = prompt.shape[0]
    truth = Truth({}, {}, {}, {}, [])
    active = torch.ones(batch, dtype=torch.bool)

    def run(x: torch.Tensor, info: Info, key) -> torch.Tensor:
        observer.on_pass_start(info)
        for index, layer in enumerate(stack.layers):
            gate = nn.functional.linear(x, layer.mlp.gate_proj.weight, layer.mlp.gate_proj.bias)  # not hooked
            x = layer(x)
            if key is not None:
                truth.outputs[key + (index,)] = x[:, -1].detach().clone()
                truth.gates[key + (index,)] = gate[:, -1].detach().clone()
            else:
                truth.prompt_outputs.append(x[:, -1].detach().clone())
        logits = stack.head(x[:, -1])
        if key is not None:
            truth.logits[key] = logits.detach().clone()
        observer.on_pass_end(info, logits if key is not None else None)
        return x

    with torch.no_grad():
        run(2 * prompt, Info(None, 1, depth, active, turn), None)  # a pass that emits nothing
        x = prompt
        for position in range(positions):
            if not bool(active.any()):
                break
            truth.active[(turn, position)] = active.clone()
            for iteration in range(1, depth + 1):
                if fail_at == (position, iteration):
                    raise RuntimeError("boom")
                out = run(x, Info(position, iteration, depth, active, turn), (turn, position, iteration))
                x = out[:, -1:] * 0.5 + x[:, -1:].roll(1, dims=-1)  # the next pass reads something new
            token = truth.logits[(turn, position, depth)].argmax(-1)
            observer.on_token(position, token, active.clone())
            for row in range(batch):
                if position >= finish_at[row]:
                    active[row] = False  # in place, as the real generator does
    return truth
