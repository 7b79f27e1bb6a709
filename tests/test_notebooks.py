"""Every Colab notebook in colab/ runs headless, top to bottom, with a tiny configuration (so none rots)."""

from pathlib import Path

import nbclient
import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "colab").glob("*.ipynb"))
# The notebooks read their settings from the environment: a few steps of the tiny presets here.
TINY = {
    "BERTOLOGY_MODEL": "electra", "BERTOLOGY_PRESET": "electra-tiny", "BERTOLOGY_STEPS": "20",
    "BERTOLOGY_BATCH": "8", "BERTOLOGY_SEQ_LEN": "32", "BERTOLOGY_VOCAB": "400",
    "BERTOLOGY_EPOCHS": "1", "BERTOLOGY_MAX_EXAMPLES": "64",
}


def test_there_are_notebooks_for_pretraining_fine_tuning_and_serving():
    assert {path.name for path in NOTEBOOKS} >= {"pretrain.ipynb", "finetune_and_serve.ipynb"}


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, tmp_path, monkeypatch):
    for name, value in dict(TINY, BERTOLOGY_WORK=str(tmp_path)).items():
        monkeypatch.setenv(name, value)
    notebook = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [output for cell in notebook.cells for output in cell.get("outputs", [])
              if output.get("output_type") == "error"]
    assert not errors
    assert list(tmp_path.glob("savedmodels/*/saved_model.pb"))  # each notebook ends in an export
