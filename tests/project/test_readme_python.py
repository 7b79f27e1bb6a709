"""The README's Python API section runs as written, against a run folder where `make run` leaves one."""

import re
from pathlib import Path

import pytest
import transformers

from hf_reference import perturbed_hf_model, save_hf_model
from keras_bertology.models import FAMILIES
from keras_bertology.runs import RunModel, save_run_model
from loopback_hub import LoopbackHub

README = Path(__file__).resolve().parents[2] / "README.md"
SENTENCES = [f"{a} {b} the {c} of {d}." for a in ("now", "then", "so", "yet") for b in ("is", "was", "seems")
             for c in ("winter", "summer", "king", "crown", "sea") for d in ("our", "their", "his", "mine")]


def _python_blocks(section):
    text = README.read_text(encoding="utf-8")
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", body, flags=re.S)


def test_the_python_api_section_has_blocks_that_name_the_run_make_run_writes():
    blocks = _python_blocks("Python API")
    assert len(blocks) >= 2 and all("runs/bert-tiny-shakespeare" in block for block in blocks)


@pytest.mark.slow
def test_every_python_block_of_the_python_api_section_runs(tmp_path, monkeypatch):
    with LoopbackHub() as hub:  # the README's hf:// line, served a small BERT under the name it gives
        checkpoint = tmp_path / "published"
        save_hf_model(perturbed_hf_model(transformers.BertModel, transformers.BertConfig(
            vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37)),
            checkpoint)
        hub.publish("google-bert/bert-base-uncased", checkpoint)
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")
        monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
        _run_the_blocks(tmp_path, monkeypatch)
        assert hub.count("/api/models/google-bert/bert-base-uncased") >= 1


def _run_the_blocks(tmp_path, monkeypatch):
    bert = FAMILIES["bert"]
    tokenizer = bert.train_tokenizer(SENTENCES, 200)
    backbone = bert.backbone_cls(**bert.backbone_config("bert-tiny", vocab_size=tokenizer.vocab_size))
    run = RunModel("bert", backbone, tokenizer, 32, pretrainer=bert.build_pretrainer(backbone, preset="bert-tiny"),
                   preset="bert-tiny")
    save_run_model(tmp_path / "runs" / "bert-tiny-shakespeare", run)
    monkeypatch.chdir(tmp_path)
    for block in _python_blocks("Python API"):
        exec(compile(block, str(README), "exec"), {})
