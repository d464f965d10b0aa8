"""The notebooks execute from top to bottom (they are kept as jupytext percent scripts)."""

import os
from pathlib import Path

import jupytext
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("[0-9]*.py"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, tmp_path, monkeypatch):
    notebook = jupytext.read(path)
    # Small settings and a scratch directory, so CI runs them in seconds to minutes.
    monkeypatch.setenv("KT_NOTEBOOK_QUICK", "1")
    monkeypatch.setenv("KT_NOTEBOOK_WORKDIR", str(tmp_path))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    client = NotebookClient(
        notebook,
        timeout=900,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute(env=dict(os.environ))
