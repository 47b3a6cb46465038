"""Running an example notebook headless with a real kernel, as the notebook tests do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient


def executed_code_cells(notebook_path: Path, folder: Path, timeout: int = 120) -> list[Any]:
    """Execute ``notebook_path`` with ``folder`` as its working directory (the kernel inherits the environment, so
    set its inputs with ``monkeypatch.setenv`` first) and return its code cells with their outputs; fails if any
    cell raised."""
    notebook = nbformat.read(notebook_path, as_version=4)
    NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute()
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(not any(o.get("output_type") == "error" for o in cell.get("outputs", [])) for cell in code)
    return code


def output_text(cell: Any) -> str:
    """What a code cell printed and displayed, as text."""
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output["text"])
        elif "data" in output:
            parts.append(output["data"].get("text/plain", ""))
    return "\n".join(parts)
