"""ELMo's encoder: preset sizes, every output against a torch composition of bilm-tf's parts, and its depths."""

import dataclasses
import json

import keras
import numpy as np
import pytest
from keras import ops

from counting import shapes_only
from elmo_reference import torch_elmo
from keras_bertology.models.elmo.backbone import ElmoBackbone
from keras_bertology.models.elmo.presets import ELMO_PRESETS
from forked_python import run_python

TOLERANCE = 1e-5
# An odd small encoder: three layers (residuals around two), cells unlike the projection, no clipping (torch's
# LSTM cannot clip; the clips are checked in test_elmo_layers), no dropout.
SMALL = dict(vocab_size=50, num_layers=3, projection_dim=6, lstm_units=7, filters=((1, 3), (2, 4), (3, 5)),
             num_highway=2, num_characters=40, max_characters=8, char_embedding_dim=4, cell_clip=None,
             projection_clip=None, dropout=0.0)
MIX_WEIGHTS = 4  # of the original: a weight per layer (the token layer and 2 LSTM layers) and a scale


def _two_plays():
    """The default corpus's first two plays (~40,000 words, ~5,000 distinct): the runs that check what a run
    does, not how far it learns, skip reading, counting and tokenizing all 38."""
    from keras_bertology.data.corpus import default_corpus_paths

    return [str(path) for path in default_corpus_paths()[:2]]


@pytest.mark.parametrize("preset", sorted(ELMO_PRESETS))
def test_presets_have_their_stated_parameter_counts(preset):
    with shapes_only():
        backbone = ElmoBackbone(**dict(ELMO_PRESETS[preset]["config"], vocab_size=100))
        count = backbone.count_params()
    assert count == ELMO_PRESETS[preset]["params"]
    if preset == "elmo-original":
        assert count - MIX_WEIGHTS == 93_600_864  # AllenNLP's count of the original biLM


def test_the_original_filters_are_the_layers_default():
    from keras_bertology.layers.character_cnn import ELMO_FILTERS

    assert ELMO_PRESETS["elmo-original"]["config"]["filters"] == ELMO_FILTERS


def _randomized_backbone(seed):
    """SMALL with every weight drawn at scale 0.6, so that ReLUs cut, highway and LSTM gates saturate."""
    backbone = ElmoBackbone(**SMALL)
    rng = np.random.default_rng(seed)
    backbone.set_weights([(0.6 * rng.standard_normal(w.shape)).astype("float32") for w in backbone.get_weights()])
    return backbone


def _char_ids(seed, lengths, length=5):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, SMALL["num_characters"], (len(lengths), length, SMALL["max_characters"]))
    chars = rng.integers(SMALL["max_characters"] // 2, SMALL["max_characters"] + 1, (len(lengths), length))
    ids[np.arange(SMALL["max_characters"]) >= chars[..., None]] = 0
    padding = np.arange(length)[None, :] < np.array(lengths)[:, None]
    return ids.astype("int32"), padding.astype("int32")


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
def test_every_output_matches_torch_composition_of_bilm_parts():
    backbone = _randomized_backbone(seed=0)
    lengths = [5, 3, 1]
    char_ids, padding = _char_ids(seed=1, lengths=lengths)
    outputs = {name: ops.convert_to_numpy(value)
               for name, value in backbone({"char_ids": char_ids, "padding_mask": padding}).items()}
    expected = torch_elmo(backbone, char_ids, lengths)
    real = padding.astype(bool)
    for name, value in expected.items():
        rows = real if name != "token_output" else np.ones_like(real)  # the CNN reads padding tokens too
        assert np.abs(outputs[name][rows] - value[rows]).max() <= TOLERANCE, name
    for name in ("forward_output", "backward_output", "lstm_outputs_1", "lstm_outputs_3"):
        assert np.all(outputs[name][~real] == 0.0), name
    # The residual connections make the layers' states differ by more than one LSTM's bounded output.
    assert np.abs(outputs["lstm_outputs_3"]).max() > 1.0
    # ELMo's vector mixes [x; x] and every layer, by the mix's (here random) weights.
    layers = [np.concatenate([outputs["token_output"]] * 2, axis=-1)] + [
        outputs[f"lstm_outputs_{index}"] for index in (1, 2, 3)]
    weights, scale = (ops.convert_to_numpy(w) for w in backbone.get_layer("scalar_mix").weights)
    shares = np.exp(weights) / np.exp(weights).sum()
    assert np.abs(outputs["sequence_output"] - scale * np.tensordot(shares, layers, axes=1)).max() <= TOLERANCE


def test_each_direction_reads_only_its_own_side_of_a_token():
    backbone = _randomized_backbone(seed=2)
    char_ids, padding = _char_ids(seed=3, lengths=[5])
    changed = char_ids.copy()
    changed[0, 3] = np.random.default_rng(4).integers(1, SMALL["num_characters"], SMALL["max_characters"])
    first, second = ({name: ops.convert_to_numpy(value) for name, value in
                      backbone({"char_ids": ids, "padding_mask": padding}).items()} for ids in (char_ids, changed))
    # Token 3 changed: the forward LM before it and the backward LM after it cannot know.
    np.testing.assert_array_equal(first["forward_output"][0, :3], second["forward_output"][0, :3])
    np.testing.assert_array_equal(first["backward_output"][0, 4:], second["backward_output"][0, 4:])
    assert not np.allclose(first["forward_output"][0, 3:], second["forward_output"][0, 3:])
    assert not np.allclose(first["backward_output"][0, :4], second["backward_output"][0, :4])


def test_depths_put_both_directions_of_a_layer_together():
    backbone = ElmoBackbone(**SMALL)
    assert backbone.hidden_size == 2 * SMALL["projection_dim"]
    depths = backbone.variable_depths()
    by_depth = {}
    for path, depth in depths.items():
        by_depth.setdefault(depth, set()).add(path.split("/")[0])
    assert by_depth[0] == {"char_cnn"}
    for index in range(SMALL["num_layers"]):
        assert by_depth[index + 1] == {f"forward_lstm_{index}", f"backward_lstm_{index}"}
    assert by_depth[SMALL["num_layers"] + 1] == {"scalar_mix"}
    assert len(depths) == len(backbone.trainable_variables)


def _bilm_spelling(word):
    """bilm-tf's UnicodeCharsVocabulary.word_to_char_ids, then the batcher's +1, written from its rule."""
    marks = {"<S>": 256, "</S>": 257}
    code = [260] * 50
    if word in marks:
        code[:3] = [258, marks[word], 259]
    else:
        encoded = word.encode("utf-8")[:48]
        code[0] = 258
        code[1:1 + len(encoded)] = list(encoded)
        code[len(encoded) + 1] = 259
    return [value + 1 for value in code]


def test_words_are_spelled_as_bilm_spells_them():
    import tensorflow as tf

    from keras_bertology.models.elmo.characters import word_characters

    words = ["a", "naïve", "東京", "x" * 47, "y" * 48, "z" * 49 + "é", "<S>", "</S>", "<s>", "broke."]
    got = word_characters(tf.constant(words)).numpy()
    assert got.tolist() == [_bilm_spelling(word) for word in words]
    ragged = word_characters(tf.ragged.constant([["The", "vase"], ["broke"]]))
    assert ragged.shape.as_list() == [2, None, 50]
    assert ragged[1].numpy().tolist() == [_bilm_spelling("broke")]


# --- pretraining data and objectives -------------------------------------------------------------------------

def test_sentences_run_on_between_their_marks_cut_into_rows():
    from keras_bertology.data.builder_contexts import InstanceContext
    from keras_bertology.models.elmo.instances import sentence_instances

    documents = [[np.array([7, 8, 9]), np.array([10])], [np.array([11, 12])]]
    specials = {"cls_id": 1, "sep_id": 2, "pad_id": 0}
    rows = sentence_instances(documents, InstanceContext(4, specials, copies=2))
    stream = [1, 7, 8, 9, 2, 1, 10, 2, 1, 11, 12, 2]
    assert rows["token_ids"].tolist() == [stream[:4], stream[4:8], stream[8:12]] * 2
    assert rows["padding_mask"].min() == 1
    odd = sentence_instances(documents, InstanceContext(5, specials))
    assert odd["token_ids"][-1].tolist() == [12, 2, 0, 0, 0] and odd["padding_mask"][-1].tolist() == [1, 1, 0, 0, 0]


def test_the_data_stage_spells_every_word_and_targets_both_neighbours():
    import tensorflow as tf

    from keras_bertology.data.builder_contexts import MaskingContext
    from keras_bertology.tokenizers.word import WordTokenizer
    from keras_bertology.models.elmo.characters import word_characters
    from keras_bertology.models.elmo.instances import bidirectional_stage

    words = ["<pad>", "<S>", "</S>", "<UNK>", "the", "vase", "broke", "zeugma"]
    tokenizer = WordTokenizer(words, predicted=7)  # "zeugma" is spelled, never predicted
    stage = bidirectional_stage(MaskingContext(tokenizer))
    token_ids = np.array([[1, 4, 7, 6, 2], [1, 5, 2, 0, 0]])
    padding = (token_ids > 0).astype("int32")
    batch = {name: np.asarray(value) for name, value in stage({"token_ids": token_ids, "padding_mask": padding}).items()}
    spelled = word_characters(tf.constant(words)).numpy()
    assert np.array_equal(batch["char_ids"][padding == 1], spelled[token_ids[padding == 1]])
    assert np.all(batch["char_ids"][padding == 0] == 0)
    targets = np.where(token_ids < 7, token_ids, tokenizer.unk_id)
    for row in range(2):
        length = padding[row].sum()
        for t in range(5):
            real_next, real_previous = t + 1 < length, 0 < t < length
            assert batch["next_token_weights"][row, t] == real_next
            assert batch["previous_token_weights"][row, t] == real_previous
            if real_next:
                assert batch["next_token_ids"][row, t] == targets[row, t + 1]
            if real_previous:
                assert batch["previous_token_ids"][row, t] == targets[row, t - 1]
    assert batch["previous_token_ids"][0, 3] == tokenizer.unk_id  # "zeugma" as a target


def test_each_language_model_scores_a_word_it_has_not_read():
    """The forward logits at t must not move when word t + 1 (its target) changes, nor the backward logits at t
    when word t - 1 changes; each does move when a word it reads changes."""
    from keras_bertology.models.elmo.pretrainer import ElmoPretrainer

    pretrainer = ElmoPretrainer(_randomized_backbone(seed=7))
    char_ids, padding = _char_ids(seed=8, lengths=[5])
    changed = char_ids.copy()
    changed[0, 2] = char_ids[0, 4]

    def logits(ids):
        return {name: ops.convert_to_numpy(value)[0]
                for name, value in pretrainer({"char_ids": ids, "padding_mask": padding}).items()}

    first, second = logits(char_ids), logits(changed)
    np.testing.assert_array_equal(first["forward_lm"][:2], second["forward_lm"][:2])  # word 2 is position 1's target
    np.testing.assert_array_equal(first["backward_lm"][3:], second["backward_lm"][3:])  # and position 3's
    assert not np.allclose(first["forward_lm"][2:], second["forward_lm"][2:])
    assert not np.allclose(first["backward_lm"][:3], second["backward_lm"][:3])
    # No pretraining loss reaches the scalar mix: it does not train here, and a saved backbone's does.
    mix = pretrainer.backbone.get_layer("scalar_mix")
    assert mix.trainable and not {v.path for v in mix.weights} & {v.path for v in pretrainer.trainable_variables}
    restored = type(pretrainer.backbone).from_config(pretrainer.backbone.get_config())
    assert {v.path for v in restored.get_layer("scalar_mix").trainable_weights} == {v.path for v in mix.weights}


@pytest.fixture(scope="module")
def pretrained_run(tmp_path_factory):
    """(folder, metrics) of one 60-step elmo-tiny run on the default corpus and its export (folder/export),
    read by the tests below and written by none of them."""
    from keras_bertology.pretraining.options import PretrainOptions
    from keras_bertology.pretraining.pretrain import pretrain

    # The unigram level counts what the language models predict (</S> and the unknown word among it): perplexity
    # 180 on this corpus over 2,000 words (353 over the preset's 8,000, whose wider softmax costs ~7 CPU-s more).
    # At 3 times the default rate the last window ends near 135 (seeds 1 and 2: 122-129); 40 steps of as many
    # words (16 rows of 32) end above the level, near 204.
    folder = tmp_path_factory.mktemp("elmo")
    metrics = pretrain(PretrainOptions(model="elmo", preset="elmo-tiny", steps=60, batch_size=32, seq_len=16,
                                       vocab_size=2000, learning_rate=3e-3, out=str(folder / "run"),
                                       export=str(folder / "export"), log_every=10, verbose=0))
    return folder, metrics


# ELMo's exact resume (its dropout, batches and checkpointed random state) is checked by
# test_pretraining_with_a_sampled_softmax.
def test_pretraining_on_the_default_corpus_beats_the_unigram_level_and_fine_tunes(pretrained_run, tmp_path):
    run, metrics = pretrained_run[0] / "run", pretrained_run[1]
    for objective in ("forward_lm", "backward_lm"):
        summary = metrics["objectives"][objective]
        assert summary["last"]["perplexity"] < summary["chance"]["perplexity"] < summary["first"]["perplexity"]
    # `bertology finetune` on the run, at ELMo's default rate: the scalar mix and a head learn a pair task whose
    # label is one word of the first sentence (test_finetune's rule; chance is 0.5). Its rows are 12 words with
    # the marks, so --seq-len 12 cuts none. Dev accuracy stays at chance for the first 5 epochs, then climbs: with
    # 10 epochs fine-tuning seed 2 ended at 0.825 (its rate decays over fewer steps), with 14 seeds 2 and 3 at 1.0.
    from finetune_material import user_folders

    from keras_bertology.cli import main

    folder = user_folders(tmp_path / "data")["pairs"]
    assert main(["finetune", "--task", str(folder), "--from", str(run), "--epochs", "14",
                 "--batch-size", "16", "--seq-len", "12", "--out", str(tmp_path / "ft"), "--no-export"]) == 0
    results = json.loads((tmp_path / "ft" / "results.json").read_text())
    assert results["recipe"]["learning_rate"] == 1e-3 and results["test"]["accuracy"] >= 0.8, results["history"]
    # The scalar mix, held still while the language models trained, is the task's to learn: the run's backbone
    # trains it, and fine-tuning moved it from the mean.
    from keras_bertology.runs import load_run_model

    assert len(load_run_model(run).backbone.get_layer("scalar_mix").trainable_weights) == 2
    tuned = keras.saving.load_model(tmp_path / "ft" / "model.keras", compile=False)
    mix = tuned.backbone.get_layer("scalar_mix")
    assert mix.trainable and np.ptp(ops.convert_to_numpy(mix.weights[0])) > 1e-4
    # The classifier exports to ONNX on character ids, its LSTMs an ONNX Loop, run at export against the Keras
    # model; no string model (ELMo spells words with code of its own), said in onnx.json.
    import onnx

    assert main(["export", str(tmp_path / "ft"), "--format", "onnx", "--out", str(tmp_path / "onnx")]) == 0
    description = json.loads((tmp_path / "onnx" / "onnx.json").read_text())
    assert [entry["name"] for entry in description["inputs"]] == ["char_ids", "padding_mask"]
    assert description["self_check"]["max_difference"] <= 1e-4
    assert "code of its own" in description["text_model"]["missing"]
    assert "Loop" in {node.op_type for node in onnx.load(tmp_path / "onnx" / "model.onnx").graph.node}


MIRRORED_RUN = """
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from keras_bertology.pretraining.options import PretrainOptions
from keras_bertology.data.corpus import default_corpus_paths
from keras_bertology.pretraining.pretrain import pretrain
metrics = pretrain(PretrainOptions(model="elmo", preset="elmo-tiny", steps=6, batch_size=16, seq_len=16,
                                   corpus=[str(path) for path in default_corpus_paths()[:2]], strategy="mirrored",
                                   out=sys.argv[1], no_export=True, log_every=3, verbose=0))
print(json.dumps([record["loss"] for record in metrics["history"]]))
"""


@pytest.mark.extended  # the strategy's path is the engine's, which CI checks on BERT and Transformer-XL
def test_pretraining_runs_under_mirrored_strategy_on_two_cpus(tmp_path):
    """Each replica runs its LSTMs' loops on half of every batch of 16 (test_distribute.py checks on BERT that
    the replicas' all-reduced gradients are the one-device step's)."""
    import sys

    result = run_python([sys.executable, "-c", MIRRORED_RUN, str(tmp_path / "run")], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    losses = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(losses) == 6 and all(np.isfinite(losses)) and losses[-1] < losses[0]


def test_the_savedmodel_serves_tf_hubs_outputs_for_raw_strings(pretrained_run, tmp_path):
    import tensorflow as tf

    from keras_bertology.models.elmo.characters import word_characters
    from keras_bertology.runs import load_run_model

    # The export of the 60-step run (pretrained_run): the checks hold whatever it learned, as long as a word's
    # vectors depend on its context at all.
    folder, metrics = pretrained_run
    # The end-of-run summary: "broke" in three senses, its vectors compared.
    cosine = np.array(metrics["word_in_context"]["cosine"])
    assert cosine.shape == (3, 3) and np.allclose(np.diag(cosine), 1.0, atol=1e-4) and np.all(cosine < 1.0 + 1e-4)

    served = tf.saved_model.load(str(folder / "export"))
    sentences = metrics["word_in_context"]["sentences"]
    context = served.serve(tf.constant(sentences))
    vectors = [row[:length] for row, length in zip(context["lstm_outputs2"].numpy(), context["sequence_len"].numpy())]
    split = [sentence.replace(".", " .").split() for sentence in sentences]
    # They are the served top layer's, and the contexts move them: if only a little once trained (the 60-step
    # run's cosines are 0.9997-0.9999), so read unrounded; a vector of the word alone (word_emb's) gives 1.
    broke = np.stack([row[sentence.index("broke")] for row, sentence in zip(vectors, split)]).astype("float64")
    broke /= np.linalg.norm(broke, axis=1, keepdims=True)
    np.testing.assert_allclose(cosine, broke @ broke.T, atol=6e-5)  # rounded to 4 decimals
    assert (1.0 - broke @ broke.T).max() > 1e-5
    # For scale, the mean cosine between the vectors of two different words of those sentences, "broke" left out.
    others = np.concatenate([row[[i for i, word in enumerate(sentence) if word != "broke"]]
                             for row, sentence in zip(vectors, split)])
    others /= np.linalg.norm(others, axis=1, keepdims=True)
    pairs = (others @ others.T)[np.triu_indices(len(others), 1)]
    assert metrics["word_in_context"]["other_words"] == pytest.approx(pairs.mean(), abs=1e-4)
    texts = ["The vase broke.", "Dawn broke over the zzxqy hills"]  # "vase" and "zzxqy": not in the vocabulary
    outputs = {name: value.numpy() for name, value in served.serve(tf.constant(texts)).items()}
    assets = json.loads((folder / "export" / "assets" / "bertology.json").read_text())
    assert assets["serve_outputs"] == sorted(outputs) == sorted(
        ["elmo", "word_emb", "lstm_outputs1", "lstm_outputs2", "default", "sequence_len", "token_ids"])
    words = [["The", "vase", "broke", "."], ["Dawn", "broke", "over", "the", "zzxqy", "hills"]]
    assert outputs["sequence_len"].tolist() == [4, 6]
    # The same words, spelled and run through the run's encoder by hand.
    backbone = load_run_model(folder / "run").backbone
    marked = tf.ragged.constant([["<S>", *row, "</S>"] for row in words])
    char_ids = word_characters(marked).to_tensor(shape=[2, 8, 50]).numpy()
    padding = (char_ids.max(axis=-1) > 0).astype("int32")
    expected = {name: ops.convert_to_numpy(value) for name, value in
                backbone({"char_ids": char_ids, "padding_mask": padding}).items()}
    pairs = {"elmo": "sequence_output", "word_emb": "token_output", "lstm_outputs1": "lstm_outputs_1",
             "lstm_outputs2": "lstm_outputs_2"}
    for row, length in enumerate([4, 6]):
        for served_name, name in pairs.items():
            np.testing.assert_allclose(outputs[served_name][row, :length], expected[name][row, 1:length + 1],
                                       atol=1e-5, err_msg=served_name)
            assert np.all(outputs[served_name][row, length:] == 0)
        np.testing.assert_allclose(outputs["default"][row], expected["sequence_output"][row, 1:length + 1].mean(0),
                                   atol=1e-5)
    # A word far past the character bound (256 at 16 words) keeps the words after it: spelled from its first
    # 48 bytes, it is served as any word of those bytes.
    endings = [served.serve(tf.constant([f"The king {'x' * length} loved the queen."]))
               for length in (10_000, 60)]
    assert [int(out["sequence_len"][0]) for out in endings] == [7, 7]
    np.testing.assert_allclose(endings[0]["elmo"].numpy(), endings[1]["elmo"].numpy(), atol=1e-6)
    # An unknown word is read from its characters: "vase" and "zzxqy" get vectors of their own.
    assert not np.allclose(outputs["word_emb"][0, 1], outputs["word_emb"][1, 4])
    ids = served.signatures["serve_ids"](char_ids=tf.constant(char_ids), padding_mask=tf.constant(padding))
    np.testing.assert_allclose(ids["sequence_output"].numpy(), expected["sequence_output"], atol=1e-5)
    with pytest.raises(tf.errors.InvalidArgumentError, match="char_ids"):
        served.signatures["serve_ids"](char_ids=tf.constant(char_ids + 300), padding_mask=tf.constant(padding))
    # As a server runs it, with tensorflow and tensorflow-text alone: the words are spelled in the graph.
    from bare_serving import saved_model_cli

    saved_model_cli("run", "--dir", str(folder / "export"), "--tag_set", "serve", "--signature_def", "serve",
                    "--input_exprs", f"text={texts!r}", "--outdir", str(tmp_path / "cli"))
    np.testing.assert_allclose(np.load(tmp_path / "cli" / "default.npy"), outputs["default"], atol=1e-5)
    assert np.load(tmp_path / "cli" / "sequence_len.npy").tolist() == [4, 6]


def test_a_pair_is_two_sentences_of_the_stream_each_word_spelled_where_its_id_lands():
    import tensorflow as tf

    from keras_bertology.tokenizers.word import WordTokenizer
    from keras_bertology.models.elmo.characters import pack_spelled_words, word_characters

    tokenizer = WordTokenizer(["<pad>", "<S>", "</S>", "<UNK>", "the", "vase", "broke", "."])
    packed = {name: value.numpy() for name, value in pack_spelled_words(
        tokenizer, 8, tf.constant(["the vase broke .", "the zzz"]), tf.constant(["broke", "vase the the the"])).items()}
    # Trimmed as BERT trims a pair: the longer sentence loses words first.
    rows = [["<S>", "the", "vase", "broke", "</S>", "<S>", "broke", "</S>"],
            ["<S>", "the", "zzz", "</S>", "<S>", "vase", "the", "</S>"]]
    vocabulary = tokenizer.vocabulary
    assert packed["token_ids"].tolist() == [[vocabulary.index(w) if w in vocabulary else 3 for w in row] for row in rows]
    assert packed["segment_ids"].tolist() == [[0] * 5 + [1] * 3, [0] * 4 + [1] * 4]
    assert np.array_equal(packed["char_ids"], word_characters(tf.constant(rows)).numpy())
    single = pack_spelled_words(tokenizer, 6, tf.constant(["the vase"]))
    assert single["padding_mask"].numpy().tolist() == [[1, 1, 1, 1, 0, 0]]
    assert np.all(single["char_ids"].numpy()[0, 4:] == 0)


def test_layouts_built_from_ids_spell_each_ids_word():
    import tensorflow as tf

    from keras_bertology.tokenizers.word import WordTokenizer
    from keras_bertology.finetune import encoding
    from keras_bertology.models import FAMILIES
    from keras_bertology.models.elmo.characters import word_characters

    tokenizer = WordTokenizer(["<pad>", "<S>", "</S>", "<UNK>", "the", "vase", "broke", "."])
    inputs, word_map = encoding.encode_words(FAMILIES["elmo"], tokenizer, 8,
                                             tf.ragged.constant([["the", "vase", "broke."], ["zzz"]]))
    rows = [["<S>", "the", "vase", "broke", ".", "</S>"], ["<S>", "<UNK>", "</S>"]]
    for row, words in enumerate(rows):
        assert np.array_equal(inputs["char_ids"][row, :len(words)].numpy(), word_characters(tf.constant(words)).numpy())
        assert np.all(inputs["char_ids"][row, len(words):].numpy() == 0)
    assert word_map.numpy()[0].tolist() == [-1, 0, 1, 2, -1, -1, -1, -1]  # "broke." is two words, one label


def test_the_studys_transformer_sizes_map_to_the_projection_and_the_cells():
    from keras_bertology.models import FAMILIES
    from keras_bertology.study.arms import SCALES
    from keras_bertology.pretraining.options import PretrainOptions

    scale = SCALES["small"]
    options = PretrainOptions(model="elmo", preset="elmo-tiny", encoder=scale.encoder)
    config = options.backbone_config(FAMILIES["elmo"])
    assert (config["num_layers"], config["projection_dim"], config["lstm_units"]) == (
        scale.num_layers, scale.hidden_size, scale.intermediate_size)
    assert "num_heads" not in config and "hidden_size" not in config
    ElmoBackbone(**config)  # builds: no size left over


def test_the_residual_adds_the_input_as_the_lstm_read_it_after_dropout():
    """bilm-tf wraps ResidualWrapper(cell) in the input dropout: layer i > 0 outputs LSTM(drop(x)) + drop(x)."""
    backbone = ElmoBackbone(**SMALL)
    added = [layer for layer in backbone.layers if isinstance(layer, keras.layers.Add)]
    assert len(added) == 2 * (SMALL["num_layers"] - 1)
    for layer in added:
        sources = sorted(tensor._keras_history.operation.name for tensor in layer._inbound_nodes[0].input_tensors)
        direction, index = sources[1].rsplit("_", 2)[0], sources[1].rsplit("_", 1)[1]
        assert sources == [f"{direction}_dropout_{index}", f"{direction}_lstm_{index}"], sources


def test_pretraining_with_a_sampled_softmax(tmp_path):
    """`--softmax-samples 64` over 2,000 words (of the default corpus's first two plays): each step scores the
    targets and 64 drawn words, the loss falls, a resumed run draws the same words, and the saved pretrainer
    rebuilds with the setting."""
    from keras_bertology.runs import load_run_model
    from keras_bertology.pretraining.options import PretrainOptions
    from keras_bertology.pretraining.pretrain import pretrain

    import shutil

    from keras_bertology.engine.checkpoints import RunCheckpoints

    options = PretrainOptions(model="elmo", preset="elmo-tiny", steps=12, batch_size=8, seq_len=16, vocab_size=2000,
                              corpus=_two_plays(), family_options={"softmax_samples": 64}, out=str(tmp_path / "run"),
                              no_export=True, log_every=4, verbose=0)
    metrics = pretrain(options)
    assert metrics["family_options"]["softmax_samples"] == 64
    losses = [record["loss"] for record in metrics["history"]]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    # The draws of the last window again from the checkpoint before it: the sampler's state is checkpointed.
    checkpoints = RunCheckpoints(tmp_path / "run")
    uninterrupted = [np.asarray(v) for v in checkpoints.load_model()[0].weights]
    shutil.rmtree(checkpoints.latest()[0])
    keras.backend.clear_session()
    pretrain(dataclasses.replace(options, resume=True))
    for variable, expected in zip(checkpoints.load_model()[0].weights, uninterrupted, strict=True):
        np.testing.assert_array_equal(np.asarray(variable), expected, err_msg=variable.path)
    pretrainer = load_run_model(tmp_path / "run").pretrainer
    assert pretrainer.softmax_samples == 64 and pretrainer.get_layer("softmax").num_samples == 64
    inputs = {"char_ids": np.ones((2, 5, 50), "int32"), "padding_mask": np.ones((2, 5), "int32"),
              "next_token_ids": np.full((2, 5), 7, "int32"), "previous_token_ids": np.full((2, 5), 9, "int32")}
    trained, served = pretrainer(inputs, training=True), pretrainer(inputs)
    assert trained["forward_lm"].shape == (2, 5, 65) and not np.any(trained["backward_lm_targets"])
    assert served["forward_lm"].shape == (2, 5, 2000) and np.all(served["backward_lm_targets"] == 9)
