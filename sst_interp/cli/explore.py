"""Browse a run in the browser, one question at a time, every iteration: python -m sst_interp.explore RUN.

    python -m sst_interp.explore runs/demo                                  # prints http://127.0.0.1:8765/
    python -m sst_interp.explore runs/gsm8k-codeact --baseline runs/base --probe runs/gsm8k-codeact/probe

Needs the ``explore`` extra (``pip install -e ".[explore]"``: Starlette, uvicorn, plotly). Binds 127.0.0.1 unless
``--host`` says otherwise; needs no network (the page's script comes from the installed plotly package).
"""

from __future__ import annotations

import argparse
import importlib.util
from collections.abc import Sequence

from sst_interp.cli.args import add_config_flags, config_from_namespace, config_parser
from sst_interp.explore.config import ExploreConfig
from sst_interp.kernels.errors import UsageError, cli_entry


def _parser() -> argparse.ArgumentParser:
    """The parser: the run and one flag per :class:`~sst_interp.explore.config.ExploreConfig` field."""
    parser = config_parser("python -m sst_interp.explore", __doc__.split("\n\n")[0])
    add_config_flags(parser, ExploreConfig)
    return parser


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: serve until Ctrl-C; bad input (not a run, a port in use) is one ``error:`` line and exit 2."""
    config = config_from_namespace(ExploreConfig, _parser().parse_args(argv))
    if not 0 <= config.port <= 65535:
        raise UsageError(f"--port must be 0..65535, got {config.port}")
    if config.top_n < 1:
        raise UsageError(f"--top-n must be at least 1, got {config.top_n}")
    missing = [name for name in ("starlette", "uvicorn", "plotly") if importlib.util.find_spec(name) is None]
    if missing:  # checked before anything starts
        raise UsageError(f"the explorer needs the explore extra ({', '.join(missing)} missing): "
                         "pip install -e '.[explore]'")
    from sst_interp.explore.serve import bind, serve
    from sst_interp.explore.server import open_explorer

    sock = bind(config.host, config.port)
    try:
        explorer = open_explorer(config)
        serve(explorer, sock)
    finally:
        sock.close()
    return 0


def console() -> int:
    """Console script ``sst-explore``."""
    return main()
