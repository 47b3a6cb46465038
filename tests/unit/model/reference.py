"""An independent reference for iterative decoding: every pass recomputed from scratch, no KV cache.

Each committed position s keeps the state it *read* at its final pass (per layer). A pass at the current position
runs the whole prefix in ``given`` mode, giving positions s < t their recorded read states and position t the state
it reads now; position t's updated state becomes the carried state. Earlier positions' keys and values are thus
recomputed from exactly what produced them, which is what the cached implementation must reproduce.
"""

from __future__ import annotations

import torch

from sst_interp.model import SSTModel
from sst_interp.model.scan import shift_states


def reference_decode(sst: SSTModel, prompt: list[int], depth: int, max_new_tokens: int,
                     prompt_mode: str = "sequential") -> tuple[list[int], dict[tuple[int, int], torch.Tensor]]:
    """Greedy decode of one prompt without a cache. Returns tokens and logits per (position, iteration)."""
    layers = list(sst.state_modules())
    committed: dict[int, list[torch.Tensor]] = {layer: [] for layer in layers}  # read state of each committed pos

    def run_pass(tokens: list[int], read: dict[int, torch.Tensor]):
        ids = torch.tensor([tokens], device=sst.device)
        given = {layer: torch.stack(committed[layer] + [read[layer]])[None] for layer in layers}
        with sst.state_mode("given", given=given, capture="state") as states:
            hidden = sst.decoder_forward(input_ids=ids, use_cache=False)
        return sst.lm_logits(hidden[:, -1:])[0, -1], {layer: states[layer][0, -1] for layer in layers}

    def commit(read: dict[int, torch.Tensor]) -> None:
        for layer in layers:
            committed[layer].append(read[layer])

    with torch.no_grad():
        zero = {layer: torch.zeros(sst.hidden_size, dtype=sst.dtype, device=sst.device) for layer in layers}
        if prompt_mode == "sequential":
            read = zero
            for t in range(len(prompt)):
                logits, carry = run_pass(prompt[: t + 1], read)
                if t < len(prompt) - 1:
                    commit(read)
                    read = carry
        elif prompt_mode == "two_pass":
            with sst.state_mode("off", capture="output") as outputs:
                sst.decoder_forward(input_ids=torch.tensor([prompt], device=sst.device), use_cache=False)
            shifted = {layer: shift_states(outputs[layer])[0] for layer in layers}
            for t in range(len(prompt) - 1):
                commit({layer: shifted[layer][t] for layer in layers})
            read = {layer: shifted[layer][-1] for layer in layers}
            logits, carry = run_pass(prompt, read)
        else:
            raise ValueError(prompt_mode)

        tokens = list(prompt)
        generated: list[int] = []
        logits_by_pass: dict[tuple[int, int], torch.Tensor] = {(0, 1): logits}
        for position in range(max_new_tokens):
            if position > 0:
                read = carry
                logits, carry = run_pass(tokens, read)
                logits_by_pass[(position, 1)] = logits
            for iteration in range(2, depth + 1):
                read = carry
                logits, carry = run_pass(tokens, read)
                logits_by_pass[(position, iteration)] = logits
            token = int(logits.argmax())
            generated.append(token)
            commit(read)
            tokens.append(token)
        return generated, logits_by_pass
