"""The halting probe network (paper ``sec:halting_probe_method``, ``app:halting_training``).

``HaltingProbe`` is ``Linear(d, n) -> activation -> Linear(n, 1)`` with ``n`` in {10, 64} in the
paper and SiLU as the activation (GELU and ReLU for the activation swap of
``sec:halting_probe_feature``). With ``hidden=None`` it is the linear probe ``Linear(d, 1)``
that ``sec:halting_probe_feature`` trains on the essential dimensions.

The probe always takes the *full* position-0 hidden state ``[..., input_size]``; when
``dims`` is set it reads only those dimensions (the linear probe on the essential set), so a
saved probe can be applied to recorded states and used as a generation-time depth policy
without knowing which subset it was trained on.

Masks used by the ablations (``app:halting_input_ablation``, ``tab:halting_probe_ablation_sweep``)
are arguments of :meth:`HaltingProbe.forward`: ``input_mask`` zeroes input dimensions before
the first layer, ``neuron_mask`` zeroes hidden units after the activation (the output bias
is kept).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from sst_interp.kernels.errors import UsageError
from sst_interp.probe.defaults import DEFAULT_THRESHOLD  # noqa: F401 - re-exported: the probe's halting threshold


ACTIVATIONS: dict[str, type[nn.Module]] = {"silu": nn.SiLU, "gelu": nn.GELU, "relu": nn.ReLU}


@dataclass(frozen=True)
class ProbeConfig:
    """Architecture of a halting probe.

    Args:
        input_size: size ``d`` of the hidden state the probe reads (the model's hidden size).
        hidden: bottleneck width ``n`` (10 for the reported probe, 64 for the mechanistic one);
            ``None`` makes the linear probe ``Linear(k, 1)``.
        activation: ``"silu"`` (the paper's), ``"gelu"`` or ``"relu"``; ignored when ``hidden`` is None.
        dims: if set, the probe reads only these input dimensions (sorted, unique, each in
            ``0..input_size-1``), e.g. the essential set found by greedy pruning.
    """

    input_size: int
    hidden: int | None = 10
    activation: str = "silu"
    dims: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.input_size < 1:
            raise UsageError(f"probe input_size must be positive, got {self.input_size}")
        if self.hidden is not None and self.hidden < 1:
            raise UsageError(f"probe hidden width must be positive or None (linear), got {self.hidden}")
        if self.activation not in ACTIVATIONS:
            raise UsageError(
                f"unknown probe activation {self.activation!r}; choose one of {', '.join(sorted(ACTIVATIONS))}"
            )
        if self.dims is not None:
            dims = tuple(int(i) for i in self.dims)
            if not dims:
                raise UsageError("probe dims is empty; give at least one input dimension or None for all")
            if list(dims) != sorted(set(dims)) or dims[0] < 0 or dims[-1] >= self.input_size:
                raise UsageError(
                    f"probe dims must be sorted unique indices in 0..{self.input_size - 1}; got {len(dims)} dims"
                )
            object.__setattr__(self, "dims", dims)

    @property
    def n_inputs(self) -> int:
        """Width of the first layer's input: ``len(dims)`` or ``input_size``."""
        return len(self.dims) if self.dims is not None else self.input_size

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (``dims`` as a list)."""
        out = asdict(self)
        out["dims"] = list(self.dims) if self.dims is not None else None
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProbeConfig:
        """Inverse of :meth:`to_json`."""
        dims = data.get("dims")
        return cls(
            input_size=int(data["input_size"]),
            hidden=None if data.get("hidden") is None else int(data["hidden"]),
            activation=str(data.get("activation", "silu")),
            dims=None if dims is None else tuple(int(i) for i in dims),
        )


class HaltingProbe(nn.Module):
    """``Linear(d, n) -> activation -> Linear(n, 1)`` (or ``Linear(d, 1)`` when ``hidden`` is None).

    Attributes:
        config: the :class:`ProbeConfig`.
        fc1: first layer (``None`` for the linear probe); weight ``W1: [n, k]``.
        act: the activation module (``None`` for the linear probe).
        fc2: output layer; weight ``W2: [1, n]`` (or ``[1, k]`` for the linear probe).
        dim_index: buffer ``[k]`` int64 of the input dimensions read (all of them when ``dims`` is None).
    """

    def __init__(self, config: ProbeConfig) -> None:
        super().__init__()
        self.config = config
        k = config.n_inputs
        if config.hidden is None:
            self.fc1: nn.Linear | None = None
            self.act: nn.Module | None = None
            self.fc2 = nn.Linear(k, 1)
        else:
            self.fc1 = nn.Linear(k, config.hidden)
            self.act = ACTIVATIONS[config.activation]()
            self.fc2 = nn.Linear(config.hidden, 1)
        index = torch.arange(config.input_size) if config.dims is None else torch.tensor(config.dims)
        self.register_buffer("dim_index", index.long(), persistent=False)

    @property
    def is_linear(self) -> bool:
        """True for the linear probe (no hidden layer)."""
        return self.fc1 is None

    @property
    def n_hidden(self) -> int:
        """Number of hidden units (0 for the linear probe)."""
        return 0 if self.config.hidden is None else self.config.hidden

    def select(self, x: torch.Tensor) -> torch.Tensor:
        """The input dimensions the probe reads. ``x: [..., input_size]`` -> ``[..., k]``."""
        if x.shape[-1] != self.config.input_size:
            raise UsageError(
                f"probe expects hidden states of size {self.config.input_size}, got {x.shape[-1]}; "
                "use a probe trained on this model's hidden size"
            )
        if self.config.dims is None:
            return x
        return x.index_select(-1, self.dim_index)

    def hidden_activations(self, x: torch.Tensor, input_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Post-activation hidden units. ``x: [..., input_size]`` -> ``[..., n]``.

        ``input_mask: [input_size]`` (1 keeps a dimension, 0 zeroes it) is applied to ``x`` first.
        """
        if self.fc1 is None or self.act is None:
            raise UsageError("the linear probe has no hidden units; use a probe with hidden >= 1")
        if input_mask is not None:
            x = x * input_mask.to(x.dtype)
        return self.act(self.fc1(self.select(x)))

    def forward(
        self,
        x: torch.Tensor,
        input_mask: torch.Tensor | None = None,
        neuron_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Halt logits. ``x: [..., input_size]`` float -> ``[...]``.

        Args:
            x: position-0 hidden states at the probe layer.
            input_mask: ``[input_size]``; dimensions with 0 are zeroed before the probe reads them.
            neuron_mask: ``[n]``; hidden units with 0 are zeroed after the activation (the output
                bias stays), as in the neuron ablations.
        """
        x = x.to(self.fc2.weight.dtype)
        if self.fc1 is None:
            if neuron_mask is not None:
                raise UsageError("neuron_mask needs a probe with hidden units; the linear probe has none")
            if input_mask is not None:
                x = x * input_mask.to(x.dtype)
            return self.fc2(self.select(x)).squeeze(-1)
        h = self.hidden_activations(x, input_mask)
        if neuron_mask is not None:
            h = h * neuron_mask.to(h.dtype)
        return self.fc2(h).squeeze(-1)

    def effective_direction(self, neuron_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The probe's effective linear direction ``W2 W1`` over the full input: ``[input_size]``.

        For the linear probe this is ``W2`` scattered into the read dimensions. ``neuron_mask: [n]``
        drops hidden units (``sec:halting_probe_structure``: original vs neuron-44-ablated direction).
        """
        with torch.no_grad():
            if self.fc1 is None:
                local = self.fc2.weight[0]
            else:
                w2 = self.fc2.weight[0]
                if neuron_mask is not None:
                    w2 = w2 * neuron_mask.to(w2.dtype)
                local = w2 @ self.fc1.weight
            full = torch.zeros(self.config.input_size, dtype=local.dtype)
            full[self.dim_index] = local
        return full

    def input_importance(self) -> torch.Tensor:
        """Effective weight importance of each input dimension: ``sum_j |W2_j| |W1_ji|`` -> ``[input_size]``.

        (``app:halting_input_ablation``, Step 1.) For the linear probe, ``|W2_i|``. Dimensions the
        probe does not read get 0.
        """
        with torch.no_grad():
            if self.fc1 is None:
                local = self.fc2.weight[0].abs()
            else:
                local = self.fc2.weight[0].abs() @ self.fc1.weight.abs()
            full = torch.zeros(self.config.input_size, dtype=local.dtype)
            full[self.dim_index] = local
        return full

    def n_parameters(self) -> int:
        """Number of trainable parameters (53,781 for ``Linear(5376, 10) -> SiLU -> Linear(10, 1)``)."""
        return sum(p.numel() for p in self.parameters())
