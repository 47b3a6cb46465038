"""``python -m sst_interp.generate`` (also ``sst-generate``): print the completion of one prompt at several
iteration depths.

The quickest way to see an SST work::

    python -m sst_interp.generate --prompt "Q: 17 + 25 = ?\nA:" --depths 1,2,3,4
"""

from __future__ import annotations

import argparse

from sst_interp.cli.args import add_config_flags, config_from_namespace, config_parser
from sst_interp.kernels.errors import cli_entry
from sst_interp.model.generate_config import GenerateConfig


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; every flag maps to a :class:`~sst_interp.model.generate_config.GenerateConfig` field."""
    parser = config_parser("python -m sst_interp.generate", __doc__.split("\n\n")[0])
    add_config_flags(parser, GenerateConfig)
    return parser


@cli_entry
def main(argv: list[str] | None = None) -> int:
    """Print the completion of ``--prompt`` at each of ``--depths``; returns the exit code."""
    config = config_from_namespace(GenerateConfig, build_parser().parse_args(argv))
    from sst_interp.model.completions import complete_at_depths  # the model stack, once the flags are parsed

    for completion in complete_at_depths(config):
        print(f"--- depth {completion.depth} ({completion.n_tokens} tokens, {completion.seconds:.1f} s, stop: "
              f"{completion.stop_reason})")
        print(completion.text)
    return 0


def console() -> int:
    """The ``sst-generate`` console script."""
    return main()
