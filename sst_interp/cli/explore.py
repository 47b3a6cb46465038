"""Browse a run in the browser, one question at a time, every iteration: python -m sst_interp.explore RUN.

    python -m sst_interp.explore runs/demo                                  # prints http://127.0.0.1:8765/
    python -m sst_interp.explore runs/gsm8k-codeact --baseline runs/base --probe runs/gsm8k-codeact/probe

Needs the ``explore`` extra (``pip install -e ".[explore]"``: Starlette, uvicorn, plotly). Binds 127.0.0.1 unless
``--host`` says otherwise; needs no network (the page's script comes from the installed plotly package).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sst_interp.cli.args import add_config_flags, arg, config_from_namespace, config_parser
from sst_interp.kernels.errors import UsageError, cli_entry


@dataclass(frozen=True)
class ExploreFlags:
    """The command's flags (converted once into :class:`sst_interp.explore.config.ExploreConfig`)."""

    baseline: Path | None = arg(None, help="a matched baseline run: overthinks and recoveries are counted against it "
                                           "(default: against the run's smallest flat depth)")
    probe: Path | None = arg(None, help="a saved halting probe (probe train's folder or file) for the halting view")
    report: Path | None = arg(None, help="the report folder (python -m sst_interp.report --out) to link artefacts from")
    host: str = arg("127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)")
    port: int = arg(8765, help="TCP port (0 picks a free one)")
    top_n: int = arg(10, help="tokens shown per iteration in the hover and the logit lens")


def _parser():
    parser = config_parser("python -m sst_interp.explore", __doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run directory (the --out of a record run)")
    add_config_flags(parser, ExploreFlags)
    return parser


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: serve until Ctrl-C; bad input (not a run, a port in use) is one ``error:`` line and exit 2."""
    namespace = _parser().parse_args(argv)
    flags = config_from_namespace(ExploreFlags, namespace)
    if not 0 <= flags.port <= 65535:
        raise UsageError(f"--port must be 0..65535, got {flags.port}")
    if flags.top_n < 1:
        raise UsageError(f"--top-n must be at least 1, got {flags.top_n}")
    missing = [name for name in ("starlette", "uvicorn", "plotly") if importlib.util.find_spec(name) is None]
    if missing:  # checked before anything starts
        raise UsageError(f"the explorer needs the explore extra ({', '.join(missing)} missing): "
                         "pip install -e '.[explore]'")
    from sst_interp.explore.config import ExploreConfig
    from sst_interp.explore.serve import bind, serve
    from sst_interp.explore.server import open_explorer

    config = ExploreConfig(run=namespace.run, baseline=flags.baseline, probe=flags.probe, report=flags.report,
                           host=flags.host, port=flags.port, top_n=flags.top_n)
    sock = bind(config.host, config.port)
    try:
        explorer = open_explorer(config)
        serve(explorer, sock)
    finally:
        sock.close()
    return 0


def console() -> None:
    """Console script ``sst-explore``."""
    raise SystemExit(main())
