"""docs/format.md lists exactly the columns, and their types, that a freshly recorded run has.

A tiny random model records a completion run with every shard kind (``--gates``, ``--attention``); each file's Parquet schema is
compared with the first table under that file's heading in docs/format.md. The CodeACT-only columns (episodes,
and what CodeACT adds to generations) are compared with the schemas the writer uses for them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sst_interp.cli.record import main as record_main
from sst_interp.store import schema as sch
from sst_interp.store.contract import REQUIRED_FIELDS
from tests.unit.conftest import FAST, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

DOC = Path(__file__).resolve().parents[3] / "docs" / "format.md"
TOP_K = 5  # different from the sketch size (6 for d = 32), so the doc's K and k are told apart


def doc_tables() -> dict[str, list[list[tuple[str, str, str]]]]:
    """Heading (the file name in backticks after ``###``) -> its tables, each a list of (column, type, contract)
    rows; ``contract`` is the third cell when the table has a contract column, else ``yes``."""
    sections: dict[str, list[list[tuple[str, str, str]]]] = {}
    current: list[list[tuple[str, str, str]]] | None = None
    in_table = False
    for line in DOC.read_text().splitlines():
        heading = re.match(r"^#{2,3} `([^`]+)`\s*$", line)
        if heading:
            current = sections.setdefault(heading.group(1), [])
            in_table = False
            continue
        if line.startswith("#"):
            current, in_table = None, False
            continue
        if current is None:
            continue
        if line.startswith("| column |"):
            header = [c.strip() for c in line.strip("|").split("|")]
            current.append([])
            in_table = "contract" in header
            continue
        row = re.match(r"^\| `([^`]+)` \| ([^|]+) \|(?: ([^|]+) \|)?", line)
        if row and current:
            contract = row.group(3).strip() if in_table and row.group(3) else "yes"
            current[-1].append((row.group(1), row.group(2).strip(), contract))
    return sections


def render(kind: pa.DataType, sizes: dict[int, str]) -> str:
    """An Arrow type in the doc's notation; fixed sizes become their symbols (d, K, k, 2d)."""
    if pa.types.is_fixed_size_list(kind):
        return f"fixed_size_list<{render(kind.value_type, sizes)}>[{sizes.get(kind.list_size, kind.list_size)}]"
    if pa.types.is_list(kind):
        return f"list<{render(kind.value_type, sizes)}>"
    if pa.types.is_fixed_size_binary(kind):
        return f"fixed_size_binary[{sizes.get(kind.byte_width, kind.byte_width)}]"
    names = {pa.string(): "string", pa.float32(): "float32", pa.bool_(): "bool", pa.binary(): "binary"}
    return names.get(kind, str(kind))


@pytest.fixture(scope="module")
def fresh_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("format")
    model = save_tiny_model(root / "model")
    out = root / "run"
    record_main(FAST + ["--top-k", str(TOP_K), "--model", str(model), "--out", str(out), "--depths", "1,2",
                        "--limit", "2", "--batch-size", "2", "--demo-preset", "--gates", "--attention", "all"])
    return out


def _files(run: Path) -> dict[str, Path]:
    files = {name: run / name for name in ("questions.parquet", "generations.parquet")}
    for kind in sch.KINDS:
        files[f"{kind}/depth=D/*.parquet"] = sorted((run / kind / "depth=1").glob("*.parquet"))[0]
    return files


def test_the_doc_lists_exactly_the_columns_and_types_of_a_fresh_run(fresh_run):
    sections = doc_tables()
    d = pq.read_metadata(next((fresh_run / "hidden" / "depth=1").glob("*.parquet"))).schema.to_arrow_schema() \
        .field("values").type.list_size
    k = pq.read_schema(next((fresh_run / "sketch" / "depth=1").glob("*.parquet"))).field("top_indices").type.list_size
    assert len({d, TOP_K, k, 2 * d}) == 4
    sizes = {"logits": {TOP_K: "K"}, "sketch": {k: "k"}, "hidden": {d: "d", 2 * d: "2d"}}
    for name, path in _files(fresh_run).items():
        assert name in sections and sections[name], f"docs/format.md has no column table under ### `{name}`"
        documented = {column: kind for column, kind, _ in sections[name][0]}
        written = pq.read_schema(path)
        assert list(documented) == written.names, f"{name}: doc {list(documented)} vs file {written.names}"
        for field in written:
            shown = render(field.type, sizes.get(name.split("/")[0], {}))
            alternatives = [alt.strip() for alt in documented[field.name].split(" or ")]
            assert shown in alternatives, f"{name} column {field.name}: file {shown}, doc {documented[field.name]}"


def test_the_doc_lists_the_codeact_contract_columns():
    sections = doc_tables()
    episodes = {column: contract for column, _, contract in sections["episodes.parquet"][0]}
    assert [c for c, contract in episodes.items() if contract == "yes"] == sch.EPISODES_SCHEMA.names
    added = {column: contract for column, _, contract in sections["generations.parquet"][1]}
    assert [c for c, contract in added.items() if contract == "yes"] == list(sch.CODEACT_GENERATION_COLUMNS)
    generations = [c for c, _, contract in sections["generations.parquet"][0] if contract == "yes"]
    assert generations == sch.GENERATIONS_SCHEMA.names


def test_the_doc_lists_every_required_manifest_field():
    text = DOC.read_text()
    manifest = text[text.index("## manifest.json"):text.index("## Tables")]
    listed = re.findall(r"^\| `([a-z_]+)` \|", manifest, flags=re.M)
    assert listed[:len(REQUIRED_FIELDS)] == list(REQUIRED_FIELDS)


def test_the_doc_lists_the_numerics_fingerprint_fields_of_a_fresh_run(fresh_run):
    """docs/format.md's fingerprint table has exactly the fields of a fresh run's ``identity.numerics``, in the
    order the package names them."""
    import json

    from sst_interp.record.numerics import FIELDS

    text = DOC.read_text()
    section = text[text.index("### Numerics fingerprint"):]
    section = section[:section.index("\n## ")]
    listed = re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.M)
    numerics = json.loads((fresh_run / "manifest.json").read_text())["identity"]["numerics"]
    assert listed == list(FIELDS) and sorted(listed) == sorted(numerics)
