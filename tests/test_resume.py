"""An interrupted run resumes from its newest checkpoint with its optimizer state."""

import json

import keras
import pytest

from keras_bertology.data.corpus import default_corpus_paths
from keras_bertology.errors import ConfigError
from keras_bertology.training.checkpoints import RunCheckpoints
from keras_bertology.training.pretrain import PretrainOptions, pretrain


def _options(tmp_path, **overrides):
    settings = dict(
        model="roberta", preset="roberta-tiny", corpus=[str(default_corpus_paths()[0])],
        steps=6, log_every=3, batch_size=8, seq_len=32, vocab_size=400,
        out=str(tmp_path / "run"), export=str(tmp_path / "export"), verbose=0,
    )
    return PretrainOptions(**dict(settings, **overrides))


@pytest.mark.slow
def test_resume_continues_after_the_newest_checkpoint(tmp_path):
    pretrain(_options(tmp_path))
    checkpoints = RunCheckpoints(tmp_path / "run")
    assert checkpoints.latest()[1] == 6

    # Simulate a crash during the second window: its checkpoint and record never landed.
    checkpoints.latest()[0].unlink()
    history = json.loads(checkpoints.history_path.read_text())
    checkpoints.history_path.write_text(json.dumps(history[:1]))
    assert checkpoints.latest()[1] == 3
    model, step = checkpoints.load_model()
    assert step == 3 and int(model.optimizer.iterations.numpy()) == 3
    keras.backend.clear_session()

    with pytest.raises(ConfigError, match="--resume"):
        pretrain(_options(tmp_path))
    with pytest.raises(ConfigError, match="changed: seq_len"):
        pretrain(_options(tmp_path, resume=True, seq_len=48))

    metrics = pretrain(_options(tmp_path, resume=True))
    assert [record["step"] for record in metrics["history"]] == [3, 6]
    resumed, step = checkpoints.load_model()
    assert step == 6 and int(resumed.optimizer.iterations.numpy()) == 6
