"""Cache keys follow the inputs' content; cached data round-trips without pickle."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from sst_interp.kernels.results import NotApplicable
from sst_interp.reporting.artefacts import ArtefactData
from sst_interp.reporting.cache import ResultCache, make_key, path_fingerprint
from tests.unit.reporting.builders import write_tiny_run


def test_run_fingerprint_is_stable_and_follows_shard_changes(tmp_path):
    run = tmp_path / "run"
    write_tiny_run(run)
    first = path_fingerprint(run)
    assert path_fingerprint(run) == first
    shard = next(p for p in (run / "hidden").rglob("*.parquet"))
    st = shard.stat()
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert path_fingerprint(run) != first
    (run / ".tmp-writer").write_text("partial")  # temporary files of a writer do not count
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path_fingerprint(run) == first


def test_make_key_depends_on_every_part():
    base = {"artefact": "tab_x", "inputs": {"run": "abc"}, "code": "1"}
    assert make_key(base) == make_key(dict(reversed(list(base.items()))))
    assert make_key(base) != make_key({**base, "inputs": {"run": "abd"}})
    assert make_key(base) != make_key({**base, "code": "2"})


def test_cache_round_trip_tables_meta_and_not_applicable(tmp_path):
    cache = ResultCache(tmp_path)
    numbers = pd.DataFrame({"layer": np.arange(3), "overlap": [0.5, 0.25, 1 / 3], "name": ["a", "b", "c"]})
    mixed = pd.DataFrame({"quantity": ["n", "label"], "value": [3, "stable"]})  # Parquet cannot hold this column
    numbers.attrs["threshold"] = 0.976
    data = ArtefactData({"main": numbers, "mixed": mixed}, {"notes": ["n = 3"], "threshold": np.float64(0.976),
                                                              "layers": np.arange(2)})
    cache.save("tab_x", "k1", data)
    back = cache.load("tab_x", "k1")
    pd.testing.assert_frame_equal(back.tables["main"], numbers, check_dtype=False, check_exact=True)
    assert back.tables["mixed"]["value"].tolist() == [3, "stable"]
    assert back.meta == {"notes": ["n = 3"], "threshold": 0.976, "layers": [0, 1]}
    assert not list(tmp_path.rglob("*.pkl")) and not list(tmp_path.rglob("*.pickle"))
    cache.save("tab_x", "k2", NotApplicable("run has a single depth", "tab:x"))
    na = cache.load("tab_x", "k2")
    assert isinstance(na, NotApplicable) and na.reason == "run has a single depth" and na.measurement == "tab:x"
    assert cache.load("tab_x", "k1") is None  # older keys of the artefact are dropped
    (tmp_path / "data" / "tab_x" / "k2" / "meta.json").write_text("{not json")
    assert cache.load("tab_x", "k2") is None  # a damaged entry is recomputed, never trusted
