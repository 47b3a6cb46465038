"""Two-pass SST training step vs a plain one-pass LoRA step, measured side by side in one run.

Run: ``python bench/bench_train.py [--model default|tiny|PATH] [--tokens 256] [--repeats 3] [--threads N]``

Both models are built by :mod:`sst_interp.train` from the same backbone with the same LoRA settings (the paper's:
r=64, alpha=64, dropout 0.05 on attention, MLP and lm_head), gradient checkpointing on (the paper's setting; pass
``--no-gradient-checkpointing`` to compare without it), and run the same batch: one sequence of ``--tokens`` demo
tokens whose second half is labelled (a model turn). One step = forward (SST: pass 1 without blend, shift, pass 2
with blend; baseline: one pass), chunked cross-entropy, backward, gradient clipping, AdamW step. Steps alternate
(SST, baseline, SST, ...) so load drift hits both alike; the ratio of the medians is printed with both medians.
The project's target: at most 2.2.

On a shared CPU machine pass ``--threads 1``: oversubscribed intra-op threads make timings erratic.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from sst_interp.train.config import TrainConfig
from sst_interp.train.data import Batch
from sst_interp.train.loop import micro_batch_loss
from sst_interp.train.modeling import TrainModel, build_train_model
from sst_interp.train.optim import build_optimizer

TARGET = 2.2


def load(model: str):
    """(backbone, tokenizer); ``tiny`` is a random 3-layer Gemma 3 with a character tokenizer."""
    if model == "tiny":
        from sst_interp.model.testing import char_tokenizer, tiny_gemma3

        return tiny_gemma3(dtype=torch.float32), char_tokenizer()
    from sst_interp.model.backbone import load_backbone

    return load_backbone(model, dtype="float32")


def make_batch(tokenizer, tokens: int) -> Batch:
    """One sequence of ``tokens`` demo tokens; the second half is labelled."""
    from sst_interp.train.demo_data import demo_rows

    ids: list[int] = []
    for row in demo_rows(4 * tokens, seed=7):
        ids.extend(tokenizer(row["prompt"] + row["completion"]).input_ids)
        if len(ids) >= tokens:
            break
    input_ids = torch.tensor([ids[:tokens]])
    labels = input_ids.clone()
    labels[:, : tokens // 2] = -100
    starts = torch.zeros_like(input_ids, dtype=torch.bool)
    starts[:, 0] = True
    return Batch(input_ids, labels, torch.arange(tokens)[None], starts, [(0,)], tokens - tokens // 2)


def train_step(model: TrainModel, optimizer: torch.optim.Optimizer, batch: Batch,
               chunk_size: int = 1024) -> tuple[float, float]:
    """One optimiser step on ``batch`` as training takes it: forward (SST: two passes), chunked cross-entropy,
    backward, clipping at 1.0, AdamW step. Returns (loss per labelled token, seconds).

    The clock stops after the device finished the step (a CUDA step is asynchronous until synchronised).
    """
    model.train()
    _synchronize(model.device)
    started = time.perf_counter()
    loss, n = micro_batch_loss(model, batch, chunk_size)
    (loss / n).backward()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    _synchronize(model.device)
    seconds = time.perf_counter() - started
    return float(loss.detach()) / n, seconds


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--lora-r", type=int, default=64)
    parser.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    out = tempfile.mkdtemp(prefix="bench_train_")
    models, optimizers = {}, {}
    for name, baseline in (("sst", False), ("baseline", True)):
        backbone, tokenizer = load(args.model)
        config = TrainConfig(train_data="unused", out=out, baseline=baseline, lora_r=args.lora_r,
                             lora_alpha=float(args.lora_r), gradient_checkpointing=args.gradient_checkpointing,
                             device="cpu", quantize="none")
        torch.manual_seed(0)
        models[name] = build_train_model(backbone, config)
        optimizers[name] = build_optimizer(models[name].lora_parameters(), models[name].sst_parameters(), config)
    batch = make_batch(tokenizer, args.tokens)

    def step(name: str) -> float:
        return train_step(models[name], optimizers[name], batch)[1]

    step("sst"), step("baseline")  # warm-up
    times: dict[str, list[float]] = {"sst": [], "baseline": []}
    for _ in range(args.repeats):
        for name in ("sst", "baseline"):
            times[name].append(step(name))
    sst, base = statistics.median(times["sst"]), statistics.median(times["baseline"])
    ratio = sst / base
    print(f"model {args.model}, {args.tokens} tokens ({batch.num_label_tokens} labelled), LoRA r={args.lora_r}, "
          f"gradient checkpointing {'on' if args.gradient_checkpointing else 'off'}, "
          f"{torch.get_num_threads()} threads, {args.repeats} repeats")
    print(f"two-pass SST step   : {sst:8.3f} s (median; all {', '.join(f'{t:.3f}' for t in times['sst'])})")
    print(f"one-pass LoRA step  : {base:8.3f} s (median; all {', '.join(f'{t:.3f}' for t in times['baseline'])})")
    print(f"ratio SST / baseline: {ratio:8.3f}  (target <= {TARGET}: {'met' if ratio <= TARGET else 'NOT met'})")


if __name__ == "__main__":
    main()
