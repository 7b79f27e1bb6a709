"""`bertology probe` (keras_bertology/probe_encoder.py): a run's encoder and its random control probed at
every depth on a user's folder of tagged words, and the one-line refusals of what a probe cannot read."""

import contextlib
import json

import keras
import numpy as np
import pytest

from keras_bertology import probing
from keras_bertology.cli import main
from keras_bertology.finetune.datasets import load_task
from keras_bertology.models.bert.backbone import BertBackbone
from keras_bertology.models.registry import get_family
from keras_bertology.runs import RunModel, load_run_model, save_run_model
from keras_bertology.tokenizers.wordpiece import WordPieceTokenizer

WORDS = ["the", "king", "queen", "sea", "falls", "rises", "and", "a", "ship", "crown"]
NAMES = {"king", "queen", "crown"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """An untrained two-layer BERT run folder: a probe reads any encoder, trained or not.

    Its weights are drawn by a fixed seed, and its width is 32: at width 16 the random position vectors are
    as large as the word vectors, and over 60 draws a seed's probe fell to 0.886 macro-F1 (a CI run's encoder
    to 0.872 over two seeds); at 32 the lowest of 60 draws was 0.94, a margin over the 0.9 asserted below."""
    folder = tmp_path_factory.mktemp("run")
    tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS], lower_case=True)
    keras.utils.set_random_seed(7)
    backbone = BertBackbone(vocab_size=15, num_layers=2, num_heads=2, hidden_size=32, intermediate_size=64,
                            max_positions=16)
    save_run_model(folder, RunModel("bert", backbone, tokenizer, 16))
    return folder


def _tagged_folder(folder, sentences):
    """A tagging task of `sentences` per split: the words in NAMES tagged B-NAME (word identity decides)."""
    rng = np.random.default_rng(0)
    folder.mkdir()
    for split, count in (("train", sentences), ("test", sentences // 2)):
        lines = []
        for _ in range(count):
            lines += [f"{word}\t{'B-NAME' if word in NAMES else 'O'}" for word in rng.choice(WORDS, 6)] + [""]
        (folder / f"{split}.conll").write_text("\n".join(lines))
    return folder


def test_probes_of_every_depth_against_the_control_each_seed_draws(tmp_path, run_dir, capsys):
    task = _tagged_folder(tmp_path / "names", 40)
    out = tmp_path / "probes"
    status = main(["probe", "--from", str(run_dir), "--task", str(task), "--seeds", "2", "--pool", "30",
                   "--train-examples", "20", "--test-examples", "20", "--out", str(out)])
    assert status == 0, capsys.readouterr().err
    results = json.loads((out / "probes.json").read_text())
    assert results["family"] == "bert" and results["seeds"] == 2 and results["examples"]["test_rows"] == 120
    encoder, control = results["encoder"], results["control"]
    assert len(encoder["layers"]) == len(control["layers"]) == 3  # the embeddings and each of two layers
    # Word identity decides the tag, and the embeddings hold it: every depth of both encoders reads it.
    assert min(depth["mean"] for depth in encoder["layers"] + control["layers"]) > 0.9
    # The control of seed s is the architecture drawn by s, probed with seed s's draw.
    run = load_run_model(run_dir)
    again = probing.probe_seeds(probing.random_control(run.backbone, 1), get_family("bert"), run.tokenizer, 16,
                                load_task(str(task)), (30, 20, 20), (1,))[1]
    assert control["mix"]["seeds"][1] == pytest.approx(again["mix"])
    assert results["gain"]["seeds"] == pytest.approx([a - b for a, b in zip(encoder["mix"]["seeds"],
                                                                             control["mix"]["seeds"])])
    report = (out / "probes.md").read_text()
    assert "| 0 (embeddings) |" in report and "| 2 |" in report and "| mix |" in report
    assert (out / "probes.png").stat().st_size > 10_000
    assert "probes written to" in capsys.readouterr().out


@pytest.mark.parametrize("flags, message", [
    (["--task", "PAIRS"], "a probe reads tagged words or one labelled text per example, not a classification task "
                          "of text pairs"),
    (["--task", "NAMES", "--pool", "10", "--train-examples", "20"], "--train-examples 20 is more than the --pool 10"),
    (["--task", "NAMES", "--seeds", "1"], "--seeds: '1' is not a whole number from 2 to 100"),
    (["--task", "NAMES", "--from", "NOWHERE"], "NOWHERE"),
])
def test_what_a_probe_cannot_read_is_one_line_and_writes_nothing(tmp_path, run_dir, capsys, flags, message):
    pairs = tmp_path / "pairs"
    pairs.mkdir()
    for split in ("train", "test"):
        (pairs / f"{split}.tsv").write_text("text\ttext_b\tlabel\nthe king\tthe sea\tyes\na ship\tthe crown\tno\n")
    names = _tagged_folder(tmp_path / "names", 4)
    paths = {"PAIRS": str(pairs), "NAMES": str(names), "NOWHERE": str(tmp_path / "nowhere")}
    argv = ["probe", "--from", str(run_dir), "--out", str(tmp_path / "out")] + [paths.get(flag, flag) for flag in flags]
    with pytest.raises(SystemExit) if "--seeds" in flags else contextlib.nullcontext():  # argparse's own refusal
        status = main(argv)
        assert status != 0
    err = capsys.readouterr().err
    assert message.replace("NOWHERE", str(tmp_path / "nowhere")) in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()

