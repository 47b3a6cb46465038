"""``with sst.intervene(...) as iv:``: interventions from Python, with live patch sources, per-row specs and the
streams back as tensors.

A cross-prompt patching sweep (layer x iteration at position 0; row ``src`` holds the clean prompt, every other
row the corrupted one and its own cell)::

    cells = [(layer, it) for layer in range(sst.num_layers) for it in range(1, depth + 1)]
    src = len(cells)
    specs = [InterventionSpec.of(Site("layer_out", layers=l, positions=0, iterations=i), Operation("patch", source=src))
             for l, i in cells] + [InterventionSpec()]
    with sst.intervene(specs, capture=["logits"]) as iv:
        iv.generate([corrupt] * len(cells) + [clean], depth, GenerationConfig(max_new_tokens=1))
    logits = iv.captured("logits")[:, 0, -1]  # [rows, V]: position 0, last iteration

The whole sweep is one generation of ``cells + 1`` rows. A ``source="clean"`` patch doubles the batch: row r's
clean twin (the same prompt, never intervened) runs alongside as row r + n and is read in the same forward pass;
:meth:`LiveIntervention.generate` returns the intervened rows, and the twins' streams under ``clean=True``.

The context owns what it installs: the :class:`~sst_interp.interventions.apply.Intervener` sits on the model only
while :meth:`LiveIntervention.generate` runs (removed on return and on error), so the model is clean again after
every call and after the block.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch

from sst_interp.interventions.apply import CAPTURABLE, Intervener, intervene
from sst_interp.interventions.checks import check_spec
from sst_interp.interventions.spec import CLEAN_SOURCE, InterventionSpec
from sst_interp.kernels.errors import UsageError
from sst_interp.model.generation import generate


class LiveIntervention:
    """Specs (one for every row, or one per row) and the streams to capture, applied to every generation run
    through :meth:`generate` inside the ``with`` block. Made by :meth:`~sst_interp.model.sst.SSTModel.intervene`.

    Args:
        sst: the SST.
        spec: one :class:`InterventionSpec` for every row, or a sequence of them, one per row of each batch.
        capture: streams to return as tensors (:data:`~sst_interp.interventions.apply.CAPTURABLE`); more can be
            named with :meth:`capture` before generating.
        question_ids: the question of each row, for patches that read a recorded run.
        functions: the Python functions ``map`` rules name (:class:`~sst_interp.interventions.apply.Intervener`).
    """

    def __init__(self, sst: Any, spec: InterventionSpec | Sequence[InterventionSpec], capture: Sequence[str] = (),
                 question_ids: Sequence[str | None] | None = None,
                 functions: Mapping[str, Callable[[torch.Tensor], torch.Tensor]] | None = None) -> None:
        if not hasattr(sst, "context"):
            raise UsageError(f"sst.intervene works on an SSTModel; for {type(sst).__name__} use "
                             f"sst_interp.interventions.loops.intervene_loop")
        self.sst = sst
        self.spec = spec
        self.question_ids = question_ids
        self.functions = dict(functions or {})
        specs = [spec] if isinstance(spec, InterventionSpec) else list(spec)
        for one in specs:  # a spec this model cannot take fails at construction, before any generation
            if not isinstance(one, InterventionSpec):
                raise UsageError("sst.intervene takes an InterventionSpec or a list of them, one per batch row")
            check_spec(one, sst.num_layers, sst.hidden_size)
        self.alongside = any(item.operation.source == CLEAN_SOURCE for one in specs for item in one.interventions)
        self._streams: list[str] = []
        self.capture(*capture)
        self._entered = False
        self.intervener: Intervener | None = None  # the latest generation's, kept for its site report and captures
        self.result: Any = None  # the latest GenerationResult of the intervened rows
        self.clean_result: Any = None  # of their clean twins, when a source is "clean"

    def capture(self, *streams: str) -> LiveIntervention:
        """Name more streams to capture (``state_in``, ``blended``, ``layer_out``, ``logits``); returns self."""
        bad = [name for name in streams if name not in CAPTURABLE]
        if bad:
            raise UsageError(f"cannot capture {bad}; capture one of {', '.join(CAPTURABLE)}")
        self._streams += [name for name in streams if name not in self._streams]
        return self

    def __enter__(self) -> LiveIntervention:
        if self.sst.context.intervention is not None:
            raise UsageError("an intervention is already active on this model; nest specs by joining their lists")
        self._entered = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self._entered = False

    def generate(self, prompts: list[list[int]], depth: Any = 1, config: Any = None, decode_fn: Any = None) -> Any:
        """Generate ``prompts`` (token id lists, one per row) under the specs, as
        :func:`~sst_interp.model.generation.generate` does, and keep the captured streams.

        Returns:
            The :class:`~sst_interp.model.generation.GenerationResult` of the rows given (the clean twins' is
            :attr:`clean_result`).
        """

        if not self._entered:
            raise UsageError("generate inside the block: with sst.intervene(...) as iv: iv.generate(...)")
        rows = len(prompts)
        batch = list(prompts) + (list(prompts) if self.alongside else [])
        ids = None if self.question_ids is None else (list(self.question_ids)
                                                      + ([None] * rows if self.alongside else []))
        options = {"alongside": rows if self.alongside else None, "capture": tuple(self._streams),
                   "functions": self.functions}
        with intervene(self.sst, self.spec, ids, **options) as intervener:
            intervener.check_batch(len(batch))  # refused before the first pass
            result = generate(self.sst, batch, depth, config, observer=intervener, decode_fn=decode_fn)
        self.intervener = intervener
        self.result, self.clean_result = _split(result, rows) if self.alongside else (result, None)
        return self.result

    def captured(self, stream: str, clean: bool = False, turn: int = 0) -> torch.Tensor:
        """A captured stream of the latest generation: [rows, positions, iterations, layers, d] for ``state_in``,
        ``blended`` and ``layer_out`` (after the interventions: what the next layer or pass read), [rows,
        positions, iterations, V] for ``logits``; index [r, p, i - 1] is position p, iteration i. NaN where nothing
        ran (a finished row, a layer without a state stream for ``state_in``/``blended``, logits the LM head did
        not compute: pass ``logits_every_iteration`` for every iteration's). ``clean=True``: the clean twins'."""
        if self.intervener is None:
            raise UsageError("nothing captured yet: call iv.generate(...) inside the block first")
        if clean and not self.alongside:
            raise UsageError("no clean pass ran alongside: only a patch with source 'clean' runs one")
        values = self.intervener.captured(stream, turn)
        if not self.alongside:
            return values
        half = values.shape[0] // 2
        return values[half:] if clean else values[:half]

    def site_report(self) -> list[dict[str, Any]]:
        """The latest generation's sites per rule (:meth:`~sst_interp.interventions.apply.Intervener.site_report`)."""
        if self.intervener is None:
            raise UsageError("no generation yet: call iv.generate(...) inside the block first")
        return self.intervener.site_report()


def _split(result: Any, rows: int) -> tuple[Any, Any]:
    """A doubled batch's GenerationResult as (the first ``rows`` rows', the rest's)."""
    def part(take: slice) -> Any:
        return replace(result, token_ids=result.token_ids[take], stop_reasons=result.stop_reasons[take],
                       chosen_depth=result.chosen_depth[take], iterations=result.iterations[take])

    return part(slice(0, rows)), part(slice(rows, None))

