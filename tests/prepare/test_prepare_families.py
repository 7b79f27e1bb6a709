"""`bertology prepare` then `bertology pretrain --data` for every family (BERT's and RoBERTa's runs are in
test_prepare.py). A file of its own so that the test workers share the slow runs evenly."""

from pathlib import Path

import numpy as np
import pytest

from keras_bertology.data.corpus import default_corpus_paths
from keras_bertology.data.shards import shard_dataset
from keras_bertology.prepare.options import PrepareOptions
from keras_bertology.prepare.pipeline import prepare
from keras_bertology.pretraining.options import PretrainOptions

PLAYS = [str(path) for path in default_corpus_paths()[:2]]  # a document per shard


@pytest.mark.slow
@pytest.mark.parametrize("model, preset, flags, trained", [
    ("albert", "albert-tiny", {}, None),
    ("spanbert", "spanbert-tiny", {}, None),
    pytest.param("electra", "electra-tiny", {}, None, marks=pytest.mark.extended),  # packed_instances, as SpanBERT's
    ("xlnet", "xlnet-tiny", {"batch_size": 8}, None),
    ("gpt", "gpt-tiny", {}, None),
    ("transformer-xl", "transformer-xl-tiny", {"batch_size": 8}, None),
    # The attentions' options are the encoder's, given when it trains: block-sparse at 32 tokens (above
    # 4 x (5 + 2)), projected to 8 rows.
    ("bigbird", "bigbird-tiny", {}, {"block_size": 4, "random_blocks": 1}),
    # RoBERTa's tokenizer, pretrainer and instances, with BigBird's path for options given at training:
    # `make test-all`'s (the RoBERTa data path from shards is test_prepare.py's).
    pytest.param("linformer", "linformer-tiny", {}, {"projected_length": 8}, marks=pytest.mark.extended),
    ("elmo", "elmo-tiny", {}, None),  # word vocabulary, sentence stream; characters spelled per batch
    # Unpadded packing: the shards keep each row's document numbers, which the model reads as its mask.
    ("modernbert", "modernbert-tiny", {"packing": "unpadded"}, None),
    # Masked when prepared; one copy of the instances (static masking builds dupe_factor copies, 10 by default,
    # each masked anew: the same code path ten times over).
    ("roberta", "roberta-tiny", {"packing": "unpadded", "masking": "static", "dupe_factor": 1}, None),
])
def test_every_family_prepares_and_pretrains_from_its_shards(tmp_path, model, preset, flags, trained):
    from keras_bertology.pretraining.pretrain import pretrain

    data = tmp_path / "data"
    manifest = prepare(PrepareOptions(out=str(data), model=model, preset=preset, corpus=PLAYS, seq_len=32,
                                      vocab_size=1000, shards=2, workers=1, verbose=0, **flags))
    assert manifest["recipe"]["model"] == model and manifest["instances"] > 0
    if flags.get("packing") == "unpadded":  # the rows' document numbers are kept with the shards, and fed as the mask
        assert "document_ids" in manifest["features"]
        masker = None if flags.get("masking") == "static" else (lambda features, seed: features)
        batch = next(iter(shard_dataset(str(data), manifest, 8, masker=masker)))
        assert "document_ids" not in batch and "padding_mask" in batch
    metrics = pretrain(PretrainOptions(data=str(data), preset=preset, steps=1, batch_size=8, verbose=0,
                                       out=str(tmp_path / "run"), no_export=True, family_options=trained))
    assert metrics["model"] == model and metrics["seq_len"] == 32
    assert metrics["family_options"].items() >= (trained or {}).items()
    # --no-export: the run folder only (the family's CLI test exports and serves it).
    assert metrics["export_dir"] is None and metrics["fill_mask"] == [] and (tmp_path / "run" / "model").is_dir()
    assert not (tmp_path / "export").exists() and not (Path.cwd() / "savedmodels" / "run").exists()
    assert all(np.isfinite(record["loss"]) for record in metrics["history"])
