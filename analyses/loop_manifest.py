"""What a run's manifest says about its loop, read without opening the run.

Which recorded layer carries the loop state (:func:`state_layer`: a latent-iteration family's declared one, else the
SST's last stateful layer), which layers a family visits at every iteration (:func:`layers_at_every_iteration`),
whether the per-iteration logits are the distribution the tokens were chosen from (:func:`lens_reason`), and whether
halting rules can be replayed on the run (:func:`fixed_run_reason`, :func:`sweepable_rules`, :func:`replay_reason`:
:mod:`sst_interp.analyses.depth_trajectories` reads the replayed quantities).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


#: Rules a recorded fixed-depth run can replay (``probe-pos`` needs a probe: use position_sim for it).
SWEEPABLE: tuple[str, ...] = ("kl", "entropy", "margin", "state")


def sweepable_rules(manifest: Mapping[str, Any]) -> dict[str, str | None]:
    """rule -> None when a fixed-depth run with this manifest can replay it, else the reason it cannot."""
    out: dict[str, str | None] = {name: None for name in SWEEPABLE}
    vocab, top_k = manifest.get("vocab_size"), int(manifest.get("top_k") or 0)
    if vocab is None or top_k < int(vocab):
        out["kl"] = (f"kl needs the full next-token distribution; the run kept the top {top_k} of "
                     f"{vocab or 'an unrecorded number of'} log-probs")
    if top_k < 2:
        out["margin"] = "margin needs the top two log-probs (top_k >= 2)"
    if manifest.get("sst", {}).get("update", "direct") != "direct":
        out["state"] = "state reads the carried state, which equals the recorded layer output only under update=direct"
    if int(manifest.get("full_positions") or 0) < 1:
        out["state"] = "state needs recorded hidden states (full_positions >= 1)"
    return out


def declared_state_layer(manifest: Mapping[str, Any]) -> int | None:
    """A latent-iteration family's ``loop.state_layer`` (docs/families.md): the recorded layer whose output is the
    carried loop state; None for SST runs (and runs written without it)."""
    declared = (manifest.get("loop") or {}).get("state_layer")
    return None if declared is None else int(declared)


def layers_at_every_iteration(manifest: Mapping[str, Any]) -> list[int] | None:
    """The recorded layers a latent-iteration family visits at every iteration of its deepest recorded depth
    (``loop.iterations_per_layer``); None for SST runs, whose every layer runs at every iteration. A measurement
    that needs a layer's state at each iteration (the halting probe's layer sweep) chooses among these."""
    loop = manifest.get("loop") or {}
    counts = loop.get("iterations_per_layer") or {}
    if not counts:
        return None
    deepest = max(counts, key=int)
    return [layer for layer, count in enumerate(counts[deepest]) if int(count) == int(deepest)]


def state_layer(manifest: Mapping[str, Any], num_layers: int) -> int:
    """The recorded layer whose output is the carried loop state: a family's declared one
    (:func:`declared_state_layer`), else the SST's last stateful layer, else the last layer."""
    declared = declared_state_layer(manifest)
    if declared is not None:
        return declared
    layers = manifest.get("sst", {}).get("layers")
    return int(max(layers)) if layers else num_layers - 1


def lens_reason(manifest: Mapping[str, Any]) -> str | None:
    """Why a run's per-iteration logits are not the distribution its tokens are chosen from (None when they are):
    a latent-iteration family whose lens is a logit lens of its looped block (``loop.lens_is_output`` false:
    Inkling-2 Loop, Dory, a bring-your-own block with layers after it). Replaying a per-position exit reads the
    lens at an earlier iteration as the token the model would emit there, which for such a family it is not: the
    layers after the block never ran on that iteration's state, and the model records no logits it emits
    mid-loop to simulate from. A family run written before the field existed is judged by its family name."""
    loop = manifest.get("loop") or {}
    if not loop:
        return None  # an SST run: each iteration's logits are the emitting pass's own
    is_output = loop.get("lens_is_output")
    if is_output is None:
        is_output = loop.get("family") in ("sst", "hrm_text")  # the families whose last-iteration lens is the head's
    if is_output:
        return None
    return (f"the {loop.get('family') or 'family'} lens is not the emitted distribution (its per-iteration logits "
            f"are a logit lens of the looped block, which later layers follow), so a per-position exit cannot be "
            f"simulated from it, and the model emits no logits mid-loop to simulate from")


def fixed_run_reason(manifest: Mapping[str, Any]) -> str | None:
    """Why a run cannot be replayed (None when it can): it must be fixed-depth, depth >= 2, logits every
    iteration, and those logits must be the distribution the tokens are chosen from (:func:`lens_reason`)."""
    lens = lens_reason(manifest)
    if lens is not None:
        return lens
    policy = str(manifest.get("depth_policy", "fixed"))
    if policy != "fixed":
        return f"the run used --depth-policy {policy}; replaying rules needs a fixed-depth run"
    if max(manifest.get("depths") or [0]) < 2:
        return f"the run has depths {manifest.get('depths')}; replaying rules needs a depth >= 2"
    if not manifest.get("logits_every_iteration", False):
        return "the run has no per-iteration logits"
    return None


def replay_reason(run: Any) -> str | None:
    """Why the regime and agreement measurements cannot use this run (None when they can)."""
    reason = fixed_run_reason(run.manifest)
    if reason is not None:
        return reason
    if not any(why is None for why in sweepable_rules(run.manifest).values()):
        return "the run supports no replayable rule"
    return None
