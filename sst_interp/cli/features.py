"""``python -m sst_interp.features`` (also ``sst-features``): sparse dictionaries on a run's states.

    python -m sst_interp.features train --run runs/hops --layer 1 --layout shared      # one dictionary over the loop
    python -m sst_interp.features train --run runs/hops --layer 1                      # one per iteration
    python -m sst_interp.features train --live hops-organism --layer 0 --layout shared --out feats/L  # every position
    python -m sst_interp.features evaluate --dictionary runs/hops/features/layer1-shared-topk --run runs/hops-test
    python -m sst_interp.features attribute --dictionary feats/L --iteration 1 --clean "..." --counterfactual "..."

``train`` streams the run's full hidden states at the site and fits SAELens SAEs (TopK, BatchTopK, JumpReLU) with
its trainer, saved in SAELens' format (``SAE.load_from_disk(folder)`` loads them) beside a sidecar naming the run,
site, iterations, token count and seed. ``evaluate`` prints and writes the per-iteration quality table: FVE, L0,
dead and dense features, sharing across the loop, the cost against per-iteration dictionaries (``--against``) and
the spliced-in accuracy and loss. ``attribute`` estimates each feature's effect on the answer at one site when it
is patched from a counterfactual prompt (feature-level attribution patching), checks the largest by real patching,
and prints (``--out``: writes) the table. Needs the ``features`` extra (``pip install -e ".[features]"``, SAELens). Bad
input prints one ``error: ...`` line and exits 2, with nothing written.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from sst_interp.cli.args import CliParser, add_config_flags, config_from_namespace, config_parser
from sst_interp.features.options import AttributeOptions, EvaluateOptions, TrainOptions
from sst_interp.kernels.errors import UsageError, cli_entry

#: Subcommand -> (its help, its options).
SUBCOMMANDS: dict[str, tuple[str, type]] = {
    "train": ("train dictionaries on a run's states at a (layer, iterations) site", TrainOptions),
    "evaluate": ("score dictionaries per iteration: FVE, L0, dead and dense features, spliced-in accuracy and loss",
                 EvaluateOptions),
    "attribute": ("feature-level attribution patching at one site: each feature's estimated effect on the answer "
                  "when patched from a counterfactual prompt, the largest checked by real patching", AttributeOptions),
}


def build_parser() -> CliParser:
    """The argument parser: one subcommand each, with its options' flags."""
    parser = config_parser("python -m sst_interp.features", __doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (text, options) in SUBCOMMANDS.items():
        add_config_flags(sub.add_parser(name, help=text, description=text), options)
    return parser


def _require_sae_lens() -> None:
    """Refuse (one line) when the optional SAELens extra is not installed."""
    if importlib.util.find_spec("sae_lens") is None:
        raise UsageError('the features commands need SAELens: pip install -e ".[features]" (sae-lens>=6.54,<7)')


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m sst_interp.features`` and ``sst-features``."""
    args = build_parser().parse_args(argv)
    _require_sae_lens()
    if args.command == "train":
        # the jobs (torch, SAELens) are imported after the flags are parsed: --help stays fast
        from sst_interp.features.live_train import train_any

        for trained in train_any(config_from_namespace(TrainOptions, args)):
            m = trained.meta
            print(f"wrote {trained.path} ({m.architecture}, {m.d_in} -> {m.width}, iterations {list(m.iterations)}, "
                  f"{sum(m.tokens.values())} states)")
        return 0
    if args.command == "attribute":
        from sst_interp.experiments.attribute_features import attribute_features

        done = attribute_features(config_from_namespace(AttributeOptions, args))
        print(f"M = logit({done.target!r}) - logit({done.foil!r}); M of the clean prompt: "
              f"{done.table.attrs['clean_metric']:.6g}")
        print(done.table.to_string(index=False, float_format=lambda x: f"{x:.6g}"))
        if done.out is not None:
            print(f"wrote {done.out}")
        return 0
    from sst_interp.features.evaluate import evaluate_dictionaries

    result = evaluate_dictionaries(config_from_namespace(EvaluateOptions, args))
    print(result.table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"wrote {result.out}")
    return 0


def console() -> int:
    """The ``sst-features`` console script."""
    return main()
