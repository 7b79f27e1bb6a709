"""`bertology export --format onnx` (keras_bertology/export/onnx.py) as a user meets it: the files it writes, the
encoders it refuses, the extra it needs, and the check that stops a converter's mistake. Every family's outputs
against its encoder's, in a process without TensorFlow: tests/models/test_family_harness.py."""

import contextlib
import io
import json
import shutil
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from keras import ops

from docs_clients import run_serving_docs_client
from family_harness import native_run, sentences_of_one_play
from keras_bertology.cli import main
from keras_bertology.export import onnx as onnx_export
from keras_bertology.layers import projected_lstm
from keras_bertology.models.registry import get_family


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{family: run folder} of a one-layer BERT and ELMo."""
    root, sentences = tmp_path_factory.mktemp("onnx-runs"), sentences_of_one_play()
    for name in ("bert", "elmo"):
        native_run(get_family(name), root / name, sentences, perturb_seed=0)
    return {name: root / name for name in ("bert", "elmo")}


@pytest.fixture(scope="module")
def bert_onnx(runs, tmp_path_factory):
    """(folder, what the command printed) of `bertology export RUN --format onnx` of the BERT run, exported once
    for the tests that read it; a test that writes into it copies it first."""
    out, printed = tmp_path_factory.mktemp("bert-onnx") / "onnx", io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["export", str(runs["bert"]), "--format", "onnx", "--out", str(out)]) == 0
    return out, printed.getvalue()


def _export(capsys, run_dir, out):
    code = main(["export", str(run_dir), "--format", "onnx", "--out", str(out)])
    return code, capsys.readouterr()


def test_the_export_writes_the_model_and_what_a_client_needs_to_feed_it(bert_onnx):
    import onnxruntime

    out, printed = bert_onnx
    assert printed.strip().splitlines()[-3:] == [
        f"ONNX model written to {out}: inputs token_ids, padding_mask, segment_ids; outputs pooled_output, "
        "sequence_output (opset 17)",
        *(f"no string model{pairs}: its lower-casing and accent stripping (NFD) have no ONNX Runtime Extensions "
          "operator that rewrites text as tensorflow-text does; feed model.onnx ids"
          for pairs in ("", " of text pairs"))]  # BERT's uncased WordPiece
    assert sorted(path.name for path in out.iterdir()) == ["model.onnx", "onnx.json"]
    description = json.loads((out / "onnx.json").read_text())
    assert description["family"] == "bert" and description["max_length"] == 16 and description["opset"] == 17
    assert {spec["name"]: spec["below"] for spec in description["inputs"]} == {
        "token_ids": description["inputs"][0]["below"], "padding_mask": 2, "segment_ids": 2}
    assert description["self_check"]["max_difference"] <= onnx_export.CHECK_TOLERANCE
    assert set(description["versions"]) == {"tf2onnx", "onnx", "tensorflow"}
    assert description["text_model"] == description["text_pairs_model"] == {
        "missing": "its lower-casing and accent stripping (NFD) have no ONNX Runtime Extensions operator that "
                   "rewrites text as tensorflow-text does"}
    # The embeddings' norm and the block's two, each one LayerNormalization; the block's GELU in the form ONNX
    # Runtime runs as one kernel; the block's six dense layers each one MatMul on their [B, L, H] input (the
    # pooler's input, [B, H], was one already); the heads split three times and merged once, each reshape to
    # a constant shape (tests/export/test_onnx_fusion.py).
    import onnx

    kinds = [node.op_type for node in onnx.load(str(out / "model.onnx")).graph.node]
    assert description["fused"] == {"LayerNormalization": 3, "Gelu": 1, "MatMul": 6, "Reshape": 4}
    assert kinds.count("LayerNormalization") == 3 and kinds.count("Erf") == 1
    assert "ReduceProd" not in kinds
    assert "GlobalAveragePool" not in kinds and "Neg" not in kinds
    session = onnxruntime.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [(item.name, item.type) for item in session.get_inputs()] == [
        (spec["name"], "tensor(int32)") for spec in description["inputs"]]
    assert all(isinstance(axis, str) for item in session.get_inputs() for axis in item.shape)  # both axes dynamic
    # Exported again into its own folder, replaced whole: the quantize test below exports into a copy of it.


def test_quantize_int8_adds_a_model_whose_matrix_products_run_on_int8_weights(runs, bert_onnx, tmp_path, capsys):
    """Beside the float model (still checked to 1e-4), model.int8.onnx: its products of the inputs with weight
    matrices in int8 (ONNX Runtime's MatMulInteger on dynamically quantized activations), near the float
    model's outputs; what it costs in fine-tuned accuracy is measured in benchmarks/onnx_int8_accuracy.py.
    Exported into a folder an export of the run wrote, its model.onnx gone stale: the folder is replaced whole."""
    import onnx
    import onnxruntime

    out = tmp_path / "onnx"
    shutil.copytree(bert_onnx[0], out)
    (out / "model.onnx").write_bytes(b"stale")
    code = main(["export", str(runs["bert"]), "--format", "onnx", "--quantize", "int8", "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert sorted(path.name for path in out.iterdir()) == ["model.int8.onnx", "model.onnx", "onnx.json"]
    assert (out / "model.onnx").stat().st_size > 1000
    description = json.loads((out / "onnx.json").read_text())
    assert description["self_check"]["max_difference"] <= onnx_export.CHECK_TOLERANCE
    quantized = description["quantized"]
    assert (quantized["model"], quantized["weights"]) == ("model.int8.onnx", "int8")
    # Nearer than the outputs' own scale (a perturbed one-layer BERT's states are ~1), farther than a converter's
    # error: the int8 model is not the float one under another name.
    assert onnx_export.CHECK_TOLERANCE < quantized["max_difference"] < 0.2
    assert f"int8 model written to {out / 'model.int8.onnx'}" in printed.out
    graph = onnx.load(str(out / "model.int8.onnx")).graph
    weights = {tensor.name for tensor in graph.initializer}
    products = [node for node in graph.node if node.op_type in ("MatMul", "MatMulInteger")]
    # Query, key, value, attention output, the feed-forward's two kernels and the pooler on int8 weights; the
    # attention's two products of activations stay float.
    assert sum(node.op_type == "MatMulInteger" for node in products) == 7
    assert [node.op_type for node in products if weights & set(node.input)] == ["MatMulInteger"] * 7
    assert (out / "model.int8.onnx").stat().st_size < 0.35 * (out / "model.onnx").stat().st_size
    session = onnxruntime.InferenceSession(str(out / "model.int8.onnx"), providers=["CPUExecutionProvider"])
    assert [item.name for item in session.get_inputs()] == [spec["name"] for spec in description["inputs"]]


def test_quantize_belongs_to_the_onnx_export_and_is_refused_elsewhere_in_one_line(runs, tmp_path, capsys):
    for other in ("saved_model", "hf"):
        code = main(["export", str(runs["bert"]), "--format", other, "--quantize", "int8", "--out",
                     str(tmp_path / other)])
        err = capsys.readouterr().err
        assert code != 0 and err.strip().endswith(f"--quantize applies to --format onnx, not to --format {other}")
        assert err.count("\n") == 1 and not (tmp_path / other).exists()


def _scanned_recurrence(step, lstm):
    """ELMo's loop as Keras' `ops.scan` runs it, keeping the carry in a tensor list tf2onnx cannot convert."""

    def recurrence(steps, initial_state):
        def scan_step(carry, inputs):
            output, state = step(inputs, list(carry))
            return tuple(state), (output, state[1])

        state, (outputs, _) = ops.scan(scan_step, tuple(initial_state), ops.moveaxis(steps, 1, 0))
        return ops.moveaxis(outputs, 0, 1), *state

    return recurrence


def test_an_encoder_onnx_cannot_express_is_refused_in_one_line(runs, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(projected_lstm, "_recurrence", _scanned_recurrence)
    code, printed = _export(capsys, runs["elmo"], tmp_path / "onnx")
    assert code != 0 and printed.err.count("\n") == 1 and "Traceback" not in printed.err
    assert "elmo's encoder has operations ONNX cannot express (TensorListReserve, TensorListSetItem)" in printed.err
    assert not (tmp_path / "onnx").exists()


@pytest.mark.parametrize("missing", ["tf2onnx", "onnxruntime_extensions"])
def test_without_the_onnx_extra_the_export_names_it(runs, tmp_path, capsys, monkeypatch, missing):
    monkeypatch.setitem(sys.modules, missing, None)
    code, printed = _export(capsys, runs["bert"], tmp_path / "onnx")
    assert code != 0 and printed.err.strip().endswith(onnx_export.NEEDS_EXTRA) and printed.err.count("\n") == 1
    assert not (tmp_path / "onnx").exists()


def test_a_model_the_converter_got_wrong_is_never_written(runs, tmp_path, capsys, monkeypatch):
    """Erfc converted as erf (the 1 - left out): every GELU wrong, the check against the encoder catches it."""
    def erf_for_erfc(ctx, node, name, args):
        node.type = "Erf"

    monkeypatch.setattr(onnx_export, "_erfc", erf_for_erfc)
    code, printed = _export(capsys, runs["bert"], tmp_path / "onnx")
    assert code != 0 and "the ONNX model of bert's encoder computes otherwise than the Keras model" in printed.err
    assert not (tmp_path / "onnx").exists()


def test_the_check_inputs_stay_within_each_inputs_limits_and_pad_the_second_row():
    import tensorflow as tf

    specs = [tf.TensorSpec([None, None], tf.int32, name=name) for name in ("token_ids", "padding_mask")] + \
        [tf.TensorSpec([None, None, 50], tf.int32, name="char_ids")]
    inputs = onnx_export._check_inputs(specs, {"token_ids": 7, "char_ids": 262}, seq_len=6)
    assert inputs["token_ids"].shape == (2, 6) and inputs["char_ids"].shape == (2, 6, 50)
    assert inputs["token_ids"].max() < 7 and inputs["char_ids"].max() < 262 and inputs["char_ids"].min() >= 0
    np.testing.assert_array_equal(inputs["padding_mask"], [[1] * 6, [1, 1, 1, 0, 0, 0]])


def test_the_serving_docs_client_runs_without_tensorflow_and_computes_as_the_encoder(runs, bert_onnx, tmp_path,
                                                                                     capsys):
    """The documented client, as written, in a new process that never imports TensorFlow: the Hugging Face
    export's tokenizer lays the texts out as the run's own, and the ONNX model computes its encoder's
    sequence output from them."""
    from keras_bertology.runs import load_run_model

    (tmp_path / "onnx").mkdir()
    (tmp_path / "onnx" / "bert-tiny-shakespeare").symlink_to(bert_onnx[0])  # the client only reads it
    assert main(["export", str(runs["bert"]), "--format", "hf", "--out",
                 str(tmp_path / "hf" / "bert-tiny-shakespeare")]) == 0
    capsys.readouterr()
    run_serving_docs_client("## ONNX", "### Raw strings in",
                            "import numpy\nnumpy.savez('served.npz', output=sequence_output, **feed)\n", tmp_path)
    served = dict(np.load(tmp_path / "served.npz"))
    run = load_run_model(runs["bert"])
    import tensorflow as tf

    texts = tf.constant(["Now is the winter of our discontent.", "To be, or not to be?"])
    packed = get_family("bert").pack_text(run.tokenizer, run.seq_len, texts)
    ours = [[int(i) for i, kept in zip(row, mask) if kept] for row, mask in
            zip(np.asarray(packed["token_ids"]), np.asarray(packed["padding_mask"]))]
    assert [row[mask == 1].tolist() for row, mask in zip(served["token_ids"], served["padding_mask"])] == ours
    # The encoder on the run's own layout (segment ids included), cut to the served batch's length.
    encoder, length = run.backbone.text_encoder(), served["token_ids"].shape[1]
    expected = np.asarray(encoder({name: np.asarray(packed[name])[:, :length] for name in encoder.input},
                                  training=False)["sequence_output"])
    real = served["padding_mask"] == 1
    np.testing.assert_allclose(served["output"][real], expected[real], atol=1e-4)


# Extended: in CI, tests/export/test_onnx_text.py::test_fine_tuned_classifiers_taggers_and_answer_models_get_string_
# models runs these checks (the logits through ONNX Runtime against the Keras model, onnx.json's kind, labels and
# length) on RoBERTa's classifier, pair classifier, tagger and answer model, which export by the same
# export_task_onnx.
@pytest.mark.extended
@pytest.mark.parametrize("kind", ["classify", "classify_pairs", "tag", "answer"])
def test_a_fine_tuned_task_model_exports_its_logits_and_labels(runs, tmp_path, capsys, kind):
    """`bertology export FINETUNE_DIR --format onnx`: the task model's logits (a span model's start and end),
    in a process without TensorFlow, equal to the Keras model's within 1e-4 on the whole batch and a shorter
    one; onnx.json lists the labels in the order of the logits. (`classify` shares `classify_pairs`' head.)"""
    from family_harness import ONNX_TOLERANCE
    from finetune_material import user_folders, write_file
    from onnx_clients import check_task_models_onnx

    folders = user_folders(tmp_path / "data")
    if kind == "classify":  # the pairs' label and second text alone
        for split in ("train", "dev", "test"):
            rows = [row.split("\t") for row in (folders["pairs"] / f"{split}.tsv").read_text().splitlines()[1:]]
            write_file(tmp_path / "data" / "single", f"{split}.tsv",
                       "".join(f"{label}\t{text}\n" for label, _, text, _ in [["label", "", "text", ""], *rows]))
    folder = {"classify": tmp_path / "data" / "single", "classify_pairs": folders["pairs"], "tag": folders["tags"],
              "answer": folders["spans"]}[kind]
    tuned, out = tmp_path / "ft", tmp_path / "onnx"
    assert main(["finetune", "--task", str(folder), "--from", str(runs["bert"]), "--epochs", "1", "--batch-size",
                 "16", "--seq-len", "32", "--out", str(tuned), "--no-export"]) == 0
    code, printed = _export(capsys, tuned, out)
    assert code == 0, printed.err
    check_task_models_onnx({kind: (tuned, out)}, tmp_path, ONNX_TOLERANCE)


def test_a_fine_tuning_kept_without_its_model_is_refused_in_one_line(runs, tmp_path, capsys):
    from finetune_material import user_folders

    tuned = tmp_path / "ft"
    assert main(["finetune", "--task", str(user_folders(tmp_path / "data")["pairs"]), "--from", str(runs["bert"]),
                 "--epochs", "1", "--seq-len", "16", "--out", str(tuned), "--results-only"]) == 0
    code, printed = _export(capsys, tuned, tmp_path / "onnx")
    assert code != 0 and printed.err.count("\n") == 1 and "holds no model.keras" in printed.err
    assert not (tmp_path / "onnx").exists()


# Extended: in CI, tests/models/t5/test_t5_serving.py::test_t5_learns_a_seq2seq_folder_scored_by_exact_match makes
# the same refusal of the seq2seq folder it fine-tunes (without a run and a fine-tuning of its own).
@pytest.mark.extended
def test_a_text_to_text_model_is_refused_in_one_line(tmp_path, capsys):
    """A seq2seq model generates text (a decoder called again per token): not one forward pass to export."""
    from finetune_material import write_file

    run = tmp_path / "t5"
    native_run(get_family("t5"), run, sentences_of_one_play(), perturb_seed=0)
    for split in ("train", "test"):
        write_file(tmp_path / "task", f"{split}.jsonl", "".join(
            json.dumps({"input": f"the {word} falls", "target": word}) + "\n" for word in ("rain", "night") * 8))
    assert main(["finetune", "--task", str(tmp_path / "task"), "--from", str(run), "--epochs", "1", "--seq-len", "16",
                 "--out", str(tmp_path / "ft"), "--no-export"]) == 0
    code, printed = _export(capsys, tmp_path / "ft", tmp_path / "onnx")
    assert code != 0 and printed.err.count("\n") == 1 and "it generates text" in printed.err
    assert not (tmp_path / "onnx").exists()


def test_bigbirds_block_sparse_branch_computes_as_the_encoder_beyond_the_dense_limit(tmp_path):
    """BigBird's attention is full up to (3 + 2 + 2 x random) blocks and block-sparse beyond, a branch the
    ONNX graph keeps beside the full one (both axes are dynamic): checked at the limit, one block beyond
    it and twice it."""
    import onnxruntime

    from keras_bertology.layers.block_sparse_attention import dense_length_limit

    run = native_run(get_family("bigbird"), tmp_path / "run", sentences_of_one_play(), perturb_seed=0)
    # The encoder alone: its string models are tests/export/test_onnx_text.py's (BigBird's SentencePiece there).
    onnx_export.export_onnx(replace(run, tokenizer=None), tmp_path / "onnx")
    encoder = run.backbone.text_encoder()
    attention = next(layer for layer in encoder._flatten_layers() if hasattr(layer, "random_blocks"))
    limit = dense_length_limit(attention.block_size, attention.random_blocks)
    session = onnxruntime.InferenceSession(str(tmp_path / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for length in (limit, limit + attention.block_size, 2 * limit):
        inputs = {"token_ids": rng.integers(5, run.tokenizer.vocab_size, (2, length)).astype("int32"),
                  "padding_mask": np.ones((2, length), "int32"), "segment_ids": np.zeros((2, length), "int32")}
        inputs["padding_mask"][1, length - attention.block_size:] = 0
        inputs = {name: inputs[name] for name in encoder.input}
        got = dict(zip([output.name for output in session.get_outputs()], session.run(None, inputs)))
        for name, value in encoder(inputs, training=False).items():
            np.testing.assert_allclose(got[name], np.asarray(value), atol=1e-4, err_msg=f"{name} at {length}")


def test_the_conversion_prints_neither_tf2onnx_nor_tensorflow_warnings_and_restores_both():
    """Serializing the graph for tf2onnx's optimizers made TensorFlow warn, in three lines on every export, that
    the lookup tables' initializers fit no MetaGraph collection; the conversion holds both loggers quiet."""
    import logging

    loggers = [logging.getLogger(name) for name in ("tf2onnx", "tensorflow")]
    before = [logger.level for logger in loggers]
    with onnx_export._quiet_conversion():
        assert not any(logger.isEnabledFor(logging.WARNING) for logger in loggers)
    assert [logger.level for logger in loggers] == before
