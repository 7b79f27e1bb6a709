"""Features whose dependency comes with an extra (`pip install 'keras-bertology[jax]'`, `[beam]`, `[hub]`)
stop with one line naming the extra when it is missing, as in a virtualenv holding the wheel alone."""

import importlib.util

import pytest

from keras_bertology import cli
from keras_bertology.errors import ConfigError


def _hide(monkeypatch, module):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == module else real(name, *args))


def test_the_jax_backend_without_jax_names_the_extra(monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")  # restored after _select_backend sets it
    _hide(monkeypatch, "jax")
    assert cli._select_backend(["pretrain", "--backend", "jax"]) == (
        "--backend jax needs jax, which comes with an extra: pip install 'keras-bertology[jax]'")
    from keras_bertology.study.options import StudyOptions

    with pytest.raises(ConfigError, match=r"keras-bertology\[jax\]"):
        StudyOptions(backend="jax").validate()


def test_a_hub_handle_without_huggingface_hub_names_the_extra(monkeypatch):
    from keras_bertology.convert.hub import HubSettings

    _hide(monkeypatch, "huggingface_hub")
    with pytest.raises(ConfigError, match=r"^A hf:// handle needs huggingface_hub, .*keras-bertology\[hub\]'$"):
        HubSettings.from_environment()


def test_prepare_without_apache_beam_is_one_line_naming_the_extra(tmp_path, monkeypatch, capsys):
    _hide(monkeypatch, "apache_beam")
    assert cli.main(["prepare", "--out", str(tmp_path / "data")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "bertology: error: bertology prepare needs apache_beam, which comes with an extra: "
        "pip install 'keras-bertology[beam]'"]
    assert not (tmp_path / "data").exists()


def test_the_version_is_one_and_the_command_line_shows_it(capsys):
    import keras_bertology

    with pytest.raises(SystemExit) as stopped:
        cli.main(["--version"])
    assert stopped.value.code == 0 and capsys.readouterr().out == f"keras-bertology {keras_bertology.__version__}\n"
