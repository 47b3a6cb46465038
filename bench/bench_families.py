"""Recording overhead of the latent-iteration families against the family's own ``generate``, side by side in one run.

Run: ``OMP_NUM_THREADS=1 python bench/bench_families.py [--depth 2] [--new-tokens 16] [--repeats 5]``

For each family (HRM-Text, Inkling-2 Loop; tiny random configs of transformers' own classes, float32, one prompt):

- ``hf generate``: transformers' own greedy ``model.generate`` at the depth (the family's reference);
- ``generate_looped``: :func:`sst_interp.model.loop_model.generate_looped`, the generation ``record`` runs, with no
  observer;
- ``recorded``: the same with the :class:`~sst_interp.hooks.VisitRecorder` attached (every position in full, its
  sketches and per-iteration lens logits), columns built as ``record`` submits them.

The three are interleaved (hf, ours, recorded, hf, ...) so load drift hits all alike; the medians and the ratios
``generate_looped / hf generate`` and ``recorded / hf generate`` are printed. Tokens are checked equal first.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from sst_interp.hooks import RecordConfig, VisitRecorder
from sst_interp.model.generation import GenerationConfig
from sst_interp.model.loop_model import LoopModel, generate_looped
from sst_interp.model.testing import tiny_hrm_text, tiny_inkling2_loop

PROMPT = [2, 17, 40, 9, 33, 5, 61, 70]
BUILDERS = {"hrm_text": tiny_hrm_text, "inkling2_loop": tiny_inkling2_loop}


def _hf(model: LoopModel, depth: int, new: int) -> list[int]:
    with model.at_depth(depth), torch.no_grad():
        out = model.backbone.generate(torch.tensor([PROMPT]), max_new_tokens=new, min_new_tokens=new,
                                      do_sample=False, pad_token_id=0, eos_token_id=None)
    return out[0, len(PROMPT):].tolist()


def _ours(model: LoopModel, depth: int, new: int) -> list[int]:
    return generate_looped(model, [PROMPT], depth, GenerationConfig(max_new_tokens=new)).token_ids[0]


def _recorded(model: LoopModel, depth: int, new: int) -> list[int]:
    config = RecordConfig(full_positions=new, sketch_positions=0, top_k=16)
    with VisitRecorder.for_model(model, ["q"], config) as recorder:
        result = generate_looped(model, [PROMPT], depth, GenerationConfig(max_new_tokens=new), observer=recorder)
    recorder.columns()
    return result.token_ids[0]


def bench(family: str, depth: int, new: int, repeats: int) -> dict[str, float]:
    model = LoopModel(BUILDERS[family](dtype=torch.float32))
    runs = {"hf generate": _hf, "generate_looped": _ours, "recorded": _recorded}
    tokens = {name: fn(model, depth, new) for name, fn in runs.items()}  # also the warm-up
    assert len({tuple(t) for t in tokens.values()}) == 1, f"{family}: the three generations disagree: {tokens}"
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            started = time.perf_counter()
            fn(model, depth, new)
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"depth {args.depth}, {args.new_tokens} new tokens, {args.repeats} repeats, torch threads "
          f"{torch.get_num_threads()}")
    for family in BUILDERS:
        median = bench(family, args.depth, args.new_tokens, args.repeats)
        hf = median["hf generate"]
        print(f"{family:>14}: hf generate {hf * 1e3:7.1f} ms | generate_looped {median['generate_looped'] * 1e3:7.1f} "
              f"ms ({median['generate_looped'] / hf:.3f}x) | recorded {median['recorded'] * 1e3:7.1f} ms "
              f"({median['recorded'] / hf:.3f}x)")


if __name__ == "__main__":
    main()
