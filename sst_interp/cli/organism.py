"""``python -m sst_interp.organism``: the model organisms of latent iteration, trained from scratch on the hops task.

    python -m sst_interp.organism train --out organisms/looped      # the looped (HRM-Text) organism, ~20 min on 2 cores
    python -m sst_interp.organism train-sst --out organisms/sst     # the SST organism and its matched baseline
    python -m sst_interp.organism validate --run runs/hops --out reports/organism   # every measurement vs the task
    python -m sst_interp.organism overthink --run runs/overthink --out reports/overthink  # halting probe vs the truth

``train`` prints the depth-by-hop accuracy table on the test split at the end (also written to ``depth_by_hop.csv``);
``train-sst`` prints three: the one-pass backbone's, the SST's at each iteration count, and the matched baseline's
(also written into its folder; see :mod:`sst_interp.train.organism`). Bad input is one ``error:`` line and exit code
2, with nothing written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from sst_interp import study
from sst_interp.cli.args import add_config_flags, config_from_namespace, config_parser
from sst_interp.kernels.errors import cli_entry
from sst_interp.organism.config import OverthinkConfig, LoopedTrainConfig, SSTOrganismConfig, ValidateConfig
from sst_interp.organism.tables import format_table


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    parser = config_parser("python -m sst_interp.organism", __doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train the looped organism (HRM-Text) from scratch")
    add_config_flags(train, LoopedTrainConfig)
    train_sst = commands.add_parser("train-sst", help="train a one-pass Gemma 3 backbone from scratch, then the SST "
                                                      "(two-pass) and its matched baseline on it")
    add_config_flags(train_sst, SSTOrganismConfig)
    validate = commands.add_parser("validate", help="check every measurement on a recorded organism run against the "
                                                    "task's known hops")
    add_config_flags(validate, ValidateConfig)
    overthink = commands.add_parser("overthink", help="the paper's halting probe and Sec. 5 families on an "
                                                      "overthinking organism's run, against the task's truth")
    add_config_flags(overthink, OverthinkConfig)
    args = parser.parse_args(argv)
    if args.command == "train-sst":
        from sst_interp.train.organism import train_sst_organism

        tables = train_sst_organism(config_from_namespace(SSTOrganismConfig, args))
        titles = {"backbone": "the one-pass backbone", "sst": "the SST (depth = iterations at the answer position)",
                  "baseline": "the matched baseline (no state stream)"}
        print("\n\n".join(f"{titles[name]}:\n{format_table(table)}" for name, table in tables.items()))
        return 0
    if args.command == "overthink":
        from sst_interp.experiments.halting_validation import PREDICTION_HEADING, validate_overthink
        from sst_interp.experiments.validation_row import markdown

        rows = validate_overthink(config_from_namespace(OverthinkConfig, args), study.open)
        print(markdown(list(rows.values()), PREDICTION_HEADING))
        return 0
    if args.command == "validate":
        import pandas as pd

        from sst_interp.experiments.organism_validation import RESOLUTION_FILE, markdown
        from sst_interp.experiments.organism_validation import validate as run_validation
        from sst_interp.reporting.fig_organism import write_feature_patching_figure, write_organism_figure
        from sst_interp.store import Run

        config = config_from_namespace(ValidateConfig, args)
        rows = run_validation(config, study.open)
        chains = json.loads(Run.open(config.run).questions()["metadata"].iloc[0])["chains"]
        write_organism_figure(pd.read_csv(config.out / RESOLUTION_FILE), rows["patching"].detail,
                              config.out, chance=1 / chains)
        patched = {name.removeprefix("features_patching_"): row.detail for name, row in rows.items()
                   if name.startswith("features_patching_") and len(row.detail)}
        if patched:
            write_feature_patching_figure(patched, config.out)
        print(markdown(list(rows.values())))
        return 0
    from sst_interp.organism.train import train_looped

    table = train_looped(config_from_namespace(LoopedTrainConfig, args))
    print(format_table(table))
    return 0


def console() -> int:
    """The ``sst-organism`` console script."""
    return main()
