"""T5 as a user meets it: a transformers T5 folder (spiece.model and a T5ForConditionalGeneration) converted
and exported, whose SavedModel tokenizes as transformers' T5Tokenizer, encodes as its encoder and generates
as its greedy `generate`; and the family's own vocabulary, stream and data stage."""

import contextlib
import io
import json
import re
import shutil
import sys
import types

import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers

from hf_reference import perturbed_hf_model, save_hf_model
from keras_bertology.cli import main
from keras_bertology.data.builder_contexts import InstanceContext
from keras_bertology.data.corpus import default_corpus_paths, read_corpus
from keras_bertology.data.span_corruption import row_lengths
from keras_bertology.models.t5.tokenizer import T5_SPECIAL_TOKENS
from keras_bertology.tokenizers.saved import load_tokenizer
from keras_bertology.tokenizers.sentencepiece import train_sentencepiece
from keras_bertology.errors import ConfigError
from keras_bertology.models.t5 import T5
from keras_bertology.models.t5.instances import stream_chunks
from keras_bertology.models.t5.tokenizer import train_tokenizer
from keras_bertology.engine.checkpoints import RunCheckpoints
from keras_bertology.pretraining.pretrain import PretrainOptions, pretrain
from forked_python import run_python

SEQ_LEN = 24
PROMPTS = ["The <extra_id_0> of the <extra_id_1> king", "<extra_id_0> good lord",
           "What say you, my lord? " * 8]  # the last cut to the sequence length


@pytest.fixture(scope="module")
def sentences():
    return [s for document in read_corpus(default_corpus_paths()[:1]) for s in document][:4000]


@pytest.fixture(scope="module")
def t5_folder(tmp_path_factory, sentences):
    """A T5 v1.1 layout (own head, gated GELU, heads 12 wide at d_model 32) with 8 rows of padding past
    its 300 pieces and 100 sentinels, saved as transformers saves it, beside T5's spiece.model."""
    folder = tmp_path_factory.mktemp("t5")
    pieces = train_sentencepiece(sentences, 300, model_type="unigram", byte_fallback=False,
                                 special_tokens=T5_SPECIAL_TOKENS)
    (folder / "spiece.model").write_bytes(pieces.model_proto)
    config = transformers.T5Config(vocab_size=408, d_model=32, d_kv=12, d_ff=40, num_heads=4, num_layers=2,
                                   num_decoder_layers=3, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                                   dropout_rate=0.0, decoder_start_token_id=0, eos_token_id=1, pad_token_id=0,
                                   architectures=["T5ForConditionalGeneration"])
    hf = perturbed_hf_model(transformers.T5ForConditionalGeneration, config)
    with torch.no_grad():
        hf.shared.weight.mul_(0.1)
    save_hf_model(hf, folder)
    return folder, hf, transformers.T5Tokenizer.from_pretrained(str(folder))


@pytest.fixture(scope="module")
def served(t5_folder, tmp_path_factory):
    folder = t5_folder[0]
    out = tmp_path_factory.mktemp("t5-export")
    assert main(["convert", "--from-hf", str(folder), "--out", str(out / "run"), "--seq-len", str(SEQ_LEN)]) == 0
    assert main(["export", str(out / "run"), "--out", str(out / "export")]) == 0
    return tf.saved_model.load(str(out / "export")), out / "export"


def test_the_export_tokenizes_and_encodes_as_transformers(t5_folder, served):
    _, hf, hf_tokenizer = t5_folder
    served = served[0]
    encoded = served.encode(tf.constant(PROMPTS))
    ids, mask = encoded["token_ids"].numpy(), encoded["padding_mask"].numpy()
    for row, prompt in enumerate(PROMPTS):
        expected = hf_tokenizer(prompt).input_ids
        expected = expected[:SEQ_LEN - 1] + [1] if len(expected) > SEQ_LEN else expected  # cut, </s> kept
        assert ids[row][mask[row] == 1].tolist() == expected
    with torch.no_grad():
        states = hf.encoder(input_ids=torch.tensor(ids, dtype=torch.long),
                            attention_mask=torch.tensor(mask)).last_hidden_state.numpy()
    real = mask.astype(bool)
    np.testing.assert_allclose(encoded["sequence_output"].numpy()[real], states[real], atol=1e-5)


def test_the_export_generates_as_transformers_greedy_generate(t5_folder, served):
    _, hf, hf_tokenizer = t5_folder
    served = served[0]
    greedy = served.generate(tf.constant(PROMPTS))
    encoded = served.encode(tf.constant(PROMPTS))
    for row in range(len(PROMPTS)):
        real = encoded["padding_mask"].numpy()[row] == 1
        ids = encoded["token_ids"].numpy()[row][real]
        with torch.no_grad():
            expected = hf.generate(torch.tensor(ids[None]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                   max_new_tokens=SEQ_LEN, do_sample=False,
                                   use_cache=False)[0, 1:].tolist()  # its cache miscounts a deeper decoder
        ours = [t for t in greedy["generated_ids"].numpy()[row].tolist() if t >= 0]
        assert ours == expected[:len(ours)] and (len(ours) == SEQ_LEN or ours[-1] == 1), (ours, expected)
        # SentencePiece writes <unk> as " ⁇ ", transformers as the piece.
        text = hf_tokenizer.decode([t for t in ours if t != 1]).replace("<unk>", " \u2047 ")
        assert greedy["text"].numpy()[row].decode() == text
    drawn = [served.generate_sampling(tf.constant(PROMPTS[:2]), max_new_tokens=5, temperature=1.0, top_k=0,
                                      seed=seed)["generated_ids"].numpy().tolist() for seed in (3, 3, 4)]
    assert drawn[0] == drawn[1] != drawn[2] and all(len(row) <= 5 for row in drawn[0])


# One bare process (tensorflow and tensorflow-text, nothing of this project) runs `saved_model_cli show`,
# then `saved_model_cli run` (the tool's own `main`, as bare_serving.saved_model_cli runs it), then replays the
# warm-up requests: one TensorFlow start-up instead of three.
BARE_SERVER = """
import contextlib, io, json, sys
import tensorflow as tf, tensorflow_text  # noqa: F401
from tensorflow.python.tools import saved_model_cli
from tensorflow_serving.apis import prediction_log_pb2
path, outdir, prompts = sys.argv[1:4]

def cli(*args):
    sys.argv = ["saved_model_cli", *args]
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        try:
            saved_model_cli.main()
        except SystemExit as exit_:  # absl's app.run exits
            assert not exit_.code, ("saved_model_cli", args, exit_.code)
    return shown.getvalue()

shown = cli("show", "--dir", path, "--all")
cli("run", "--dir", path, "--tag_set", "serve", "--signature_def", "generate", "--input_exprs", "text=" + prompts,
    "--outdir", outdir)
model = tf.saved_model.load(path)
served = {}
for record in tf.data.TFRecordDataset(path + "/assets.extra/tf_serving_warmup_requests"):
    request = prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
    inputs = {k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()}
    outputs = model.signatures[request.model_spec.signature_name](**inputs)
    served[request.model_spec.signature_name] = sorted(outputs)
print(json.dumps({"shown": shown, "served": served,
                  "modules": [name for name in sys.modules if name.startswith("keras_bertology")]}))
"""


@pytest.mark.slow
def test_saved_model_cli_and_the_warmup_requests_run_generate_in_a_bare_process(served, tmp_path):
    """What a server has: tensorflow and tensorflow-text, no keras_bertology. `saved_model_cli` lists the
    generation signatures and runs `generate` on raw strings; each warm-up request TensorFlow Serving would
    replay serves, `generate_sampling`'s scalars included."""
    model, path = served
    done = run_python([sys.executable, "-c", BARE_SERVER, str(path), str(tmp_path / "out"), repr(PROMPTS)],
                      timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["modules"] == [], result["modules"]
    for name in ("serving_default", "serve", "encode", "generate", "generate_sampling"):
        assert f"signature_def['{name}']" in result["shown"], name
    expected = model.generate(tf.constant(PROMPTS))
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "generated_ids.npy"),
                                  expected["generated_ids"].numpy())
    assert np.load(tmp_path / "out" / "text.npy", allow_pickle=True).tolist() == expected["text"].numpy().tolist()
    replayed = result["served"]
    assert {"encode", "generate", "generate_sampling"} <= set(replayed)
    assert replayed["generate_sampling"] == ["generated_ids", "num_tokens", "text"]


def test_the_vocabulary_ends_with_the_sentinels_which_text_can_name(sentences, tmp_path):
    tokenizer = train_tokenizer(sentences, 400)
    vocabulary = tokenizer.vocabulary
    assert len(vocabulary) == 400 and vocabulary[:3] == ["<pad>", "</s>", "<unk>"]
    assert vocabulary[-1] == "<extra_id_0>" and vocabulary[-100] == "<extra_id_99>" and vocabulary[-4] == "<extra_id_3>"
    tokenizer.save(tmp_path)
    for loaded in (tokenizer, load_tokenizer(tmp_path)):
        ids = loaded.tokenize(tf.constant(["my <extra_id_3> lord <extra_id_0>", "<extra_id_99>"])).to_list()
        assert ids[0][-1] == 399 and 396 in ids[0] and ids[1] == [300]
        assert vocabulary.index("\u2581") not in ids[0]  # no lone word start before a sentinel
    with pytest.raises(ConfigError, match="vocab"):
        train_tokenizer(sentences, 102)


def test_the_stream_is_cut_into_rows_that_span_corruption_fits_into_the_sequence(sentences):
    tokenizer = train_tokenizer(sentences, 400)
    documents = [[np.asarray(row, np.int32) for row in tokenizer.tokenize(tf.constant(sentences[start:start + 50]))
                  .to_list()] for start in range(0, 400, 50)]
    chunks = stream_chunks(documents, InstanceContext(64, {"pad_id": 0, "cls_id": None, "sep_id": 1}))
    width, _ = row_lengths(64)
    assert chunks["token_ids"].shape[1] == width == 70
    stream = np.concatenate([piece for document in documents for piece in document])
    np.testing.assert_array_equal(chunks["token_ids"][chunks["padding_mask"] == 1], stream)
    assert chunks["padding_mask"][:-1].all() and chunks["token_ids"].shape[0] == -(-len(stream) // width)
    masker = T5.build_masker(tokenizer, None, seq_len=64)
    batch = masker({"token_ids": tf.constant(chunks["token_ids"][:8])}, seed=[1, 2])
    assert batch["token_ids"].shape[1] == 64 and masker.targets_length == batch["target_ids"].shape[1]
    assert (batch["target_ids"].numpy()[:, 0] == 399).all()  # the first span's sentinel: <extra_id_0>


@pytest.fixture(scope="module")
def t5_run(tmp_path_factory):
    """(run folder, export, metrics, printed summary) of a short t5-tiny pretraining: 60 steps take the spans'
    loss from ~6.6 to ~4.3 (last window), under the unigram level's 5.36 (seeds 0 and 1; 150 steps: 4.16)."""
    out = tmp_path_factory.mktemp("t5-run")
    plays = [str(path) for path in default_corpus_paths()[:6]]
    argv = ["pretrain", "--model", "t5", "--preset", "t5-tiny", "--steps", "60", "--batch-size", "16",
            "--seq-len", "32", "--vocab-size", "600", "--corpus", *plays, "--out", str(out / "run"),
            "--export", str(out / "export")]
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        assert main(argv) == 0
    return out / "run", out / "export", json.loads((out / "run" / "metrics.json").read_text()), captured.getvalue()


def test_pretraining_t5_falls_below_the_unigram_level_and_fills_in_spans(t5_run, tmp_path, capsys):
    _, export, metrics, out = t5_run
    spans = metrics["objectives"]["spans"]
    assert spans["last"]["loss"] < spans["chance"]["loss"] < spans["first"]["loss"]
    assert len(metrics["span_fills"]) == 3 and "fill-ins of spans replaced by sentinels" in out
    assert all("<extra_id_0>" in example["text"] and example["truth"].startswith("<extra_id_0> ")
               for example in metrics["span_fills"])
    served = tf.saved_model.load(str(export))
    assert served.generate(tf.constant(["the <extra_id_0> king"]))["text"].shape == (1,)
    assert served.signatures["serve_ids"](token_ids=tf.constant([[5, 6, 1]]), padding_mask=tf.constant([[1, 1, 1]]))[
        "sequence_output"].shape == (1, 3, 128)
    assert main(["pretrain", "--model", "t5", "--preset", "t5-tiny", "--whole-word",
                 "--out", str(tmp_path / "never")]) == 2
    assert "--whole-word does not apply to --model t5" in capsys.readouterr().err
    assert not (tmp_path / "never").exists()


def _write_folder(folder, kind):
    """train/test files of a small task: topics named by a word of the text (classification, TSV) or the
    text's first word to write (seq2seq, JSONL)."""
    folder.mkdir()
    words = ["king", "lord", "night", "sword", "crown", "love"]
    rng = np.random.default_rng(0)
    for split, count in (("train", 48), ("test", 12)):
        rows = []
        for _ in range(count):
            chosen = [words[i] for i in rng.integers(0, len(words), 5)]
            rows.append((" ".join(chosen), chosen[0]))
        if kind == "classification":
            (folder / f"{split}.tsv").write_text("text\tlabel\n" + "".join(f"{t}\t{l}\n" for t, l in rows))
        else:
            (folder / f"{split}.jsonl").write_text("".join(json.dumps({"input": t, "target": l}) + "\n"
                                                           for t, l in rows))


def test_t5_fine_tunes_text_to_text_and_serves_what_it_scored(t5_run, tmp_path):
    """The decoder learns to write each label; the scores are those of its greedy answers, which the export's
    `generate` and `classify` write too; `--head encoder` trains a classifier on the encoder instead."""
    _write_folder(tmp_path / "task", "classification")
    assert main(["finetune", "--task", str(tmp_path / "task"), "--from", str(t5_run[0]), "--epochs", "2",
                 "--batch-size", "16", "--out", str(tmp_path / "ft"), "--export", str(tmp_path / "export")]) == 0
    results = json.loads((tmp_path / "ft" / "results.json").read_text())
    assert results["recipe"]["head"] == "text-to-text"
    served = tf.saved_model.load(str(tmp_path / "export"))
    texts, gold = zip(*(line.split("\t") for line in (tmp_path / "task" / "test.tsv").read_text().splitlines()[1:]))
    written = [text.decode().strip() for text in served.generate(tf.constant(texts))["text"].numpy()]
    assert sum(w == g for w, g in zip(written, gold)) / len(gold) == pytest.approx(results["test"]["accuracy"])
    labels = served.classify(tf.constant(texts))
    assert [text.decode() for text in labels["label"].numpy()] == written
    assert [results["labels"][i] if i >= 0 else None for i in labels["label_id"].numpy()] == \
        [w if w in results["labels"] else None for w in written]
    assert main(["finetune", "--task", str(tmp_path / "task"), "--from", str(t5_run[0]), "--epochs", "1",
                 "--head", "encoder", "--out", str(tmp_path / "enc"), "--no-export"]) == 0
    assert json.loads((tmp_path / "enc" / "results.json").read_text())["recipe"]["head"] == "encoder"


def test_t5_learns_a_seq2seq_folder_scored_by_exact_match(t5_run, tmp_path, capsys):
    """A seq2seq folder (JSONL input and target) fine-tunes T5's decoder, scored by exact match; `--head encoder`
    is refused for it, and so is `export --format onnx` of its model, which generates text (a decoder called
    again per token, not one forward pass): in one line, nothing written."""
    _write_folder(tmp_path / "task", "seq2seq")
    assert main(["finetune", "--task", str(tmp_path / "task"), "--from", str(t5_run[0]), "--epochs", "1",
                 "--batch-size", "16", "--out", str(tmp_path / "ft"), "--no-export"]) == 0
    results = json.loads((tmp_path / "ft" / "results.json").read_text())
    assert results["kind"] == "seq2seq" and set(results["test"]) == {"exact_match"}
    capsys.readouterr()
    code = main(["export", str(tmp_path / "ft"), "--format", "onnx", "--out", str(tmp_path / "onnx")])
    err = capsys.readouterr().err
    assert code != 0 and err.count("\n") == 1 and "it generates text" in err
    assert not (tmp_path / "onnx").exists()
    assert main(["finetune", "--task", str(tmp_path / "task"), "--from", str(t5_run[0]), "--head", "encoder",
                 "--out", str(tmp_path / "never")]) == 2
    assert not (tmp_path / "never").exists()


def test_a_resumed_t5_run_ends_with_the_weights_of_an_uninterrupted_one(tmp_path):
    """The newest checkpoint of a finished run deleted, the run resumed: the same weights, bit for bit (the
    pretrainer, its head and the optimizer reload from the checkpoint, and the span draws go on as before)."""
    settings = dict(model="t5", preset="t5-tiny", corpus=[str(default_corpus_paths()[0])], steps=2, log_every=2,
                    batch_size=4, seq_len=24, vocab_size=400, no_export=True, verbose=0, precision="float32")
    finished = pretrain(PretrainOptions(**settings, out=str(tmp_path / "a")))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    checkpoints = RunCheckpoints(tmp_path / "b")
    shutil.rmtree(checkpoints.latest()[0])
    resumed = pretrain(PretrainOptions(**settings, out=str(tmp_path / "b"), resume=True))
    assert resumed["weights_sha256"] == finished["weights_sha256"]


def test_text_to_text_teaches_each_answer_shifted_right_after_the_start_token(sentences):
    from keras_bertology.finetune.task_data import TaskData
    from keras_bertology.finetune.text_to_text import TextToText

    tokenizer = train_tokenizer(sentences, 400)
    task = TaskData("t", "classification", ("good lord", "king"), False, {}, "test")
    examples = [{"text": "my lord", "label": "king"}, {"text": "the night", "label": "good lord"}]
    names = ["token_ids", "padding_mask", "decoder_token_ids", "decoder_padding_mask"]
    encoded = TextToText("classification", "spans", tokenizer).encode(task, examples, T5, tokenizer, 16, names)
    targets, weights = encoded["targets"]["spans"], encoded["weights"]["spans"]
    for row, ids in enumerate(tokenizer.tokenize(tf.constant(["king", "good lord"])).to_list()):
        answer, rest = ids + [tokenizer.sep_id], targets.shape[1] - len(ids) - 1
        assert targets[row].tolist() == answer + [0] * rest and weights[row].tolist() == [1] * len(answer) + [0] * rest
        assert encoded["inputs"]["decoder_token_ids"][row].tolist() == ([0] + answer + [0] * rest)[:targets.shape[1]]
        # The start and every answer token are read (the last one's prediction weighs nothing).
        assert encoded["inputs"]["decoder_padding_mask"][row].tolist() == ([1] * (len(answer) + 1) + [0] * rest)[
            :targets.shape[1]]
    assert sorted(encoded["inputs"]) == sorted(names)


def test_classify_names_the_label_a_written_answer_is_and_minus_one_for_any_other_text(monkeypatch):
    """What `classify` adds to `generate`: the index of the label the answer spells (spaces around it stripped,
    case kept), -1 where it spells none. The end-to-end test above trains too briefly to write many labels."""
    from keras_bertology.finetune import text_to_text
    from keras_bertology.finetune.task_data import TaskData

    written = tf.constant([" king", "good lord ", "King", "", "good  lord", "lord"])
    monkeypatch.setattr(text_to_text, "seq2seq_endpoints",
                        lambda *args: {"generate": (lambda text: {"text": written}, [])})
    monkeypatch.setattr(text_to_text, "compiled", lambda *args: None)
    kind = text_to_text.TextToText("classification", "spans", None)
    model = types.SimpleNamespace(backbone=types.SimpleNamespace(text_encoder=lambda: None))
    task = TaskData("t", "classification", ("lord", "good lord", "king"), False, {}, "test")
    classify = kind.endpoints(model, task, T5, None, 16, None, None)["classify"][0]
    served = classify(tf.constant(["any text"] * 6))
    assert served["label"].numpy().tolist() == written.numpy().tolist()
    assert served["label_id"].numpy().tolist() == [2, 1, -1, -1, -1, 0]


def test_text_to_text_predictions_are_the_greedy_answers_of_the_whole_decoder(sentences):
    """`predict` (the key/value cache, by batches) writes what greedy decoding of the whole prefix writes."""
    from keras_bertology.finetune.task_data import TaskData
    from keras_bertology.finetune.text_to_text import TextToText
    from keras_bertology.models.t5 import T5Backbone, T5Pretrainer

    tokenizer = train_tokenizer(sentences, 400)
    backbone = T5Backbone(vocab_size=408, num_layers=1, num_heads=2, hidden_size=16, intermediate_size=24,
                          num_decoder_layers=2, dropout=0.0, initializer_factor=3.0)  # positions matter
    pretrainer = T5Pretrainer(backbone)
    bias = backbone.get_layer("decoder_position_bias")
    bias.embeddings.assign(np.random.default_rng(0).normal(0, 3, bias.embeddings.shape))
    task = TaskData("t", "seq2seq", (), False, {}, "test")
    examples = [{"text": text, "target": "my good lord of the night"} for text in sentences[:5]]
    kind = TextToText("seq2seq", "spans", tokenizer)
    encoded = kind.encode(task, examples, T5, tokenizer, 16, list(pretrainer.input))
    inputs = encoded["inputs"]
    written = np.zeros([len(examples), 1], np.int32)
    for _ in range(encoded["targets"]["spans"].shape[1]):
        logits = np.asarray(pretrainer({"token_ids": inputs["token_ids"], "padding_mask": inputs["padding_mask"],
                                        "decoder_token_ids": written,
                                        "decoder_padding_mask": np.ones_like(written)})["spans"])[:, -1, :400]
        written = np.concatenate([written, np.argmax(logits, -1).astype(np.int32)[:, None]], axis=1)
    expected = [kind._text(row[1:]) for row in written]
    assert len(set(expected)) > 1 and all(expected)  # answers that tell a wrong decoding apart
    assert kind.predict(pretrainer, encoded, task, examples, batch_size=2) == expected


@pytest.mark.parametrize("kind, head, has_decoder, message", [
    ("tagging", "text-to-text", True, "--head text-to-text takes classification and seq2seq tasks; t is tagging"),
    ("seq2seq", "encoder", True, "task t is seq2seq: its answers are written by a decoder"),
    ("seq2seq", "auto", False, "task t (seq2seq) needs an encoder-decoder run"),
])
def test_a_task_kind_text_to_text_cannot_take_is_refused_in_one_line(kind, head, has_decoder, message):
    """Which kinds a decoder writes comes from the data kinds (`answer_field`, `free_text_answers`)."""
    from types import SimpleNamespace

    from keras_bertology.finetune.task_data import TaskData
    from keras_bertology.finetune.text_to_text import text_to_text_kind

    task = TaskData("t", kind, (), False, {}, "test")
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        text_to_text_kind(task, SimpleNamespace(has_decoder=has_decoder, objectives=["spans"]), None, head)
