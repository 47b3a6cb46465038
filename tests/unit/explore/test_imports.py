"""The explorer's server keeps the statistics stack off its import path (issue 45 item 8): scipy, statsmodels and
scikit-learn would cost it more memory than a small run's tables (``bench/bench_explore.py``); the question and
position views need none of them, and the GMM fit that does runs in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
HEAVY = ("scipy", "statsmodels", "sklearn", "torch")

#: Imports the server, opens ``argv[1]`` without the fit, serves a question and a position view, and prints which
#: of HEAVY are loaded after each step.
SCRIPT = """
import json, sys
heavy = %r
loaded = lambda: sorted(name for name in heavy if name in sys.modules)
import sst_interp.explore.server as server
steps = {"import": loaded()}
from pathlib import Path
from starlette.testclient import TestClient
from sst_interp.explore.config import ExploreConfig
client = TestClient(server.create_app(server.open_explorer(ExploreConfig(run=Path(sys.argv[1]), fit_gmm=False))))
qid = client.get("/api/questions").json()["rows"][0]["question_id"]
assert client.get(f"/api/question/{qid}").status_code == 200
steps["question view"] = loaded()
assert client.get(f"/api/position?q={qid}&depth=4&turn=0&pos=1").status_code == 200
steps["position view"] = loaded()
print(json.dumps(steps))
""" % (HEAVY,)


def test_the_server_and_its_views_load_no_statistics_stack(planted):
    root, _ = planted
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(root / "sst")], capture_output=True, text=True,
                          cwd=REPO, env=dict(os.environ), timeout=300)
    assert done.returncode == 0, done.stderr
    steps = json.loads(done.stdout.strip().splitlines()[-1])
    assert steps == {"import": [], "question view": [], "position view": []}, steps
