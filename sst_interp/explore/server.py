"""The explorer's web app: one HTML page and JSON endpoints, on Starlette, served by uvicorn.

Routes (every view of the page has its own URL: ``/?q=ID&depth=D&turn=T&pos=P&a=A&b=B``):

=========================  =============================================================================
``GET /``                  the page (``static/index.html``), whatever the query
``GET /api/run``           the run's summary, the threshold, the probe, report links
``GET /api/questions``     the question list (:mod:`sst_interp.explore.listing`), filtered by the query
``GET /api/question/{q}``  the question view (:func:`sst_interp.explore.question.question_view`)
``GET /api/token``         one token's hover (``q, depth, turn, pos``)
``GET /api/position``      the position view (``q, depth, turn, pos``)
``GET /api/halting``       the halting view (``q``)
``GET /api/lens``          the per-layer logit lens (``q, depth, turn, pos``; loads the model on first use)
``GET /api/attention``     each recorded head's attention at one position and iteration (``q, depth, turn, pos, it``)
``GET /api/features``      the dictionary's top features at one position and iteration, with their activation at
                           every iteration (``q, depth, turn, pos, it``; ``--dictionary``)
``GET /static/...``        the page's script and style; ``plotly.min.js`` from the installed plotly wheel
``GET /report/...``        the report folder given with ``--report``
=========================  =============================================================================

Errors are JSON ``{"error": message}``: 400 for a bad request, and 500 with ``"damaged": true`` when a file of the
run fails its checks while being read (the message names the file and how to repair it); the server keeps serving
every other question.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from sst_interp.kernels.errors import UsageError
from sst_interp.explore.attention import attention_view
from sst_interp.explore.config import ExploreConfig
from sst_interp.explore.features import DictionaryLoader, check_dictionary, features_view
from sst_interp.explore.glossary import glossary_page
from sst_interp.explore.halting import ProbeScorer, halting_view
from sst_interp.explore.layer_lens import LensLoader, lens_view
from sst_interp.explore.listing import ListFilter, apply_filter, question_rows
from sst_interp.explore.model_info import model_banner
from sst_interp.explore.position import position_view
from sst_interp.explore.question import question_view, token_detail
from sst_interp.explore.report_links import check_report, report_links
from sst_interp.explore.source import RunSource
from sst_interp.store import CorruptRunError

STATIC = Path(__file__).parent / "static"


def plotly_js() -> Path:
    """The ``plotly.min.js`` bundled in the installed ``plotly`` wheel (no CDN)."""
    import plotly

    target = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not target.is_file():
        raise UsageError(f"the installed plotly package has no {target}; reinstall it with pip install -e '.[explore]'")
    return target


def _int(request: Request, name: str, default: int | None = None) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        if default is None:
            raise UsageError(f"missing query parameter {name!r}")
        return default
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"query parameter {name!r} must be an integer, got {raw!r}") from None


def _flag(raw: str | None) -> bool | None:
    if raw in (None, ""):
        return None
    if raw in ("true", "1", "yes"):
        return True
    if raw in ("false", "0", "no"):
        return False
    raise UsageError(f"expected true or false, got {raw!r}")


def list_filter(request: Request) -> ListFilter:
    """The list's filters from the query: ``search``, ``correct`` (``1:true,3:false``), ``staged``, ``change``,
    ``must_halt``, ``min_turns``, ``stop_reason``."""
    params = request.query_params
    correct = None
    if params.get("correct"):
        correct = {}
        for part in params["correct"].split(","):
            depth, _, want = part.partition(":")
            try:
                correct[int(depth)] = bool(_flag(want or "true"))
            except ValueError:
                raise UsageError(f"correct filter must look like 1:true,3:false, got {params['correct']!r}") from None
    return ListFilter(
        search=params.get("search") or None, correct_at=correct,
        staged=_int(request, "staged") if params.get("staged") else None,
        change=params.get("change") or None, must_halt=_flag(params.get("must_halt")),
        min_turns=_int(request, "min_turns") if params.get("min_turns") else None,
        stop_reason=params.get("stop_reason") or None)


class Explorer:
    """The app's state: the run source, the optional probe and dictionary, the report folder.

    Args:
        config: the explorer's configuration (paths already checked by :func:`open_explorer`).
        source: the run source (made from ``config`` when None).
        scorer: the loaded probe (made from ``config.probe`` when None and a probe is given).
    """

    def __init__(self, config: ExploreConfig, source: RunSource | None = None,
                 scorer: ProbeScorer | None = None) -> None:
        self.config = config
        self.source = source if source is not None else RunSource(config)
        if scorer is None and config.probe is not None:
            scorer = ProbeScorer(config.probe, self.source.run.hidden_size)
        self.scorer = scorer
        self.lens = LensLoader()
        self.dictionary = DictionaryLoader(config.dictionary) if config.dictionary is not None else None

    # ------------------------------------------------------------------------------------------ endpoints
    def run_summary(self, request: Request) -> dict[str, Any]:
        run = self.source.run
        threshold = self.source.threshold
        done = {str(d): len(run.question_ids(d)) for d in run.depths}
        return {"path": str(run.path), "name": run.path.name, "protocol": run.protocol, "depths": run.depths,
                "recorded": done, "questions": len(self.source.table("questions")),
                "hidden_size": run.hidden_size, "num_layers": run.num_layers, "dtype": run.dtype,
                "full_positions": int(run.manifest.get("full_positions") or 0),
                "sketch_positions": int(run.manifest.get("sketch_positions") or 0),
                "threshold": threshold.value, "threshold_source": threshold.source,
                "threshold_ready": threshold.ready,
                "baseline": str(self.source.baseline.path) if self.source.baseline is not None else None,
                "probe": str(self.config.probe) if self.config.probe is not None else None,
                "dictionary": str(self.config.dictionary) if self.config.dictionary is not None else None,
                "report": report_links(self.config.report), "tokenizer": self.source.tokens.source,
                "model": model_banner(run.manifest)}

    def questions(self, request: Request) -> dict[str, Any]:
        flt = list_filter(request)
        questions = self.source.table("questions")
        # built once per commit of the run (the cache is cleared when it re-opens); filters only select rows
        rows, meta = self.source.block(("question list",), lambda run: question_rows(
            run, questions, self.source.table("episodes"), self.source.table("generations"), self.source.baseline))
        prompts = dict(zip(questions["question_id"], questions["prompt"]))
        shown = apply_filter(rows, flt, prompts)
        return {"rows": shown, "meta": {**meta, "shown": len(shown)}}

    def question(self, request: Request) -> dict[str, Any]:
        return question_view(self.source, request.path_params["qid"])

    def token(self, request: Request) -> dict[str, Any]:
        return token_detail(self.source, _qid(request), _int(request, "depth"), _int(request, "turn", 0),
                            _int(request, "pos"))

    def position(self, request: Request) -> dict[str, Any]:
        return position_view(self.source, _qid(request), _int(request, "depth"), _int(request, "turn", 0),
                             _int(request, "pos"))

    def halting(self, request: Request) -> dict[str, Any]:
        return halting_view(self.source, self.scorer, _qid(request))

    def layer_lens(self, request: Request) -> dict[str, Any]:
        return lens_view(self.source, self.lens, _qid(request), _int(request, "depth"), _int(request, "turn", 0),
                         _int(request, "pos"))

    def attention(self, request: Request) -> dict[str, Any]:
        iteration = _int(request, "it") if request.query_params.get("it") else None
        return attention_view(self.source, _qid(request), _int(request, "depth"), _int(request, "turn", 0),
                              _int(request, "pos"), iteration)

    def features(self, request: Request) -> dict[str, Any]:
        iteration = _int(request, "it") if request.query_params.get("it") else None
        return features_view(self.source, self.dictionary, _qid(request), _int(request, "depth"),
                             _int(request, "turn", 0), _int(request, "pos"), iteration)


def _qid(request: Request) -> str:
    qid = request.query_params.get("q")
    if not qid:
        raise UsageError("missing query parameter 'q' (the question id)")
    return qid


def _json(handler: Callable[[Request], dict[str, Any]]) -> Callable[[Request], Response]:
    """A JSON endpoint; a bad request is 400, a damaged file 500 naming it (the server keeps running)."""

    def endpoint(request: Request) -> Response:
        try:
            return JSONResponse(handler(request))
        except CorruptRunError as err:
            return JSONResponse({"error": " ".join(str(err).split()), "damaged": True}, status_code=500)
        except UsageError as err:
            return JSONResponse({"error": " ".join(str(err).split())}, status_code=400)

    return endpoint


def create_app(explorer: Explorer) -> Starlette:
    """The Starlette app serving ``explorer`` (synchronous endpoints run in Starlette's thread pool)."""
    page = STATIC / "index.html"
    routes = [
        Route("/", lambda request: FileResponse(page)),
        Route("/glossary", lambda request: HTMLResponse(glossary_page())),
        Route("/favicon.ico", lambda request: Response(status_code=204)),  # none: keeps the browser's log clean
        Route("/static/plotly.min.js", lambda request: FileResponse(plotly_js(), media_type="text/javascript")),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
        Route("/api/run", _json(explorer.run_summary)),
        Route("/api/questions", _json(explorer.questions)),
        Route("/api/question/{qid:path}", _json(explorer.question)),
        Route("/api/token", _json(explorer.token)),
        Route("/api/position", _json(explorer.position)),
        Route("/api/halting", _json(explorer.halting)),
        Route("/api/lens", _json(explorer.layer_lens)),
        Route("/api/attention", _json(explorer.attention)),
        Route("/api/features", _json(explorer.features)),
    ]
    if explorer.config.report is not None:
        routes.append(Mount("/report", StaticFiles(directory=explorer.config.report, html=True), name="report"))
    return Starlette(routes=routes)


def open_explorer(config: ExploreConfig) -> Explorer:
    """Check the inputs (a run, the optional baseline, probe and report) and open them; UsageError on bad input.

    The run's tables are read whole here, every page with its checksum (as ``report`` and ``probe`` check them): the
    list is built from them, so a damaged table is refused before the server starts, naming the file. Shards are
    checked as they are read, per request.
    """
    check_report(config.report)
    explorer = Explorer(config)
    if config.dictionary is not None:
        check_dictionary(config.dictionary, explorer.source.run)
    for name in ("questions", "generations", "episodes"):
        explorer.source.table(name)  # every page read with its checksum: a damaged table stops here
    explorer.source.start_background()
    return explorer
