"""Applying an :class:`~sst_interp.interventions.spec.InterventionSpec` during generation.

Usage::

    with intervene(sst, spec, question_ids=ids) as intervener:
        result = generate(sst, prompts, depth, config, observer=intervener)
    # with a recorder as well: observer=ObserverGroup(intervener, recorder)

The :class:`Intervener` is a generation observer (it learns each pass's turn, position and iteration from
``on_pass_start``) and, while the ``with`` block lasts, the hook object of the model's state-stream context
(:class:`~sst_interp.model.layer.StateStreamContext`), which every SST layer offers its streams to. Passes that emit
no token (prompt passes, two-pass pass 1) are never changed; ``state_in``, ``alpha`` and ``blended`` exist only in
layers with a state stream in passes that read one, while ``layer_out`` can be changed in every layer of every
pass that emits a token (also position 0 under the prompt mode ``none``, where the stream is off). In a pass that
covers several columns (the two-pass prefill's pass 2 is generated position 0, iteration 1), only the last column,
the one whose coordinates the pass carries, is changed. With an empty spec the model computes exactly what it
computes without one.

Given a list of specs, one per row, row r runs only the rules of its own spec (each rule changes its row alone, by
a row mask; ``set_alpha`` then hands the layer a per-row alpha), and :meth:`Intervener.site_report` has one entry per
(row, rule). A live ``patch`` (``source`` set, see :mod:`~sst_interp.interventions.spec`) reads another row's
``layer_out`` at the same site of the same forward pass, as that row's forward computed it (before this site's
rules); with ``alongside`` n the rows n..2n-1 are clean twins, never changed, that ``source="clean"`` reads.

The spec is checked first (:mod:`~sst_interp.interventions.checks`); ``patch``, ``mean`` and ``resample`` read
their reference states from a recorded run (:mod:`~sst_interp.interventions.references`). Rules on the ``attention``
stream are carried out inside each layer's attention by an
:class:`~sst_interp.interventions.attention.AttentionPatcher`, which :func:`intervene` installs and removes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import torch

from sst_interp.kernels.errors import UsageError
from sst_interp.interventions.attention import AttentionPatcher, attention_rules, check_attention_rules
from sst_interp.interventions.checks import check_spec, load_direction
from sst_interp.interventions.compiled import fill_edits, intervener_refusal
from sst_interp.interventions.feature_edits import FeatureDictionaries, feature_edit
from sst_interp.interventions.references import MeanSource, PatchSource, reference_values
from sst_interp.interventions.spec import (CLEAN_SOURCE, READS_RUN, Intervention, InterventionSpec, Operation,
                                            Site, toward)


#: what an Intervener can capture: the per-row streams of a layer, and the logits of a pass
CAPTURABLE: tuple[str, ...] = ("state_in", "blended", "layer_out", "logits")


@dataclass(frozen=True)
class _Rule:
    """One intervention as the Intervener applies it: its place in the report and the rows it may change."""

    item: Intervention
    index: int  # position in the Intervener's rule list (site_counts)
    number: int  # 1-based number within its own spec (the report's "rule")
    row: int | None  # the one batch row it changes (per-row specs), or None: every intervened row

    @property
    def site(self) -> Site:
        return self.item.site

    @property
    def operation(self) -> Operation:
        return self.item.operation


class Intervener:
    """The observer and layer hook that carries out a spec (see the module docstring).

    Args:
        sst: the model (its layer count and hidden size validate the spec).
        spec: what to change: one :class:`InterventionSpec` for every row, or a sequence of them, one per
            intervened row (per-row specs: a sweep of N cells runs as one batch of N rows).
        question_ids: the question of each batch row, needed by ``patch`` operations that read a recorded run; a
            row whose id is None is never patched from a run.
        alongside: when set, the batch is ``2 * alongside`` rows: rows ``[0, alongside)`` are intervened and row
            ``r + alongside`` is row r's clean twin (same prompt, never intervened), which ``source="clean"``
            patches read. :class:`~sst_interp.interventions.live.LiveIntervention` lays such batches out.
        capture: streams to keep at every site of every emitting pass, after the rules ran (``state_in``,
            ``blended``, ``layer_out``; ``logits`` keeps each pass's logits where the LM head ran); read them with
            :meth:`captured`.
        functions: the Python functions ``map`` rules name: name -> f, values [B, d] -> [B, d] (float32 or the
            model's dtype in, any float dtype out; the result is cast to the stream's dtype).
    """

    def __init__(self, sst: Any, spec: InterventionSpec | Sequence[InterventionSpec],
                 question_ids: Sequence[str | None] | None = None, *, alongside: int | None = None,
                 capture: Sequence[str] = (),
                 functions: Mapping[str, Callable[[torch.Tensor], torch.Tensor]] | None = None) -> None:
        self.sst = sst
        self.per_row = not isinstance(spec, InterventionSpec)
        specs = list(spec) if self.per_row else [spec]
        if self.per_row and not all(isinstance(s, InterventionSpec) for s in specs):
            raise UsageError("per-row specs are a list of InterventionSpec, one per batch row")
        self.row_specs = specs
        #: every rule of every row, as one spec (the family and reference checks read it)
        self.spec = InterventionSpec(tuple(item for s in specs for item in s.interventions))
        self.question_ids = None if question_ids is None else [None if q is None else str(q) for q in question_ids]
        self.alongside = None if alongside is None else int(alongside)
        self._rules = [_Rule(item, 0, number, row if self.per_row else None)
                       for row, s in enumerate(specs) for number, item in enumerate(s.interventions, 1)]
        self._rules = [replace(rule, index=index) for index, rule in enumerate(self._rules)]
        self._coords: tuple[int, int, int] | None = None  # (turn, position, iteration) of the pass in progress
        self._active: torch.Tensor | None = None
        self._depth = 0
        self._directions: dict[Operation, torch.Tensor] = {}
        #: per rule (every row's rules in row order under per-row specs), how many (row, position, iteration,
        #: layer) sites it changed so far
        self.site_counts: list[int] = [0] * len(self._rules)
        self._stream_off: set[int] = set()  # layers whose next pass reads no state (a freeze where none was read)
        self._read: Any = None  # S() of the state_in pass in progress: carried state [B, 1, d] -> [B, 1, d] float32
        self._capture = tuple(capture)
        bad = [name for name in self._capture if name not in CAPTURABLE]
        if bad:
            raise UsageError(f"cannot capture {bad}; capture one of {', '.join(CAPTURABLE)}")
        self._kept: dict[str, dict[tuple[int, int, int, int], torch.Tensor]] = {name: {} for name in self._capture}
        self._functions = dict(functions or {})
        self._dictionaries = FeatureDictionaries()  # the feature rules' dictionaries, each loaded once
        self._validate()
        recorded = [i.operation for i in self.spec.interventions if not i.operation.live]
        self._patches = {op: PatchSource(op) for op in recorded if _per_question(op)}
        self._means = {op: MeanSource(op) for op in recorded if op.kind == "mean"}

    # ------------------------------------------------------------------------------------------ set-up
    def _validate(self) -> None:
        check_spec(self.spec, self.sst.num_layers, self.sst.hidden_size)
        check_attention_rules(self.spec, self.sst)
        for rule in self._rules:
            item, where = rule.item, self._where(rule)
            if item.operation.kind == "add":
                self._directions[item.operation] = load_direction(item.operation)
            if item.operation.kind == "map" and item.operation.function not in self._functions:
                raise UsageError(f"{where}: 'map' names the function {item.operation.function!r}, which was not handed "
                                 f"over; pass functions={{{item.operation.function!r}: f}} "
                                 f"(given: {sorted(self._functions) or 'none'})")
            if item.operation.kind == "feature":
                self._dictionaries.check(item, int(self.sst.hidden_size), where)
            if _per_question(item.operation) and self.question_ids is None:
                raise UsageError(f"{where}: {item.operation.kind!r} reads states per question: pass question_ids")
            if item.operation.source == CLEAN_SOURCE and self.alongside is None:
                raise UsageError(f"{where}: source 'clean' reads a clean pass run alongside; generate with "
                                 f"sst.intervene(...).generate, which lays the batch out for it")
            if item.operation.kind == "freeze" and (rule.row is not None or self.alongside is not None):
                raise UsageError(f"{where}: a freeze keeps a layer's carried state for the whole batch; per-row specs "
                                 f"and clean passes alongside cannot hold one (use one spec, without source 'clean')")
            update = getattr(getattr(self.sst, "config", None), "update", "direct")
            if item.site.stream == "state_in" and item.operation.kind in READS_RUN and update != "direct":
                raise UsageError(f"{where}: {item.operation.kind!r} on state_in reads the reference "
                                 f"run's layer outputs as its carried states, which they are only under the update "
                                 f"'direct' (this SST's is {update!r}); use layer_out instead")

    def _where(self, rule: _Rule) -> str:
        return f"intervention {rule.number}" + ("" if rule.row is None else f" of row {rule.row}")

    def check_batch(self, batch: int) -> None:
        """Refuse (UsageError, one line) a batch of ``batch`` rows these specs cannot address: per-row specs of
        another count, a source row outside the batch."""
        rows = batch if self.alongside is None else self.alongside
        if self.alongside is not None and batch != 2 * self.alongside:
            raise UsageError(f"a clean pass alongside doubles the batch: expected {2 * self.alongside} rows, got "
                             f"{batch}")
        if self.question_ids is not None and len(self.question_ids) != batch:
            raise UsageError(f"{len(self.question_ids)} question ids for a batch of {batch} rows; give one per row")
        if self.per_row and len(self.row_specs) != rows:
            raise UsageError(f"{len(self.row_specs)} per-row specs for a batch of {rows} rows; give one spec per row "
                             f"(an empty InterventionSpec() leaves a row clean)")
        for rule in self._rules:
            source = rule.operation.source
            if isinstance(source, int) and source >= rows:
                raise UsageError(f"{self._where(rule)}: source row {source} is out of range for a batch of {rows} "
                                 f"rows (0-{rows - 1})")

    # ------------------------------------------------------------------------------------------ observer
    def on_pass_start(self, info: Any) -> None:
        """Observer: note the pass's coordinates (None for passes that emit no token)."""
        if self._active is None:
            self.check_batch(int(info.active.shape[0]))
        self._coords = None if info.position is None else (int(info.turn), int(info.position), int(info.iteration))
        self._active = info.active
        self._depth = int(info.depth)
        if info.position is None or (info.position == 0 and info.iteration == 1):
            self._stream_off.clear()  # a prompt pass starts the state afresh

    def on_pass_end(self, info: Any, logits: torch.Tensor | None) -> None:
        """Observer: the pass is over (keeps its logits when they are captured)."""
        if "logits" in self._kept and logits is not None and self._coords is not None:
            self._keep("logits", -1, logits)
        self._coords = None

    def on_token(self, position: int, token_ids: torch.Tensor, active: torch.Tensor) -> None:
        """Observer: nothing to do."""

    # ------------------------------------------------------------------------------------------ rows
    def _rows(self, rule: _Rule) -> torch.Tensor | None:
        """[B] bool (CPU): the rows ``rule`` may change; None for every row (one spec, no twins)."""
        if rule.row is None and self.alongside is None:
            return None
        assert self._active is not None
        batch = int(self._active.shape[0])
        if rule.row is not None:
            return torch.arange(batch) == rule.row
        return torch.arange(batch) < int(self.alongside)

    def _changed_rows(self, rule: _Rule) -> int:
        """How many active rows ``rule`` changes at a site."""
        if self._active is None:
            return 0
        rows = self._rows(rule)
        active = self._active.cpu()
        return int((active if rows is None else active & rows).sum())

    # ------------------------------------------------------------------------------------------ layer hooks
    def _matching(self, stream: str, layer: int) -> list[_Rule]:
        if self._coords is None:
            return []
        turn, position, iteration = self._coords
        return [rule for rule in self._rules
                if rule.site.stream == stream and rule.site.matches(turn, position, iteration, layer)]

    def _apply(self, stream: str, layer: int, value: torch.Tensor) -> torch.Tensor:
        rules = [rule for rule in self._matching(stream, layer) if rule.operation.kind != "freeze"]
        if not rules:
            self._keep(stream, layer, value[:, -1])
            return value
        original = last = value[:, -1:, :]
        for rule in rules:
            changed = self._operate(rule, layer, last, original)
            rows = self._rows(rule)
            last = changed if rows is None else torch.where(rows.to(value.device)[:, None, None], changed, last)
            if not _per_question(rule.operation):
                self._count(rule, self._changed_rows(rule))  # recorded patches count the rows they patch themselves
        self._keep(stream, layer, last[:, -1])
        if value.shape[1] == 1:
            return last
        return torch.cat([value[:, :-1, :], last], dim=1)

    def _operate(self, rule: _Rule, layer: int, value: torch.Tensor, original: torch.Tensor) -> torch.Tensor:
        """``value`` [B, 1, d] after the rules before this one at the site; ``original`` [B, 1, d] what the layer
        computed (a live source reads it)."""
        item = rule.item
        kind = item.operation.kind
        if kind == "zero":
            return torch.zeros_like(value)
        if kind == "add":
            wide = torch.promote_types(value.dtype, torch.float32)  # bf16 adds in float32 and rounds once
            direction = self._directions[item.operation].to(device=value.device, dtype=wide)
            return (value.to(wide) + item.operation.scale * direction).to(value.dtype)
        if kind == "map":
            changed = self._functions[str(item.operation.function)](value[:, -1])
            if tuple(changed.shape) != (value.shape[0], value.shape[-1]):
                raise UsageError(f"the 'map' function {item.operation.function!r} returned shape "
                                 f"{tuple(changed.shape)} for values of shape {tuple(value[:, -1].shape)}; it must "
                                 f"keep the shape [B, d]")
            return changed.to(device=value.device, dtype=value.dtype)[:, None, :]
        if kind == "feature":
            dictionary = self._dictionaries[item.operation]
            if item.operation.run is None:
                source = (original[self._source_rows(item.operation, value.shape[0]).to(value.device), -1]
                          if item.operation.live else None)
                return feature_edit(dictionary, item.operation, value[:, -1], source)[:, None, :]
            reference, rows = self._reference(rule, layer)
            changed = feature_edit(dictionary, item.operation, value[:, -1], reference.to(value.device))
            return torch.where(rows.to(value.device)[:, None], changed, value[:, -1])[:, None, :]
        if item.operation.live:
            return toward(value, original[self._source_rows(item.operation, value.shape[0]).to(value.device)],
                           item.operation.scale)
        if kind in READS_RUN:
            reference, rows = self._reference(rule, layer)
            reference = reference.to(device=value.device)[:, None, :]
            reference = self._read(reference) if item.site.stream == "state_in" else reference
            rows = rows.to(value.device)[:, None, None]
            return torch.where(rows, toward(value, reference.to(value.dtype), item.operation.scale), value)
        raise AssertionError(f"operation {kind} has no tensor form")

    def _reference(self, rule: _Rule, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A recorded-run rule (patch, mean, resample) at this pass and ``layer``: its reference [B, d] float32
        (on ``state_in`` the carried state C_ref, before S reads it) and the rows [B] bool (CPU) it changes; counts
        the sites of patch and resample (the rows whose question is patched)."""
        item = rule.item
        kind = item.operation.kind
        assert self._coords is not None and self._active is not None
        turn, position, iteration = self._coords
        # on state_in, the reference is the state carried into this iteration: the one recorded at iteration - 1
        carried = item.site.stream == "state_in"
        source = self._means[item.operation] if kind == "mean" else self._patches[item.operation]
        allowed = self._rows(rule)
        # only the rows this rule may change read the run (another row's question need not be in it)
        rows = self._active.cpu() if allowed is None else self._active.cpu() & allowed
        reference = reference_values(item.operation, source, self.question_ids, self._depth, turn, position,
                                     iteration - 1 if carried else iteration, layer, rows)
        if kind != "mean":
            # A row whose question id is None is left alone (an experiment patches only the rows it measures).
            assert self.question_ids is not None
            rows = rows & torch.tensor([q is not None for q in self.question_ids], dtype=torch.bool)
            self._count(rule, int(rows.sum()))
        return reference, rows

    def _source_rows(self, operation: Operation, batch: int) -> torch.Tensor:
        """[B] long: the row each row reads under a live ``operation``."""
        if operation.source == CLEAN_SOURCE:
            rows = torch.arange(batch)
            return torch.where(rows < int(self.alongside), rows + int(self.alongside), rows)
        return torch.full((batch,), int(operation.source), dtype=torch.long)

    def state_in(self, layer: int, value: torch.Tensor, read: Any = None) -> torch.Tensor:
        """S(C_prev) [B, T, d] float32 as the blend will read it; ``read`` maps a carried state [B, 1, d] to what
        the blend of this pass's last column reads of it (S with this pass's h), for ``mean`` and ``resample``."""
        self._read = read
        try:
            return self._apply("state_in", layer, value)
        finally:
            self._read = None

    def alpha(self, layer: int, value: torch.Tensor, columns: int = 1) -> torch.Tensor:
        """alpha_l of this pass: ``value`` [d] float32 itself when no rule sets it; else [d] for a one-column
        pass, or [columns, d] where only the last column (the one the pass's coordinates name) is set; [B, columns,
        d] when the rules that set it change only some rows (per-row specs, clean twins)."""
        rules = self._matching("alpha", layer)
        if not rules:
            return value
        if all(self._rows(rule) is None for rule in rules):
            changed = value
            for rule in rules:
                changed = torch.full_like(value, float(rule.operation.value))
                self._count(rule, self._changed_rows(rule))
            if columns == 1:
                return changed
            return torch.cat([value.expand(columns - 1, -1), changed[None]], dim=0)
        assert self._active is not None
        per_row = value.expand(int(self._active.shape[0]), columns, -1).clone()
        for rule in rules:
            rows = self._rows(rule)
            per_row[rows.to(value.device) if rows is not None else slice(None), -1] = float(rule.operation.value)
            self._count(rule, self._changed_rows(rule))
        return per_row

    def blended(self, layer: int, value: torch.Tensor) -> torch.Tensor:
        """h~ [B, T, d] after the blend."""
        return self._apply("blended", layer, value)

    def layer_out(self, layer: int, value: torch.Tensor) -> torch.Tensor:
        """The layer's output o [B, T, d] (also the next pass's state)."""
        return self._apply("layer_out", layer, value)

    def freeze(self, layer: int, read_state: bool = True) -> bool:
        """Whether this pass leaves the carried state as it was: the next pass reads the state this one read, or,
        when it read none (``read_state`` False: the stream was off), reads none either. Asked once per stateful
        layer and pass."""
        rules = [rule for rule in self._matching("layer_out", layer) if rule.operation.kind == "freeze"]
        for rule in rules:
            self._count(rule, self._changed_rows(rule))
        if rules and not read_state:
            self._stream_off.add(layer)
        elif not rules:
            self._stream_off.discard(layer)
        return bool(rules)

    def reads_no_state(self, layer: int) -> bool:
        """Whether ``layer``'s pass now runs with the stream off, after a freeze of a pass that read no state."""
        return layer in self._stream_off

    # ------------------------------------------------------------------------------------------ compiled step
    def compiled_refusal(self) -> str | None:
        """Why this Intervener cannot run on the compiled decode step (one line naming ``--compile off``), or
        None (:mod:`~sst_interp.interventions.compiled`)."""
        return intervener_refusal(self)

    def fill_edits(self, edits: Any) -> None:
        """Before a compiled pass: this pass's rules as :class:`~sst_interp.model.stream_edits.StreamEdits`, with
        the sites counted as the eager layers would count them."""
        fill_edits(self, edits)

    def _active_rows(self) -> int:
        return int(self._active.sum()) if self._active is not None else 0

    def _count(self, rule: _Rule, rows: int) -> None:
        self.site_counts[rule.index] += rows

    def site_report(self) -> list[dict[str, Any]]:
        """Per rule: its number (1-based within its spec), stream, operation and the (row, position, iteration,
        layer) sites it changed so far; under per-row specs also its ``row``, every row's rules in row order."""
        return [{"rule": rule.number, "stream": rule.site.stream, "operation": rule.operation.kind,
                 "sites": self.site_counts[rule.index], **({} if rule.row is None else {"row": rule.row})}
                for rule in self._rules]

    # ------------------------------------------------------------------------------------------ capture
    def _keep(self, stream: str, layer: int, value: torch.Tensor) -> None:
        """Keep ``value`` [B, d] of ``stream`` at this pass's coordinates, when captured (NaN in inactive rows)."""
        kept = self._kept.get(stream)
        if kept is None or self._coords is None:
            return
        value = value.detach().clone()
        if self._active is not None:
            value[~self._active.to(value.device)] = float("nan")
        kept[(*self._coords, layer)] = value

    def captured(self, stream: str, turn: int = 0) -> torch.Tensor:
        """A captured stream of ``turn`` as one tensor: [B, positions, iterations, layers, d] for ``state_in``,
        ``blended`` and ``layer_out``, [B, positions, iterations, V] for ``logits``; NaN where nothing ran (a
        finished row, an iteration a per-position policy skipped, a layer without the stream, logits the LM head
        did not compute). Positions and iterations start at 0 and 1 (index i is iteration i + 1)."""
        if stream not in self._kept:
            raise UsageError(f"stream {stream!r} was not captured; capture it ({', '.join(self._capture) or 'none'})")
        kept = {key[1:]: value for key, value in self._kept[stream].items() if key[0] == turn}
        if not kept:
            raise UsageError(f"nothing of {stream!r} was captured at turn {turn}; generate inside the context first")
        sample = next(iter(kept.values()))
        positions = 1 + max(p for p, _, _ in kept)
        iterations = max(i for _, i, _ in kept)
        if stream == "logits":
            out = torch.full((sample.shape[0], positions, iterations, sample.shape[-1]), float("nan"),
                             dtype=sample.dtype, device=sample.device)
            for (position, iteration, _), value in kept.items():
                out[:, position, iteration - 1] = value
            return out
        out = torch.full((sample.shape[0], positions, iterations, int(self.sst.num_layers), sample.shape[-1]),
                         float("nan"), dtype=sample.dtype, device=sample.device)
        for (position, iteration, layer), value in kept.items():
            out[:, position, iteration - 1, layer] = value.to(out.dtype)
        return out


@contextmanager
def intervene(sst: Any, spec: InterventionSpec | Sequence[InterventionSpec],
              question_ids: Sequence[str | None] | None = None, **options: Any) -> Iterator[Intervener]:
    """Install an :class:`Intervener` on ``sst`` for the block (removed on exit, also on error); pass it to
    ``generate`` as the observer (or inside an :class:`~sst_interp.model.observers.ObserverGroup`). ``spec`` is one
    spec for every row or one per row; ``options`` are the Intervener's (``alongside``, ``capture``, ``functions``)."""
    context = sst.context
    if context.intervention is not None:
        raise UsageError("an intervention is already active on this model; nest specs by joining their lists")
    intervener = Intervener(sst, spec, question_ids, **options)
    # attention rules wrap the attention function the layers call (installed whole or not at all)
    patcher = AttentionPatcher.for_sst(intervener, sst).install() if attention_rules(intervener.spec) else None
    context.intervention = intervener
    try:
        yield intervener
    finally:
        context.intervention = None
        if patcher is not None:
            patcher.close()


def _per_question(operation: Operation) -> bool:
    """Whether ``operation`` reads a recorded run per question (and counts the rows it patches itself)."""
    return not operation.live and (operation.kind in ("patch", "resample")
                                   or (operation.kind == "feature" and operation.run is not None))


def _toward(value: torch.Tensor, reference: torch.Tensor, scale: float) -> torch.Tensor:
    """value + scale * (reference - value): the reference itself (exactly) at scale 1, ``value`` at 0."""
    if scale == 1.0:
        return reference
    return value + float(scale) * (reference - value)
