"""The banner naming the model a run was recorded with: its SST checkpoint, that the SST was untrained, or the
looping family it is.

An untrained SST (the demo preset: the default backbone without a checkpoint, ``state_scale=hidden``) still
iterates and still shows basin shifts, but its blend coefficients were never trained to refine the state, so what
the page shows is the mechanism's behaviour, not the paper's learned one; the banner says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def model_banner(manifest: dict[str, Any]) -> dict[str, Any]:
    """``{"kind": "checkpoint" | "untrained" | "synthetic" | "family", "model", "checkpoint", "text"}`` from a run's
    manifest (its ``identity``: the model and checkpoint it was recorded with; ``sst``: the variant; ``family``: a
    natively looping family, whose iterations are its own trained loop, not an SST's)."""
    identity = manifest.get("identity") or {}
    model = str(identity.get("model") or "unknown model")
    checkpoint = identity.get("checkpoint")
    scale = (manifest.get("sst") or {}).get("state_scale")
    if model == "synthetic":
        return {"kind": "synthetic", "model": model, "checkpoint": None,
                "text": "synthetic planted run: no model was run; the values were drawn to a known truth"}
    family = manifest.get("family")
    if family and family != "sst":
        return {"kind": "family", "model": model, "checkpoint": None,
                "text": f"model {model}: a natively looping {family} model; its iterations are its own loop"}
    if checkpoint:
        return {"kind": "checkpoint", "model": model, "checkpoint": str(checkpoint),
                "text": f"model {model} with the SST checkpoint {Path(str(checkpoint)).name}"}
    preset = " (the demo preset" + (f", state_scale={scale})" if scale else ")") if manifest.get("demo_preset") \
        else (f" (state_scale={scale})" if scale else "")
    return {"kind": "untrained", "model": model, "checkpoint": None,
            "text": f"model {model}, untrained SST{preset}: no checkpoint, so its iterations were never trained to "
                    f"refine the state; basin shifts here show the untrained mechanism, not the paper's learned one"}
