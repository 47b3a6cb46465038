"""available() is a promise (issue 31): every label it lists computes, every other one raises NotAvailable with the
reason and the fix; labels in any of their spellings, and a "did you mean" for a near miss.

The run has the demo's shape (24 questions, flat depths 1-4, 18 layers, 10 full positions and sketches after them,
top-128) and the two things the demo run tripped over: a single MUST HALT question (too few to train the halting
probe on) and no basin shift at position 0 (nothing for tab:pos0_divergence to count).
"""

from __future__ import annotations

import pytest

from sst_interp import analyses, study
from sst_interp.analyses.availability import UnknownMeasurement
from sst_interp.analyses.measurement import Measurement
from sst_interp.catalogue import all_measurements, lookup
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.results import NotApplicable
from sst_interp.study.objects import _computed
from sst_interp.synthetic import write_synthetic_run
from tests.unit.analyses.demo_shaped import demo_spec


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    path = tmp_path_factory.mktemp("availability") / "demo"
    write_synthetic_run(path, demo_spec())
    return path


def test_every_label_available_lists_computes_and_every_other_says_why(demo):
    a = study.open(demo)
    support = a.available()
    listed = support[support["available"]]
    assert len(listed) >= 30  # the iteration measurements, the figures, the depth policies
    for label in listed["label"]:
        frame = a.data(label)
        assert len(frame) > 0, label
        assert list(frame.columns) == list(lookup(label).columns), label
    for label, reason in support.loc[~support["available"], ["label", "reason"]].itertuples(index=False):
        assert reason, label
        with pytest.raises(analyses.NotAvailable, match=f"^{label}: "):
            a.data(label)


def test_what_the_manifest_cannot_tell_is_checked_and_names_the_fix(demo):
    a = study.open(demo)
    support = a.available().set_index("label")
    # one MUST HALT question: the probe cannot be trained here; the in-sample tables name probe= as the fix
    for label in ("tab:halting_probe", "tab:halting_probe_per_iter", "fig:halt_signal"):
        assert not support.loc[label, "available"]
        assert "the run has 1 MUST HALT question" in support.loc[label, "reason"]
        assert "pass probe=PATH, a probe trained with `python -m sst_interp.probe train`" in support.loc[label,
                                                                                                         "reason"]
    for label in ("tab:halting_probe_loocv", "tab:halting_probe_layer_sweep", "fig:feature_position_grid"):
        assert not support.loc[label, "available"] and "record more questions" in support.loc[label, "reason"]
    # no basin shift at position 0: found by computing the basin step, before saying yes
    assert not support.loc["tab:pos0_divergence", "available"]
    assert "position 0" in support.loc["tab:pos0_divergence", "reason"]
    with pytest.raises(analyses.NotAvailable, match="pass probe=PATH"):
        a.data("tab:halting_probe")
    try:  # the except clauses written before NotAvailable existed still catch it
        a.data("tab:pos0_divergence")
    except UsageError as err:
        assert isinstance(err, ValueError) and "position 0" in str(err)


def test_a_usage_error_inside_a_computation_becomes_not_applicable():
    def compute(analysis):
        raise UsageError("cross-fitting needs at least 2 MUST HALT questions,\n the run has 1")

    entry = Measurement(name="planted_failure", label="", title="a computation that refuses its input", requires=(),
                        compute=compute, tidy=lambda r: r.table(), columns={})
    result = _computed(entry, object())
    assert isinstance(result, NotApplicable)
    assert result.reason == "cross-fitting needs at least 2 MUST HALT questions, the run has 1"
    assert result.measurement == "tab:planted_failure"


def test_every_label_is_accepted_in_every_spelling():
    everything = all_measurements()
    # a spelling that is exactly another entry's key, artefact or name is that entry's (fig:convergence_monitoring
    # is the figure, tab:convergence_monitoring the table of its tests)
    exact = {spelling: m for m in everything for spelling in (m.key, m.artefact, m.name)}
    for measurement in everything:
        name = measurement.name
        spellings = {measurement.key, measurement.artefact, name, f"tab:{name}", f"tab_{name}", f"fig:{name}",
                     f"fig_{name}"}
        if measurement.label:
            bare = measurement.label.split(":", 1)[1]
            spellings |= {f"tab:{bare}", f"tab_{bare}", f"fig:{bare}", f"fig_{bare}"}
        for spelling in spellings:
            assert lookup(spelling) is exact.get(spelling, measurement), spelling
    assert lookup("tab:gmm") is lookup("tab_gmm") is lookup("gmm") is lookup(" tab:gmm ")
    assert lookup("tab:gmm").key == "tab:gmm" and lookup("tab:gmm").artefact == "tab_gmm"
    assert lookup("tab:argmax_concentration") is lookup("tab_argmax_concentration") is lookup("argmax_concentration")
    assert lookup("fig:convergence_monitoring").kind == "figure"
    assert lookup("tab:convergence_monitoring").kind == "table"


def test_a_near_miss_gets_a_did_you_mean_not_the_whole_list(demo):
    with pytest.raises(UnknownMeasurement) as caught:
        lookup("tab:argmax_concentratoin")
    message = str(caught.value)
    assert "did you mean tab:argmax_concentration?" in message
    assert len(message) < 250, message
    with pytest.raises(analyses.NotAvailable, match="did you mean tab:gmm"):
        study.open(demo).data("tab:gmn")
    with pytest.raises(UsageError, match="unknown measurement 'xyzzy'; no measurement has a similar name"):
        lookup("xyzzy")
