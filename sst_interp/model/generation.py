"""Generation with iterative refinement (paper sec:inference_iteration).

At depth k the forward pass that emits a token is repeated k times at the same position. The state stream carries
between passes; the current position's KV entries are overwritten each time (earlier positions never change); the
token is taken from the last pass. "Generated position 0" is the pass whose logits choose the first generated token,
i.e. the last prompt position. Its iteration 1 is the prefill; iterations 2..k re-run the last prompt token.

KV overwrite uses transformers' ``DynamicCache``: past recording is switched on before the prefill so sliding-window
layers keep the entries a rollback needs; ``cache.crop(-1)`` removes the current position before each re-run, and
``cache.crop(0)`` after a committed position trims sliding-window layers back to their window.

Prompt modes (how the prompt is processed before generated position 0):

- ``two_pass`` (default): pass 1 without blend, shift, pass 2 with blend, as in training (sec:two_pass);
- ``sequential``: the exact recurrence, one prompt token per call;
- ``none``: the prompt runs as a plain transformer; the last prompt position's output is the first state.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
from transformers import DynamicCache

from sst_interp.kernels.errors import UsageError
from sst_interp.model.config import PROMPT_MODES, PromptMode
from sst_interp.model.depth_policy import DepthPolicy, as_depth_policy
from sst_interp.model.observers import GenerationObserver, NullObserver, PassInfo
from sst_interp.model.per_position import HaltedRows, signals_for
from sst_interp.model.scan import shift_states
from sst_interp.model.sst import SSTModel


# ------------------------------------------------------------------------------------------------ config/result
@dataclass
class GenerationConfig:
    """Options of one generation call.

    Args:
        max_new_tokens: most tokens generated per row.
        prompt_mode: ``two_pass`` | ``sequential`` | ``none`` (see the module docstring).
        eos_token_ids: tokens that end a row (kept in its output).
        stop_strings: strings that end a row once its decoded text contains one.
        pad_token_id: token used for left padding and fed to finished rows.
        do_sample: sample instead of argmax (greedy is the default and what the analyses assume).
        temperature: sampling temperature.
        seed: sampling seed.
        logits_every_iteration: run the LM head after every iteration (the logit analyses need it), not only
            after the last one.
    """

    max_new_tokens: int = 64
    prompt_mode: PromptMode = "two_pass"
    eos_token_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()
    pad_token_id: int = 0
    do_sample: bool = False
    temperature: float = 1.0
    seed: int = 0
    logits_every_iteration: bool = False

    def __post_init__(self) -> None:
        if self.prompt_mode not in PROMPT_MODES:
            raise UsageError(f"unknown prompt mode {self.prompt_mode!r}; use one of {', '.join(PROMPT_MODES)}")
        if self.max_new_tokens < 1:
            raise UsageError(f"max_new_tokens must be at least 1, got {self.max_new_tokens}")


@dataclass
class GenerationResult:
    """Output of :func:`generate`, one entry per prompt.

    Args:
        token_ids: generated tokens per row (up to and including EOS).
        stop_reasons: ``eos`` | ``stop_string`` | ``max_new_tokens`` per row.
        chosen_depth: iterations used per row (the policy's choice at position 0; under a per-position policy the
            most iterations any of the row's positions ran).
        depth_policy: the policy's description.
        iterations: per row, the iterations each generated position ran (one entry per token of ``token_ids``).
    """

    token_ids: list[list[int]]
    stop_reasons: list[str]
    chosen_depth: list[int]
    depth_policy: str
    extras: dict = field(default_factory=dict)
    iterations: list[list[int]] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------ generation
def left_pad(prompts: list[list[int]], pad_token_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists: returns input_ids [B, T] and attention_mask [B, T] (1 = real token)."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise UsageError("every prompt needs at least one token")
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(prompts), width), dtype=torch.long, device=device)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long, device=device)
        mask[row, width - len(prompt) :] = 1
    return ids, mask


class GenerationSession:
    """A batch of conversations generated turn by turn with the KV cache kept (earlier turns never recomputed).

    Turn 0 starts from the prompts; every later turn starts from a segment appended with :meth:`append` (for
    CodeACT: the tool response and the next model-turn opening), which is prefilled in the configured prompt
    mode on top of the kept cache. Each turn has its own generated position 0 (the appended segment's last
    token) and its own depth decision (a depth policy decides at every turn's position 0). A single-turn
    :func:`generate` call is a session with one turn.

    Rows are masked, never dropped: a row that finished its turn (or its episode) keeps a column in every later
    pass, but that column's attention-mask entry is 0, so the row's context holds exactly its own tokens; the
    observer's ``active`` masks mark only the rows whose tokens are being generated. In a batch, those padding
    columns count towards a sliding-window layer's window (its width is in cache columns), so a batched episode
    can differ numerically from the same episode alone once its context passes the window; batch size 1 is
    exact.

    Args:
        sst: the model.
        prompts: token id lists, one per row (left-padded internally).
        policy: the depth policy (decides at position 0 of every turn).
        config: :class:`GenerationConfig`; ``max_new_tokens`` applies per turn.
        observer: receives every pass.
        decode_fn: token ids -> text, for stop strings.
        carry_across_turns: the first token of an appended segment reads the state the previous turn ended
            with (``True``) or a zero state, as at the start of a prompt (``False``, the default).
        gradients: run the turn with autograd on (attribution patching differentiates a metric through every
            pass, the KV cache and the carried states); off by default, as generation needs no graph.
    """

    def __init__(self, sst: SSTModel, prompts: list[list[int]], policy: DepthPolicy, config: GenerationConfig,
                 observer: GenerationObserver | None = None, decode_fn=None, carry_across_turns: bool = False,
                 gradients: bool = False) -> None:
        self.sst, self.policy, self.config = sst, policy, config
        self.gradients = bool(gradients)
        self.observer = observer or NullObserver()
        self.decode_fn = decode_fn
        self.carry_across_turns = carry_across_turns
        self.input_ids, self.mask = left_pad(prompts, config.pad_token_id, sst.device)
        self.batch = len(prompts)
        self.cache = DynamicCache(config=sst.backbone.config)
        self.cache.activate_past_recording()
        self.carry = sst.zero_states(self.batch)
        self.active = torch.ones(self.batch, dtype=torch.bool, device=sst.device)
        self.generated: list[list[int]] = [[] for _ in prompts]
        self.stop_reasons = ["max_new_tokens"] * self.batch
        self.generator = torch.Generator(device="cpu").manual_seed(config.seed)
        self.depth = policy.max_depth
        self.per_position = bool(getattr(policy, "per_position", False))
        self.iterations: list[list[int]] = [[] for _ in prompts]
        self.last_hidden: torch.Tensor | None = None  # [B, 1, d] final-norm output of the latest pass's last column
        self.probe_capture: dict[int, torch.Tensor] = {}
        self.turn = -1
        self.last_prefill_s = 0.0  # wall time of the latest turn's prefill (the episode benchmark reads it)
        self.pending: torch.Tensor | None = None  # [B, T] tokens to prefill before the next turn
        self.last_token = torch.full((self.batch,), config.pad_token_id, dtype=torch.long, device=sst.device)

    # -- passes
    def _positions(self) -> torch.Tensor:
        return (self.mask.cumsum(-1) - 1).clamp(min=0)

    def _run(self, info: PassInfo, mode: str, input_ids: torch.Tensor, position_ids: torch.Tensor,
             want_logits: bool, attention_mask: torch.Tensor | None = None, given=None,
             capture: str | None = None, use_cache: bool = True):
        # A snapshot: the generator marks rows finished in place later, and an observer may keep the mask.
        info = replace(info, active=info.active.clone(), turn=self.turn)
        self.observer.on_pass_start(info)
        with self.sst.state_mode(mode, given=given, carry=self.carry if mode == "carry" else None,
                                 capture=capture) as captured:
            hidden = self.sst.decoder_forward(
                input_ids=input_ids,
                attention_mask=self.mask if attention_mask is None else attention_mask,
                position_ids=position_ids,
                cache=self.cache if use_cache else None,
                use_cache=use_cache,
            )
        self.last_hidden = hidden[:, -1:]
        logits = self.sst.lm_logits(self.last_hidden)[:, -1] if want_logits else None
        self.observer.on_pass_end(info, logits)
        return logits, captured

    def _want_logits(self, iteration: int, depth: int) -> bool:
        if self.per_position:  # the LM head runs when a rule reads it; else only where a row halts
            return self.policy.needs_logits or self.config.logits_every_iteration
        return self.config.logits_every_iteration or iteration >= depth or self.policy.probe_layer is not None

    def prefill(self, tokens: torch.Tensor, segment_mask: torch.Tensor) -> torch.Tensor | None:
        """Run a segment ([B, T] tokens, [B, T] mask; the prompt or an appended turn) on top of the cache.

        The segment's last column is generated position 0, iteration 1 of the new turn. Earlier columns are
        processed in the prompt mode; they see the cache (earlier turns) through the attention mask.
        """
        past = self.mask.shape[1] if self.turn > 0 else 0
        self.mask = segment_mask if past == 0 else torch.cat([self.mask, segment_mask], dim=1)
        positions = self._positions()[:, past:]
        initial = {index: (state if self.carry_across_turns and past else torch.zeros_like(state))
                   for index, state in self.carry.items()}
        mode = self.config.prompt_mode
        info = PassInfo(position=0, iteration=1, depth=self.depth, active=self.active)
        want = self._want_logits(1, self.depth)
        width = tokens.shape[1]
        if mode == "sequential":
            self.carry.update(initial)
            logits = None
            for t in range(width):
                last = t == width - 1
                step_info = info if last else PassInfo(None, 1, self.depth, self.active)
                real = segment_mask[:, t].bool()
                # One column per call: the attention mask covers only the columns seen so far.
                logits, _ = self._run(step_info, "carry", tokens[:, t : t + 1], positions[:, t : t + 1],
                                      want and last, attention_mask=self.mask[:, : past + t + 1])
                # A padded column must leave the row's initial state for its first real token.
                for index, state in self.carry.items():
                    self.carry[index] = torch.where(real[:, None].to(state.device), state, initial[index])
            return logits
        if mode == "two_pass" and not self.carry:
            mode = "none"  # no stateful layer: pass 1 would produce states nobody reads; the result is identical
        if mode == "two_pass":
            pass1 = PassInfo(position=None, iteration=1, depth=self.depth, active=self.active)
            # Pass 1 sees earlier turns through the cache; its own KV entries are dropped before pass 2.
            _, outputs = self._run(pass1, "off", tokens, positions, False, capture="output", use_cache=past > 0)
            if past:
                self.cache.crop(-width)
            modules = self.sst.state_modules()
            first_real = segment_mask.bool() & (segment_mask.cumsum(-1) == 1)
            given = {}
            for index in modules:
                shifted = shift_states(outputs[index], segment_mask,
                                       decay=modules[index].alpha() if self.sst.config.update == "ema_linked" else None)
                # Each layer's states live on its own device (a device map can spread the layers).
                given[index] = torch.where(first_real[..., None].to(shifted.device),
                                           initial[index][:, None].to(shifted.dtype), shifted)
            logits, states = self._run(info, "given", tokens, positions, want, given=given, capture="state")
        else:
            logits, states = self._run(info, "off", tokens, positions, want, capture="output")
        for index in self.carry:
            self.carry[index] = states[index][:, -1]
        return logits

    def rerun(self, position: int, iteration: int, token: torch.Tensor, position_ids: torch.Tensor,
              active: torch.Tensor | None = None):
        """Iteration >= 2 at the current position: drop its KV entry and run it again with the carried state.

        ``active`` ([B] bool, default: the rows still generating) marks the rows this pass is for; the others are
        computed too but not recorded."""
        self.cache.crop(-1)
        info = PassInfo(position=position, iteration=iteration, depth=self.depth,
                        active=self.active if active is None else active)
        logits, _ = self._run(info, "carry", token, position_ids, self._want_logits(iteration, self.depth))
        return logits

    def choose(self, logits: torch.Tensor) -> torch.Tensor:
        """The next token per row [B] from logits [B, V], on the inputs' device (the LM head may run elsewhere)."""
        if not self.config.do_sample:
            return logits.argmax(-1).to(self.active.device)
        probs = torch.softmax(logits / self.config.temperature, dim=-1)
        return torch.multinomial(probs.cpu(), 1, generator=self.generator).squeeze(-1).to(self.active.device)

    def decide_depth_at_position0(self, iteration: int) -> bool:
        layer = self.policy.probe_layer
        hidden = None
        if layer is not None:
            # Filled by the forward hook installed in generate(): the probe layer's output of the latest pass.
            hidden = self.probe_capture[layer][:, -1]
        halt = self.policy.should_halt(iteration, hidden)
        if isinstance(halt, torch.Tensor):
            if halt.numel() != 1 and bool(halt.any()) != bool(halt.all()):
                raise UsageError("a probe depth policy decides one depth per batch; generate with batch size 1")
            halt = bool(halt.reshape(-1)[0])
        return bool(halt) or iteration >= self.policy.max_depth

    def record_token(self, position: int, token: torch.Tensor, counts: list[int] | None = None) -> None:
        """Append the chosen ``token`` [B] of ``position`` to the active rows (``counts``: iterations per row, default
        the turn's depth) and mark rows that ended."""
        was_active = self.active.clone()
        token = torch.where(self.active, token, torch.full_like(token, self.config.pad_token_id))
        self.observer.on_token(position, token, self.active.clone())
        eos = set(self.config.eos_token_ids)
        for row in range(self.batch):
            if not self.active[row]:
                continue
            tok = int(token[row])
            self.generated[row].append(tok)
            self.iterations[row].append(self.depth if counts is None else int(counts[row]))
            if tok in eos:
                self.stop_reasons[row], self.active[row] = "eos", False
            elif self.config.stop_strings and self.decode_fn is not None:
                text = self.decode_fn(self.generated[row])
                if any(stop in text for stop in self.config.stop_strings):
                    self.stop_reasons[row], self.active[row] = "stop_string", False
        # A row keeps the last token it generated: it is fed next (or, when its turn ended, put in front of its
        # next segment by append()).
        self.last_token = torch.where(was_active, token, self.last_token)

    # -- turns
    def append(self, segments: list[list[int] | None]) -> None:
        """Queue the next turn's segment per row (``None``: the row's conversation is over).

        The token that ended a row's previous turn was chosen but never fed to the model, so it is put in front
        of the row's segment; the segment's last token becomes generated position 0 of the next turn.
        """
        if self.turn < 0:
            raise RuntimeError("append() comes after the first turn")
        if len(segments) != self.batch:
            raise ValueError(f"append() takes one segment per row ({self.batch}), got {len(segments)}")
        rows = [None if seg is None else [int(self.last_token[row])] + list(seg) for row, seg in enumerate(segments)]
        if all(row is None for row in rows):
            raise ValueError("append() needs at least one continuing row")
        width = max(len(row) for row in rows if row is not None)
        padded = [row if row is not None else [] for row in rows]
        ids = torch.full((self.batch, width), self.config.pad_token_id, dtype=torch.long, device=self.sst.device)
        mask = torch.zeros((self.batch, width), dtype=torch.long, device=self.sst.device)
        for row, seg in enumerate(padded):
            if seg:
                ids[row, width - len(seg):] = torch.tensor(seg, dtype=torch.long, device=self.sst.device)
                mask[row, width - len(seg):] = 1
        self.pending = (ids, mask)
        self.active = torch.tensor([row is not None for row in rows], dtype=torch.bool, device=self.sst.device)

    def run_turn(self) -> GenerationResult:
        """Generate one turn for the active rows; returns this turn's tokens per row (empty for inactive rows).
        Autograd is off unless the session was made with ``gradients``."""
        with torch.set_grad_enabled(self.gradients):
            return self._run_turn()

    def _run_turn(self) -> GenerationResult:
        if self.turn < 0:
            tokens, mask = self.input_ids, self.mask
        elif self.pending is None:
            raise RuntimeError("call append() with the next turn's segments before run_turn()")
        else:
            tokens, mask = self.pending
            self.pending = None
        self.turn += 1
        self.depth = self.policy.max_depth
        self.generated = [[] for _ in range(self.batch)]
        self.iterations = [[] for _ in range(self.batch)]
        self.stop_reasons = ["max_new_tokens" if bool(a) else "inactive" for a in self.active]
        started = time.perf_counter()
        logits = self.prefill(tokens, mask)
        self.last_prefill_s = time.perf_counter() - started
        position_ids = self._positions()[:, -1:]
        if self.per_position:
            self.record_token(0, *self._iterate_position(0, logits, tokens[:, -1:], position_ids))
        else:
            self.depth = self._settle_position0(logits, tokens[:, -1:], position_ids)
        for position in range(1, self.config.max_new_tokens):
            if not bool(self.active.any()):
                break
            self.cache.crop(0)
            token = self.last_token[:, None]
            # A finished row's column is masked out, so its context stays exactly its own tokens.
            self.mask = torch.cat([self.mask, self.active.long()[:, None]], dim=1)
            # The new column's position: one past the row's last real token, i.e. unchanged for a masked row (the
            # last column of _positions(), without a cumulative sum over the whole context at every step).
            position_ids = position_ids + self.active.long()[:, None]
            info = PassInfo(position=position, iteration=1, depth=self.depth, active=self.active)
            logits, _ = self._run(info, "carry", token, position_ids, self._want_logits(1, self.depth))
            if self.per_position:
                self.record_token(position, *self._iterate_position(position, logits, token, position_ids))
                continue
            for iteration in range(2, self.depth + 1):
                logits = self.rerun(position, iteration, token, position_ids)
            self.record_token(position, self.choose(logits))
        self.cache.crop(0)
        chosen = ([max(counts, default=0) for counts in self.iterations] if self.per_position
                  else [self.depth] * self.batch)
        return GenerationResult(
            token_ids=self.generated,
            stop_reasons=self.stop_reasons,
            chosen_depth=chosen,
            depth_policy=self.policy.describe(),
            iterations=self.iterations,
        )

    def _iterate_position(self, position: int, logits: torch.Tensor | None, token: torch.Tensor,
                          position_ids: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
        """Iterations 2.. at ``position`` under a per-position policy; iteration 1 has run (``logits`` [B, V] its
        logits, or None when the policy reads none). Returns the chosen tokens [B] and each row's iteration count
        (0 for rows not generating)."""
        policy = self.policy
        running = self.active.clone()
        counts = [0] * self.batch
        kept = HaltedRows(rows=torch.zeros_like(running))
        last = max(self.carry) if self.carry else None
        if policy.needs_state and last is None:
            raise UsageError("the state rule needs a stateful layer; this SST has none")
        track_state = policy.needs_state
        state = self.carry[last].clone() if track_state else None
        prev_logits = prev_state = None
        iteration = 1
        while True:
            # The probe layer's output of this iteration (the hook of __enter__ keeps the latest pass's).
            hidden = self.probe_capture[policy.probe_layer][:, -1] if policy.probe_layer is not None else None
            halt = policy.halt(signals_for(policy, iteration, logits, prev_logits, state, prev_state, hidden),
                               self.batch, running.device) & running
            if logits is None and bool(halt.any()):
                # A rule that reads no logits (state): the LM head runs only at the iteration a row halts.
                logits = self.sst.lm_logits(self.last_hidden)[:, -1]
            for row in torch.nonzero(halt).flatten().tolist():
                counts[row] = iteration
            running = running & ~halt
            if not bool(running.any()):
                break
            if bool(halt.any()):  # others iterate on: keep what the halting rows have now
                kept.save(halt, logits, self.carry, self.cache)
            iteration += 1
            prev_logits, prev_state = logits, state
            logits = self.rerun(position, iteration, token, position_ids, active=running)
            if bool(kept.rows.any()):
                kept.restore(kept.rows, self.carry, self.cache)
            state = self.carry[last].clone() if track_state else None
        if logits is None:
            raise RuntimeError("no logits at the halting iteration")
        return self.choose(kept.final_logits(logits, kept.rows)), counts

    def _settle_position0(self, logits, token, position_ids) -> int:
        """Iterate position 0 until the policy halts; the depth chosen here holds for the rest of the turn."""
        iteration = 1
        while not self.decide_depth_at_position0(iteration):
            iteration += 1
            logits = self.rerun(0, iteration, token, position_ids)
        if logits is None:  # the policy halted at an iteration whose logits were not computed
            raise RuntimeError("no logits at the halting iteration")
        self.record_token(0, self.choose(logits), [iteration] * self.batch)
        return iteration

    def __enter__(self) -> GenerationSession:
        if self.policy.probe_layer is not None:
            _install_probe_capture(self.sst, self, self.policy.probe_layer)
        return self

    def __exit__(self, *exc) -> None:
        handle = getattr(self, "probe_handle", None)
        if handle is not None:
            handle.remove()
            self.probe_handle = None


def generate(
    sst: SSTModel,
    prompts: list[list[int]],
    depth: int | DepthPolicy = 1,
    config: GenerationConfig | None = None,
    observer: GenerationObserver | None = None,
    decode_fn: Callable[[list[int]], str] | None = None,
) -> GenerationResult:
    """Generate from a batch of tokenised prompts with iterative refinement.

    Args:
        sst: the model.
        prompts: token id lists, one per row (any lengths; left-padded internally).
        depth: iterations per position (int) or a :class:`DepthPolicy`.
        config: :class:`GenerationConfig` (defaults: 64 new tokens, two-pass prefill, greedy).
        observer: receives every pass (see :class:`GenerationObserver`).
        decode_fn: token ids -> text, needed only for stop strings.

    Returns:
        :class:`GenerationResult`.
    """
    policy = as_depth_policy(depth)
    config = config or GenerationConfig()
    with torch.no_grad(), GenerationSession(sst, prompts, policy, config, observer, decode_fn) as session:
        return session.run_turn()


def _install_probe_capture(sst: SSTModel, generator: GenerationSession, layer: int) -> None:
    if not 0 <= layer < sst.num_layers:
        raise UsageError(f"probe layer {layer} does not exist in a model with {sst.num_layers} layers")

    def hook(module, inputs, output):  # noqa: ANN001 - torch hook signature
        generator.probe_capture[layer] = output.detach()

    generator.probe_handle = sst.layers[layer].register_forward_hook(hook)
