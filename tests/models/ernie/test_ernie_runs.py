"""`--model ernie` end to end: knowledge masking's schedule on the default corpus, exact resume across a
level change, and prepared shards that carry the marked units."""

import json
import shutil

import keras
import numpy as np
import pytest

from keras_bertology.data.corpus import default_corpus_paths
from keras_bertology.data.knowledge_units import MARKER_FILE, UnitMarker
from keras_bertology.data.shards import shard_dataset
from keras_bertology.data.unit_stages import UNIT_JOINS
from keras_bertology.engine.checkpoints import RunCheckpoints
from keras_bertology.pretraining.options import PretrainOptions
from keras_bertology.pretraining.pretrain import pretrain

PLAYS = [str(path) for path in default_corpus_paths()[:2]]  # NSP pairs need two documents


def _options(tmp_path, **overrides):
    return PretrainOptions(**dict(dict(model="ernie", corpus=PLAYS, steps=12, log_every=3, batch_size=8,
                                       seq_len=32, vocab_size=400, out=str(tmp_path / "run"), no_export=True,
                                       verbose=0), **overrides))


@pytest.mark.slow
def test_ernie_pretrains_through_its_three_levels_and_resumes_exactly_inside_the_last(tmp_path):
    metrics = pretrain(_options(tmp_path))
    assert metrics["masking_units"] == "words,phrases,entities" and metrics["steps"] == 12
    assert all(np.isfinite(record["loss"]) for record in metrics["history"])
    marker = UnitMarker.load(tmp_path / "run" / MARKER_FILE)
    assert len(marker.phrases) > 10 and len(marker.names) > 10
    units = metrics["knowledge_units"]
    assert units["phrases"] == len(marker.phrases) and units["names"] == len(marker.names)
    assert units["marked"] > 100 and units["unaligned"] == 0  # WordPiece splits no unit differently alone
    checkpoints = RunCheckpoints(tmp_path / "run")
    uninterrupted = [np.asarray(v) for v in checkpoints.load_model()[0].weights]
    # Steps 8-11 mask entities: the resumed run starts at step 9 and must pass step 9's level to the stage.
    shutil.rmtree(checkpoints.latest()[0])
    keras.backend.clear_session()
    pretrain(_options(tmp_path, resume=True))
    resumed, step = checkpoints.load_model()
    assert step == 12
    for variable, expected in zip(resumed.weights, uninterrupted):
        np.testing.assert_array_equal(np.asarray(variable), expected, err_msg=variable.path)


@pytest.mark.slow
def test_prepared_shards_carry_the_units_and_a_run_masks_them(tmp_path):
    from keras_bertology.prepare.options import PrepareOptions
    from keras_bertology.prepare.pipeline import prepare

    data, phrases = tmp_path / "data", tmp_path / "phrases.txt"
    phrases.write_text("my lord\ngood morrow\n")
    manifest = prepare(PrepareOptions(out=str(data), model="ernie", corpus=PLAYS, seq_len=32, vocab_size=400,
                                      shards=1, workers=1, verbose=0, phrases=str(phrases)))
    assert manifest["recipe"]["masking_units"] is None  # the family's schedule
    assert UNIT_JOINS in manifest["features"]
    assert UnitMarker.load(data / MARKER_FILE).phrases == {("my", "lord"), ("good", "morrow")}
    phrases.unlink()  # the shards carry the units marked with it
    metrics = pretrain(PretrainOptions(data=str(data), steps=3, batch_size=8, verbose=0, out=str(tmp_path / "run"),
                                       no_export=True))
    assert metrics["model"] == "ernie" and metrics["masking_units"] == "words,phrases,entities"
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["steps"] == 3
    # A schedule learns each batch's step from the shards' pipeline too (resumed at step 5 here).
    batches = shard_dataset(str(data), manifest, 4, start_step=5, masker=_StepSpy())
    assert [int(batch["step"]) for batch in batches.take(2)] == [5, 6]


class _StepSpy:
    """A masking stage that takes the step, and returns it."""

    takes_step = True

    def __call__(self, features, seed=None, step=None):
        return {**features, "step": step}
