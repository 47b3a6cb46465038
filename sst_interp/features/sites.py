"""Where a dictionary reads: a (layer, iterations) site of a recorded run, checked against what the run holds.

A site is a recorded layer at one depth of a run and the iterations of it a dictionary covers. The run must hold
full hidden states there (``hidden/depth=D`` shards, docs/format.md); the iterations are those the run visits the
layer at (an SST visits every layer at every iteration; a natively looping family as its manifest's
``loop.iterations_per_layer`` says, e.g. Inkling-2 Loop's layers outside the loop once). A site is *looped* when
the layer is visited at more than one iteration, which a shared dictionary needs.

Nothing here reads a data page: the manifest and the shard layout tell it all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sst_interp.kernels.errors import UsageError
from sst_interp.store import Run
from sst_interp.store.discovery import shard_paths

#: Manifest keys that say how a run was made, hashed for its identity when the writer recorded none.
_LAYOUT_KEYS = ("schema_version", "family", "loop", "num_layers", "hidden_size", "dtype", "full_positions",
                "protocol", "prompt_mode")


@dataclass(frozen=True)
class StateSite:
    """A (layer, iterations) site of a run at one depth.

    Args:
        depth: the run depth the states are read at.
        layer: the recorded layer, 0-based.
        layer_name: the module that produced it (a family run's ``loop.layers``), None for an SST run.
        iterations: the iterations covered, ascending.
        visits: how many iterations the run visits the layer at, at ``depth``.
    """

    depth: int
    layer: int
    layer_name: str | None
    iterations: tuple[int, ...]
    visits: int

    @property
    def looped(self) -> bool:
        """Whether the run visits the layer at more than one iteration."""
        return self.visits > 1

    def describe(self) -> str:
        """``layer 1 (H.H_module.layers.0), iterations 1-4, depth 4`` for messages."""
        name = f" ({self.layer_name})" if self.layer_name else ""
        its = self.iterations
        span = f"iteration {its[0]}" if len(its) == 1 else (
            f"iterations {its[0]}-{its[-1]}" if list(its) == list(range(its[0], its[-1] + 1))
            else f"iterations {', '.join(map(str, its))}")
        return f"layer {self.layer}{name}, {span}, depth {self.depth}"


def layer_names(run: Run) -> list[str] | None:
    """The recorded layer axis's module names of a family run (``loop.layers``), None for an SST run."""
    loop = run.manifest.get("loop")
    names = loop.get("layers") if isinstance(loop, dict) else None
    return [str(name) for name in names] if isinstance(names, list) else None


def visits(run: Run, depth: int, layer: int) -> int:
    """How many iterations the run visits ``layer`` at, at ``depth``: every one for an SST run, the manifest's
    ``loop.iterations_per_layer`` for a family run."""
    loop = run.manifest.get("loop")
    per_layer = loop.get("iterations_per_layer", {}).get(str(depth)) if isinstance(loop, dict) else None
    if isinstance(per_layer, list) and layer < len(per_layer):
        return int(per_layer[layer])
    return int(depth)


def resolve_site(run: Run, layer: int, iterations: Sequence[int] | None = None, depth: int | None = None,
                 shared: bool = False) -> StateSite:
    """The site of ``run`` at ``layer`` (and ``iterations``, default every one recorded there) at ``depth``
    (default the run's largest), checked. UsageError (one line) for: a depth the run lacks, a layer it lacks, a run
    without full hidden states at the depth, an iteration the run did not record at the layer, and ``shared`` at a
    site that is not looped (or covers one iteration)."""
    if not run.depths:
        raise UsageError(f"{run.path} has recorded no depth yet; record it first")
    depth = max(run.depths) if depth is None else int(depth)
    if depth not in run.depths:
        raise UsageError(f"{run.path} has no depth {depth} (it holds {run.depths}); pass --depth one of them")
    if not 0 <= int(layer) < run.num_layers:
        raise UsageError(f"{run.path} records layers 0-{run.num_layers - 1}; there is no layer {layer}")
    layer = int(layer)
    if not any(kind == "hidden" and d == depth for kind, d, _ in shard_paths(run.path)):
        raise UsageError(f"{run.path} holds no full hidden states at depth {depth} (no hidden/depth={depth} shards); "
                         f"record the run with full states (record --full-positions N, N >= 1)")
    count = visits(run, depth, layer)
    names = layer_names(run)
    name = names[layer] if names is not None and layer < len(names) else None
    if count < 1:
        raise UsageError(f"{run.path} has no full states at layer {layer}{f' ({name})' if name else ''} at depth "
                         f"{depth}: the model never visits it there")
    recorded = list(range(1, count + 1))
    wanted = recorded if iterations is None else sorted({int(i) for i in iterations})
    if not wanted:
        raise UsageError("--iterations selects nothing; list iterations or leave it out for every one")
    missing = [i for i in wanted if i not in recorded]
    if missing:
        raise UsageError(f"{run.path} did not record iteration{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(map(str, missing))} at layer {layer} (depth {depth} holds iterations "
                         f"{recorded[0]}-{recorded[-1]} there); pass --iterations within them")
    site = StateSite(depth, layer, name, tuple(wanted), count)
    if shared and not site.looped:
        raise UsageError(f"layer {layer}{f' ({name})' if name else ''} is not looped at depth {depth} (the run "
                         f"visits it at iteration 1 only): a shared dictionary needs a looped site; use --layout "
                         f"per-iteration, or a looped layer")
    if shared and len(wanted) < 2:
        raise UsageError(f"a shared dictionary spans the iterations of a loop: --iterations names only {wanted[0]}; "
                         f"list two or more, or use --layout per-iteration")
    return site


def run_identity(run: Run) -> str:
    """The sha256 of what made the run: its writer's ``identity`` (model, checkpoint, questions, decoding,
    numerics), else its layout keys. Two runs of the same recording command share it."""
    identity = run.manifest.get("identity")
    basis: Any = identity if isinstance(identity, dict) else {k: run.manifest.get(k) for k in _LAYOUT_KEYS}
    return hashlib.sha256(json.dumps(basis, sort_keys=True, default=str).encode()).hexdigest()


def run_model(run: Run) -> dict[str, Any]:
    """What names the model a run recorded: its family (``sst`` when the manifest has none), the model and
    checkpoint its identity names (None when unknown)."""
    identity = run.manifest.get("identity")
    identity = identity if isinstance(identity, dict) else {}
    return {"family": str(run.manifest.get("family", "sst")), "model": identity.get("model"),
            "checkpoint_sha256": identity.get("checkpoint_sha256")}
