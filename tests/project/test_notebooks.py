"""Every Colab notebook in colab/ runs headless, top to bottom, with a tiny configuration (so none rots)."""

import json
from pathlib import Path

import nbclient
import nbformat
import pytest

from keras_bertology.data.corpus import default_corpus_paths
from simulated_devices import xla_flags

COLAB = Path(__file__).resolve().parents[2] / "colab"
# The notebooks read their settings from the environment: a few steps of the tiny presets on one play here.
TINY = {
    "BERTOLOGY_MODEL": "electra", "BERTOLOGY_PRESET": "electra-tiny", "BERTOLOGY_STEPS": "4",
    "BERTOLOGY_BATCH": "8", "BERTOLOGY_SEQ_LEN": "32", "BERTOLOGY_VOCAB": "400",
    "BERTOLOGY_EPOCHS": "1", "BERTOLOGY_MAX_EXAMPLES": "64",
}


def _execute(name, work, timeout=600):
    notebook = nbformat.read(COLAB / name, as_version=4)
    nbclient.NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(work)}}).execute()
    errors = [output for cell in notebook.cells for output in cell.get("outputs", [])
              if output.get("output_type") == "error"]
    assert not errors, errors


def test_every_notebook_is_run_by_the_test_below():
    assert {path.name for path in COLAB.glob("*.ipynb")} == {"pretrain.ipynb", "finetune_and_serve.ipynb"}


@pytest.mark.slow
def test_notebooks_pretrain_then_fine_tune_and_serve(tmp_path, monkeypatch):
    """Both notebooks headless, top to bottom, in the order a user runs them: the second fine-tunes the
    ELECTRA discriminator the first pretrained (its own fallback pretraining is the same `pretrain` call)."""
    for name, value in dict(TINY, BERTOLOGY_WORK=str(tmp_path), BERTOLOGY_CORPUS=str(default_corpus_paths()[0]),
                            BERTOLOGY_FROM=str(tmp_path / "runs" / "electra-electra-tiny")).items():
        monkeypatch.setenv(name, value)
    _execute("pretrain.ipynb", tmp_path)
    assert (tmp_path / "savedmodels" / "electra-electra-tiny" / "saved_model.pb").is_file()
    _execute("finetune_and_serve.ipynb", tmp_path)
    assert (tmp_path / "savedmodels" / "finetune-bbc-news" / "saved_model.pb").is_file()
    assert not (tmp_path / "runs" / "bert-mini").exists()  # the pretrained run was used


# XLA:CPU's simulated devices can deadlock in a collective (gdb, CI's 2 cores busy: seven devices waiting in
# the all-reduce, the eighth's launch blocked on its limit of computations in flight, behind the small
# computations dispatched asynchronously to it). The test runs alone, each device computing on one thread
# (simulated_devices), the kernel dispatching those computations synchronously (an IPython startup file:
# JAX reads that setting from its config only), and one more time, in a fresh kernel, after a hang.
SYNCHRONOUS_CPU_DISPATCH = 'import jax\njax.config.update("jax_cpu_enable_async_dispatch", False)\n'


@pytest.mark.slow
@pytest.mark.alone
def test_the_pretraining_notebooks_jax_path_trains_data_parallel_over_simulated_devices(tmp_path, monkeypatch):
    """The notebook's path for a TPU runtime (JAX, `--strategy auto`), here on 8 simulated CPU devices (a
    TPU v5e-8's count), where auto picks every local device (on a TPU runtime: its cores, `--strategy tpu`)."""
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-synchronous-dispatch.py").write_text(SYNCHRONOUS_CPU_DISPATCH)
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    for attempt in (1, 2):
        work = tmp_path / f"attempt-{attempt}"
        work.mkdir()
        for name, value in dict(TINY, BERTOLOGY_WORK=str(work), BERTOLOGY_CORPUS=str(default_corpus_paths()[0]),
                                BERTOLOGY_BACKEND="jax", XLA_FLAGS=xla_flags(8)).items():
            monkeypatch.setenv(name, value)
        try:
            _execute("pretrain.ipynb", work, timeout=300)  # idle, it takes about 40 s
            break
        except (nbclient.exceptions.CellTimeoutError, nbclient.exceptions.DeadKernelError):
            if attempt == 2:
                raise
    metrics = json.loads((work / "runs" / "electra-electra-tiny" / "metrics.json").read_text())
    assert (metrics["backend"], metrics["strategy"], metrics["devices"]) == ("jax", "mirrored", 8)
    assert (work / "savedmodels" / "electra-electra-tiny" / "saved_model.pb").is_file()
