"""String endpoints pad a batch to its longest input (or a length bucket), with the values of a batch padded to
the full sequence length; fill_mask returns the top k per mask; every export carries TF Serving's warm-up file."""

import json
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_serving.apis import prediction_log_pb2

from keras_bertology.data.corpus import default_corpus_paths, read_corpus
from keras_bertology.data.packing import fit_to_batch
from keras_bertology.errors import ConfigError
from keras_bertology.export import export_saved_model
from keras_bertology.export.task_model import export_task_model
from keras_bertology.export.warmup import WARMUP_FILE
from keras_bertology.finetune import encoding
from keras_bertology.finetune.task_data import TaskData
from keras_bertology.finetune.tasks import TASK_KINDS
from keras_bertology.models.registry import get_family
from keras_bertology.runs import RunModel
from forked_python import run_python

SEQ_LEN = 64
# Every family but SpanBERT, whose export is BERT's (the same encoder, packing and masked-LM endpoints; its
# vocabulary only keeps case).
# ALBERT's and ELECTRA's packing and absolute positions are BERT's (CI runs them under `make test-all` only);
# RoBERTa's positions start after the padding id.
FAMILIES = ["bert", "roberta", pytest.param("albert", marks=pytest.mark.extended),
            pytest.param("electra", marks=pytest.mark.extended), "xlnet", "gpt", "transformer-xl"]


@pytest.fixture(scope="module")
def sentences():
    return [s for document in read_corpus([str(default_corpus_paths()[0])]) for s in document][:1500]


def _export(family_name, sentences, path, buckets=()):
    """A tiny random model of the family, its tokenizer trained on `sentences`, exported at SEQ_LEN."""
    family = get_family(family_name)
    preset = f"{family_name}-tiny"
    tokenizer = family.train_tokenizer(sentences, 400)
    backbone = family.backbone_cls(**family.backbone_config(preset, vocab_size=tokenizer.vocab_size))
    extra = (4,) if family.data.stream_batches else ()
    pretrainer = family.build_pretrainer(backbone, None, preset, *extra)
    export_saved_model(RunModel(family_name, backbone, tokenizer, SEQ_LEN, pretrainer, preset), path, buckets)
    return family, tokenizer, backbone, pretrainer


@pytest.fixture(scope="module")
def exported(sentences, tmp_path_factory):
    """`_export` once per family and buckets for the module, in a folder of its own: (path, family, tokenizer,
    backbone, pretrainer). The tests only read an export, so those that need the same one share it."""
    made = {}

    def export(family_name, buckets=()):
        key = (family_name, tuple(buckets))
        if key not in made:
            path = tmp_path_factory.mktemp(f"{family_name}-export")
            made[key] = (path, *_export(family_name, sentences, path, buckets))
        return made[key]

    return export


# A few float32 ulps: the served graph calls the model as a function of its own, whose kernels may round
# the last bit differently from the eager call (a padding bug moves values by far more).
ULPS = dict(atol=1e-6, rtol=1e-6)


def _texts(tokenizer, sentences):
    mask = tokenizer.vocabulary[tokenizer.mask_id] if tokenizer.has_role("mask") else "it"
    return [sentences[3][:60], f"{sentences[10][:40]} {mask} and {mask}", "", "Short one.", sentences[7][:40]]


def _real(values, mask):
    return np.asarray(values)[np.asarray(mask) == 1]


@pytest.mark.parametrize("family_name", FAMILIES)
def test_every_family_serves_the_batch_length_with_the_values_of_the_full_length(family_name, sentences, exported):
    path, family, tokenizer, backbone, pretrainer = exported(family_name)
    served = tf.saved_model.load(str(path))
    texts = tf.constant(_texts(tokenizer, sentences))
    full = family.pack_text(tokenizer, SEQ_LEN, texts)
    longest = int(full["padding_mask"].numpy().sum(axis=1).max())
    assert longest <= SEQ_LEN - 16  # the batch is short: its padding to SEQ_LEN would cost
    out = served.serve(texts)
    assert out["token_ids"].shape[1] == out["sequence_output"].shape[1] == longest
    reference = backbone({name: full[name] for name in backbone.input}, training=False)
    for name in ("token_ids", "segment_ids"):
        np.testing.assert_array_equal(_real(out[name], out["padding_mask"]), _real(full[name], full["padding_mask"]))
    np.testing.assert_allclose(_real(out["sequence_output"], out["padding_mask"]),
                               _real(reference["sequence_output"], full["padding_mask"]), **ULPS)
    if "pooled_output" in out:
        np.testing.assert_allclose(out["pooled_output"], reference["pooled_output"], **ULPS)
    odd = tf.constant([b"the caf\xe9 \xff\xfe lait"])  # not UTF-8: read per tokenizer kind, see test_tokenizers.py
    odd_out, odd_full = served.serve(odd), family.pack_text(tokenizer, SEQ_LEN, odd)
    np.testing.assert_array_equal(_real(odd_out["token_ids"], odd_out["padding_mask"]),
                                  _real(odd_full["token_ids"], odd_full["padding_mask"]))
    if hasattr(served, "serve_pairs"):
        pairs = served.serve_pairs(texts, texts[::-1])
        full_pairs = family.pack_text(tokenizer, SEQ_LEN, texts, texts[::-1])
        reference = backbone({name: full_pairs[name] for name in backbone.input}, training=False)
        assert pairs["token_ids"].shape[1] == int(full_pairs["padding_mask"].numpy().sum(axis=1).max())
        np.testing.assert_allclose(_real(pairs["sequence_output"], pairs["padding_mask"]),
                                   _real(reference["sequence_output"], full_pairs["padding_mask"]), **ULPS)
    if hasattr(served, "fill_mask"):
        _check_fill_mask(served, pretrainer, tokenizer, texts, full)
    if hasattr(served, "score"):
        _check_score(served, pretrainer, texts, full)


def _check_score(served, pretrainer, texts, full):
    """A causal LM's log-likelihoods: those of the full-length batch."""
    logits = pretrainer.causal_lm_model()({name: full[name] for name in pretrainer.backbone.input}, training=False)
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32)).numpy()
    ids, mask = full["token_ids"].numpy(), full["padding_mask"].numpy()
    lengths = mask.sum(axis=1)
    expected = [sum(log_probs[row, t - 1, ids[row, t]] for t in range(1, length - 1))
                for row, length in enumerate(lengths)]
    out = served.score(texts)
    np.testing.assert_allclose(out["log_likelihood"], expected, atol=1e-4, rtol=0)
    assert out["num_tokens"].numpy().tolist() == (lengths - 2).tolist()


def _check_fill_mask(served, pretrainer, tokenizer, texts, full):
    """Top k per mask: the masked LM's own probabilities at the masks of the full-length batch, in order."""
    masked_lm = pretrainer.masked_lm_model(tokenizer.mask_id)
    is_mask = full["token_ids"].numpy() == tokenizer.mask_id
    positions = [np.flatnonzero(row) for row in is_mask]
    most = max(map(len, positions))
    padded = np.array([np.pad(p, (0, most - len(p)), constant_values=-1) for p in positions], np.int32)
    inputs = {name: full[name] for name in pretrainer.backbone.input}
    logits = masked_lm(dict(inputs, mask_positions=tf.constant(np.maximum(padded, 0))), training=False)
    probabilities = tf.nn.softmax(tf.cast(logits, tf.float32)).numpy()
    for k, out in ((5, served.fill_mask(texts)), (3, served.fill_mask_top_k(texts, 3))):
        assert out["top_ids"].shape == (len(padded), most, k)
        served_positions = out["mask_positions"].numpy()
        assert (served_positions >= 0).sum() == (padded >= 0).sum() == 2  # the served layout may shift columns
        for row, column in zip(*np.nonzero(padded >= 0)):
            expected = np.argsort(-probabilities[row, column], kind="stable")[:k]
            np.testing.assert_array_equal(out["top_ids"].numpy()[row, column], expected)
            np.testing.assert_allclose(out["top_probabilities"].numpy()[row, column],
                                       probabilities[row, column][expected], atol=1e-6)
            assert [t.decode() for t in out["top_tokens"].numpy()[row, column]] == \
                [tokenizer.vocabulary[i] for i in expected]
        absent = padded < 0
        assert (out["top_ids"].numpy()[absent] == -1).all() and (served_positions[absent] == -1).all()
    with pytest.raises(tf.errors.InvalidArgumentError, match="top_k must be in"):
        served.fill_mask_top_k(texts, 0)
    # An empty batch gets empty outputs, as from `serve` and `mlm_logits` (the head's gather once failed on it).
    empty = tf.constant([], tf.string)
    for k, out in ((5, served.fill_mask(empty)), (3, served.fill_mask_top_k(empty, 3))):
        assert out["top_ids"].shape == out["top_tokens"].shape == (0, 0, k) and out["mask_positions"].shape == (0, 0)


@pytest.mark.parametrize("family_name", ["xlnet"])
def test_the_sequence_axis_follows_the_batch_or_its_bucket(family_name, sentences, exported, tmp_path):
    """A planted export that pads to SEQ_LEN again is caught: the shapes served are counted (XLNet: the
    padding on the left; the right side's is counted for every family above)."""
    plain_path, _, tokenizer, _, _ = exported(family_name)
    _export(family_name, sentences, tmp_path / "buckets", buckets=(16, 8))
    plain, bucketed = (tf.saved_model.load(str(path)) for path in (plain_path, tmp_path / "buckets"))
    batches = [["a"], ["a few more words here"], [" ".join(sentences[:40])], ["one", " ".join(sentences[:5])[:60]]]
    lengths = [int(tokenizer.tokenize(tf.constant(b)).row_lengths().numpy().max()) for b in batches]
    expected = [min(length + 2, SEQ_LEN) for length in lengths]  # <sep> <cls> (XLNet), [CLS] [SEP] (BERT)
    assert [plain.serve(tf.constant(b))["sequence_output"].shape[1] for b in batches] == expected
    assert [bucketed.serve(tf.constant(b))["sequence_output"].shape[1] for b in batches] == \
        [next(size for size in (8, 16, SEQ_LEN) if size >= length) for length in expected]
    assert json.loads((tmp_path / "buckets" / "assets" / "bertology.json").read_text())["length_buckets"] == [8, 16]
    with pytest.raises(ConfigError, match=f"each bucket must be a whole number of tokens from 1 to {SEQ_LEN}"):
        _export(family_name, sentences, tmp_path / "never", buckets=(16, SEQ_LEN + 1))
    assert not (tmp_path / "never").exists()


def xla_compiled_functions(export_dir):
    """Names of the SavedModel's functions that XLA must compile."""
    saved = saved_model_pb2.SavedModel.FromString((export_dir / "saved_model.pb").read_bytes())
    return [function.signature.name for function in saved.meta_graphs[0].graph_def.library.function
            if function.attr["_XlaMustCompile"].b]


def test_fit_to_batch_keeps_the_used_columns_on_either_side():
    right = tf.constant([[1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0]])
    left = right[:, ::-1]
    values = tf.reshape(tf.range(12), [2, 6])
    assert fit_to_batch({"v": values}, right)["v"].numpy().tolist() == [[0, 1, 2], [6, 7, 8]]
    assert fit_to_batch({"v": values}, left)["v"].numpy().tolist() == [[3, 4, 5], [9, 10, 11]]
    assert fit_to_batch({"v": values}, left, buckets=(4,))["v"].numpy().tolist() == [[2, 3, 4, 5], [8, 9, 10, 11]]
    assert fit_to_batch({"v": values}, right, buckets=(2, 5))["v"].shape == (2, 5)
    assert fit_to_batch({"v": values[:0]}, right[:0])["v"].shape == (0, 1)


@pytest.mark.parametrize("family_name, xla", [("bert", True), ("xlnet", False)])
def test_task_endpoints_serve_the_batch_length_with_the_full_length_values(family_name, xla, sentences, tmp_path):
    """classify, tag and answer on a short batch: the probabilities, tags and spans of the full-length layout,
    also with the model compiled by XLA (`--serving-xla`)."""
    family = get_family(family_name)
    tokenizer = family.train_tokenizer(sentences, 400)
    backbone = family.backbone_cls(**family.backbone_config(f"{family_name}-tiny", vocab_size=tokenizer.vocab_size))
    texts = tf.constant(["Now is the winter", "of our discontent made glorious summer", ""])
    tasks = {"classification": TaskData("topic", "classification", ("a", "b", "c"), False, {}, "test"),
             "tagging": TaskData("ner", "tagging", ("O", "B-X", "I-X"), False, {}, "test"),
             "spans": TaskData("qa", "spans", (), True, {}, "test")}
    for kind_name, task in tasks.items():
        kind = TASK_KINDS[kind_name]
        model = kind.build_model(backbone, task, family)
        path = tmp_path / kind_name
        export_task_model(model, kind, task, family, tokenizer, SEQ_LEN, path, xla=xla)
        assets = json.loads((path / "assets" / "bertology.json").read_text())
        assert assets["xla"] is xla  # and every signature runs the model through one compiled function, or none:
        assert len(xla_compiled_functions(path)) == (1 if xla else 0)
        served = tf.saved_model.load(str(path))
        if kind_name == "classification":
            full = encoding.encode_texts(family, tokenizer, SEQ_LEN, texts)
            expected = tf.nn.softmax(model({n: full[n] for n in model.input}, training=False)).numpy()
            np.testing.assert_allclose(served.classify(texts)["probabilities"], expected, **ULPS)
        elif kind_name == "tagging":
            words = encoding.split_words(texts)
            full, word_map = encoding.encode_words(family, tokenizer, SEQ_LEN, words)
            probabilities = tf.nn.softmax(model({n: full[n] for n in model.input}, training=False))
            most_words = int(words.row_lengths().numpy().max())
            expected = encoding.word_predictions(tf.reduce_max(probabilities, -1), word_map, most_words, 0.0)
            np.testing.assert_allclose(served.tag(texts)["scores"], expected.numpy(), **ULPS)
        else:
            full, _, word_map = encoding.encode_question_context(family, tokenizer, SEQ_LEN, texts, texts[::-1])
            logits = model({n: full[n] for n in model.input}, training=False)
            _, _, score = encoding.best_spans(logits["start"], logits["end"], word_map, kind.max_answer_pieces)
            np.testing.assert_allclose(served.answer(texts, texts[::-1])["score"], score.numpy(), atol=1e-5, rtol=0)


def test_the_warmup_file_holds_one_request_per_string_signature_that_each_serves(exported):
    path = exported("bert")[0]
    served = tf.saved_model.load(str(path))
    requests = {}
    for record in tf.data.TFRecordDataset(str(path / WARMUP_FILE)):
        request = prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
        requests[request.model_spec.signature_name] = {
            name: tf.make_ndarray(tensor) for name, tensor in request.inputs.items()}
    signatures = json.loads((path / "assets" / "bertology.json").read_text())["signatures"]
    assert sorted(requests) == sorted(set(signatures) - {"serve_ids"})
    for name, inputs in requests.items():
        outputs = served.signatures[name](**{key: tf.constant(value) for key, value in inputs.items()})
        assert all(np.size(value) for value in outputs.values()), name


def test_an_xla_export_serves_the_values_of_the_plain_one_in_a_fresh_process(sentences, exported, tmp_path):
    """--serving-xla: the model's part of each endpoint compiled once per shape; the same outputs, served
    by a process that imports only TensorFlow and tensorflow-text."""
    plain, family, tokenizer, backbone, pretrainer = exported("bert")
    run = RunModel("bert", backbone, tokenizer, SEQ_LEN, pretrainer, "bert-tiny")
    export_saved_model(run, tmp_path / "xla", xla=True)
    assert json.loads((tmp_path / "xla" / "assets" / "bertology.json").read_text())["xla"] is True
    assert xla_compiled_functions(tmp_path / "xla") and not xla_compiled_functions(plain)
    texts = _texts(tokenizer, sentences)
    script = (
        "import json, sys\nimport tensorflow as tf, tensorflow_text  # noqa: F401\n"
        "texts = tf.constant(json.loads(sys.argv[1]))\n"
        "answers = {}\n"
        "for path in sys.argv[2:]:\n"
        "    model = tf.saved_model.load(path)\n"
        "    answers[path] = {'serve': model.serve(texts)['sequence_output'].numpy().tolist(),\n"
        "                     'fill': model.fill_mask(texts)['top_probabilities'].numpy().tolist(),\n"
        "                     'short': model.serve(texts[:1])['sequence_output'].numpy().tolist()}\n"
        "assert not [name for name in sys.modules if name.startswith('keras_bertology')]\n"
        "print(json.dumps(answers))\n")
    paths = [str(plain), str(tmp_path / "xla")]
    done = run_python([sys.executable, "-c", script, json.dumps(texts), *paths], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    for key in ("serve", "fill", "short"):  # two shapes: one compilation each
        np.testing.assert_allclose(answers[paths[1]][key], answers[paths[0]][key], atol=1e-5, rtol=0, err_msg=key)
