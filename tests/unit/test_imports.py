"""Import cost and deprecated names.

- ``from sst_interp import analyses`` and ``from sst_interp import study`` (and every measurement module behind
  ``study.open``, the catalogue included) load neither torch
  nor scikit-learn; a measurement that needs them imports them when it runs.
- Every command answers ``--help`` without importing torch, transformers, scikit-learn, scipy, pandas or the other
  libraries of :data:`HELP_HEAVY`: its flags are parsed before the model, the analyses or the probe are imported.
  (What that costs in CPU seconds, against the 0.5 s goal, is ``bench/bench_help.py``'s to measure: a test does
  not time anything, so a slow or busy machine cannot fail it.)
- The package uses transformers' current names.

Each check runs in a fresh interpreter (a subprocess), since this test process has long imported everything.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "sklearn", "transformers")
#: What ``--help`` must not import: each costs from a few tenths of a second of CPU (pandas, scipy) to seconds
#: (torch, transformers), so one of them alone breaks the 0.5 s goal. numpy and pyarrow stay allowed (a few
#: commands' option modules load them; bench/bench_help.py shows what that costs).
HELP_HEAVY = (*HEAVY, "scipy", "pandas", "matplotlib", "statsmodels", "peft", "accelerate", "safetensors")
#: Runs ``python -m MODULE [SUB] --help`` as ``python -m`` does (``runpy``), then names the modules of
#: :data:`HELP_HEAVY` it loaded on a last line of stderr, as JSON.
HELP_PROBE = (
    "import json, runpy, sys\n"
    "module, *rest = sys.argv[1:]\n"
    "sys.argv = [module, *rest, '--help']\n"
    "code = 0\n"
    "try:\n"
    "    runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
    "except SystemExit as err:\n"
    "    code = err.code\n"
    f"print(json.dumps(sorted(m for m in {HELP_HEAVY!r} if m in sys.modules)), file=sys.stderr)\n"
    "sys.exit(code)\n"
)
COMMANDS = [
    ["sst_interp.record"], ["sst_interp.report"], ["sst_interp.generate"], ["sst_interp.train"],
    ["sst_interp.train.codeact_data"], ["sst_interp.probe"], ["sst_interp.probe.position_sim"], ["sst_interp.store"],
    ["sst_interp.intervene"], *(["sst_interp.intervene", sub] for sub in ("window", "trace", "steer")),
    *(["sst_interp.probe", sub] for sub in ("train", "evaluate", "sweep", "loocv", "ablate", "policies")),
    *(["sst_interp.store", sub] for sub in ("verify", "repair")),
    ["sst_interp.explore"], ["sst_interp.features"],
    *(["sst_interp.features", sub] for sub in ("train", "evaluate", "attribute")),
]


def _loaded_after(code: str) -> dict[str, bool]:
    """Which of :data:`HEAVY` a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    loaded = set(filter(None, out.stdout.strip().split(",")))
    return {name: name in loaded for name in HEAVY}


@pytest.mark.parametrize("code", [
    "from sst_interp import analyses",
    "from sst_interp import study",
    "import sst_interp.study.objects",  # every module a RunAnalysis method calls, and the catalogue
    "import sst_interp.study.comparison",
    "from sst_interp import study; study.RunAnalysis, study.NotAvailable",
    "import sst_interp.reporting.registry",  # every artefact spec
])
def test_the_analyses_import_neither_torch_nor_scikit_learn(code):
    loaded = _loaded_after(code)
    assert not loaded["torch"] and not loaded["sklearn"], f"{code!r} loaded {loaded}"


def test_sae_lens_stays_off_every_command_line_and_the_features_package():
    """SAELens (an optional extra that pulls transformer-lens, wandb and datasets) loads only when a dictionary is
    trained or read: no command module loads it (what --help runs), nor does importing the features package or its
    options."""
    commands = sorted(p.stem for p in (ROOT / "sst_interp" / "cli").glob("*.py") if p.stem != "__init__")
    code = "; ".join([*(f"import sst_interp.cli.{name}" for name in commands), "import sst_interp.features",
                      "import sst_interp.features.options", "import sys",
                      "print([m for m in ('sae_lens', 'torch') if m in sys.modules])"])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("module", ["sst_interp.experiments.organism_validation",
                                    "sst_interp.experiments.halting_validation",
                                    "sst_interp.experiments.feature_patching", "sst_interp.interventions.apply"])
def test_sae_lens_stays_off_the_jobs_that_read_a_dictionary_only_when_asked(module):
    """``organism validate`` reads dictionaries only under --features, and an Intervener only for a feature
    operation: without them they must run where the features extra is not installed (the demo's environment)."""
    code = f"import importlib, sys; importlib.import_module({module!r}); print('sae_lens' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"


def test_a_submodule_of_interventions_loads_only_itself():
    """The package exports lazily: parsing a spec (a flag's value) loads neither torch nor the Intervener."""
    code = ("import sst_interp.interventions.spec, sys; "
            "print(sorted(m for m in sys.modules if m.startswith('sst_interp.interventions')), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split() == ["['sst_interp.interventions',", "'sst_interp.interventions.spec']", "False"]


def test_a_measurement_that_needs_torch_still_gets_it():
    out = subprocess.run([sys.executable, "-c", "from sst_interp.analyses.precision import machine_epsilon; "
                          "print(machine_epsilon('bfloat16'))"], capture_output=True, text=True, cwd=ROOT, check=True)
    assert float(out.stdout) == 2.0 ** -7


def help_imports(command: list[str]) -> tuple[list[str], subprocess.CompletedProcess]:
    """The modules of :data:`HELP_HEAVY` that ``python -m COMMAND --help`` loads, and the finished process."""
    done = subprocess.run([sys.executable, "-c", HELP_PROBE, *command], capture_output=True, text=True, cwd=ROOT)
    return json.loads(done.stderr.splitlines()[-1]), done


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_answers_without_importing_a_heavy_library(command):
    loaded, done = help_imports(command)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:"), done.stdout[:200]
    assert loaded == [], f"python -m {' '.join(command)} --help imported {loaded}"


def test_the_help_probe_sees_a_heavy_import():
    """The probe is not blind: a module that imports pandas at the top is caught."""
    loaded, done = help_imports(["json.tool"])  # the standard library's own -m tool, then pandas after it
    assert done.returncode == 0 and done.stdout.startswith("usage:") and loaded == []
    probe = HELP_PROBE.replace("code = 0\n", "code = 0\nimport pandas\n")
    done = subprocess.run([sys.executable, "-c", probe, "json.tool"], capture_output=True, text=True, cwd=ROOT)
    assert json.loads(done.stderr.splitlines()[-1]) == ["pandas"]


@pytest.mark.parametrize("package", ["sst_interp.model", "sst_interp.train", "sst_interp.probe", "sst_interp.record",
                                     "sst_interp.reporting", "sst_interp.store", "sst_interp.analyses",
                                     "sst_interp.data", "sst_interp.interventions", "sst_interp.features"])
def test_every_lazily_exported_name_resolves(package):
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name}"
    assert set(module.__all__) <= set(dir(module))


def test_the_exports_are_read_from_the_type_checking_imports():
    """Declared once: the name -> module map is the package's own ``if TYPE_CHECKING:`` imports; an import there
    from another package is an annotation, not an export (study annotates with store's Run)."""
    study = importlib.import_module("sst_interp.study")
    assert study._EXPORTS["open_run"] == "sst_interp.study.objects"
    assert study._EXPORTS["open_comparison"] == "sst_interp.study.comparison"
    assert "Run" not in study._EXPORTS and "Run" not in study.__all__
    record = importlib.import_module("sst_interp.record")
    assert record._EXPORTS == {"record": "sst_interp.record.runner", "record_questions": "sst_interp.record.runner",
                               "print_summary": "sst_interp.record.summary",
                               "staged_capacity": "sst_interp.record.summary"}
    assert {"RecordOptions", "record"} <= set(record.__all__)  # eager names beside the lazy ones


def test_submodules_are_reachable_as_attributes_as_before():
    out = subprocess.run([sys.executable, "-c", "from sst_interp import analyses, model; import sys; "
                          "print(analyses.basins.fit_gmm.__name__, model.sst.SSTModel.__name__, 'torch' in sys.modules)"],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split() == ["fit_gmm", "SSTModel", "True"]
    with pytest.raises(AttributeError):
        importlib.import_module("sst_interp.analyses").no_such_thing  # noqa: B018


def test_the_moved_analysis_objects_say_where_they_went():
    """The analysis objects left ``sst_interp.analyses`` for ``sst_interp.study`` (issue 45): each old name is an
    AttributeError naming the new one, and the new one is the same object the report uses."""
    analyses = importlib.import_module("sst_interp.analyses")
    study = importlib.import_module("sst_interp.study")
    for name in sorted(analyses.MOVED_TO_STUDY):
        with pytest.raises(AttributeError, match=rf"sst_interp\.analyses\.{name} moved to sst_interp\.study: .*"
                                                 rf"`study\.{name}`"):
            getattr(analyses, name)
        assert name in study.__all__
    assert study.RunAnalysis.__module__ == "sst_interp.study.objects"
    assert analyses.NotAvailable is study.NotAvailable  # one exception class, reachable from both


def test_the_package_uses_transformers_current_names():
    """transformers 5.2x renamed the decoder's ``past_key_values=`` to ``cache=`` (the old one goes in 5.40) and
    ``is_gradient_checkpointing`` to ``is_activation_checkpointing``; only :func:`sst_interp.model.sst.cache_keyword`
    may name the old keyword, for releases before the rename."""
    offenders = []
    for folder in ("sst_interp", "hooks", "analyses"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                code = re.sub(r"``[^`]*``", "", line.split("#", 1)[0])  # not comments or docstring names
                if re.search(r"\bpast_key_values\s*=(?!=)", code) or re.search(r"\.is_gradient_checkpointing\b", code):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_the_kv_cache_goes_in_under_the_keyword_the_decoder_takes():
    """transformers >= the rename takes ``cache=``; the releases before it (5.17 on the GPU image) take
    ``past_key_values=``. The keyword is read from the decoder's signature."""
    from torch import nn

    from sst_interp.model.sst import cache_keyword

    class Renamed(nn.Module):
        def forward(self, input_ids=None, cache=None, use_cache=None, **kwargs):
            return cache

    class Before(nn.Module):
        def forward(self, input_ids=None, past_key_values=None, use_cache=None, **kwargs):
            return past_key_values

    assert cache_keyword(Renamed()) == "cache" and cache_keyword(Before()) == "past_key_values"
    from transformers.models.gemma3.modeling_gemma3 import Gemma3TextModel

    expected = "cache" if "cache" in inspect.signature(Gemma3TextModel.forward).parameters else "past_key_values"
    assert cache_keyword(Gemma3TextModel.__new__(Gemma3TextModel)) == expected


def test_the_probe_flags_offer_exactly_the_probe_activations():
    from sst_interp.probe.defaults import ACTIVATION_NAMES
    from sst_interp.probe.model import ACTIVATIONS

    assert list(ACTIVATION_NAMES) == sorted(ACTIVATIONS)
