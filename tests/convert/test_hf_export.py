"""`bertology export --format hf`: run folders back into Hugging Face model folders.

Round trips: a randomly initialised transformers model of an odd small size
(weights large enough to work the nonlinearities, LayerNorms perturbed) is
saved, converted by `convert_hf_checkpoint`, written as a run folder and
exported again: every tensor comes back under its name with its value, and
transformers loads the folder into a model that computes what the original
did. A run made by this library (a trained tokenizer, perturbed weights) is
exported and loaded with `AutoTokenizer` and `AutoModelForPreTraining`: the
same ids and the same numbers as the Keras model.
"""

import json
from pathlib import Path

import keras
import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file
from tokenizers import AddedToken

from hf_reference import perturbed_hf_model, roberta_bpe_files
from keras_bertology.cli import main
from keras_bertology.convert import convert_hf_checkpoint
from keras_bertology.runs import RunModel, save_run_model

SMALL = dict(vocab_size=99, hidden_size=48, num_hidden_layers=2, num_attention_heads=3, intermediate_size=80,
             max_position_embeddings=40, initializer_range=0.2)
TOLERANCE = 1e-5


def _export(run_dir, out, capsys, *extra):
    assert main(["export", str(run_dir), "--format", "hf", "--out", str(out), *extra]) == 0
    return capsys.readouterr().out


def _round_trip(tmp_path, capsys, hf):
    """Save `hf`, convert it to a run folder, export that with --format hf; (folder, printed lines)."""
    hf_dir, run_dir, out = tmp_path / "hf", tmp_path / "run", tmp_path / "export"
    hf.save_pretrained(str(hf_dir))
    run, _ = convert_hf_checkpoint(hf_dir)
    save_run_model(run_dir, run)
    return hf_dir, out, _export(run_dir, out, capsys)


def _assert_same_tensors(original_dir, exported_dir, folded=None):
    """Every tensor of `original_dir` is in `exported_dir` with its value; `folded(original, exported)`
    compares the tensors the import folds together (RoBERTa's positions and token type)."""
    original, exported = load_file(str(original_dir / "model.safetensors")), load_file(str(exported_dir /
                                                                                            "model.safetensors"))
    assert sorted(exported) == sorted(original)
    special = folded(original, exported) if folded else set()
    for name, value in original.items():
        if name not in special:
            assert exported[name].dtype == np.float32
            np.testing.assert_allclose(exported[name], value, rtol=0, atol=1e-7, err_msg=name)


def _assert_computes_like(original, exported_dir, **inputs):
    """transformers loads the export into `original`'s class, which computes what `original` computes."""
    loaded = type(original).from_pretrained(str(exported_dir), attn_implementation="eager").eval()
    with torch.no_grad():
        expected, got = original(**inputs), loaded(**inputs)
    for key, value in expected.items():
        if torch.is_tensor(value):
            np.testing.assert_allclose(got[key].numpy(), value.numpy(), rtol=0, atol=TOLERANCE, err_msg=key)


def _ids(vocab_size, seed=0, shape=(2, 11)):
    ids = torch.tensor(np.random.default_rng(seed).integers(5, vocab_size, shape))
    mask = torch.ones(shape, dtype=torch.long)
    mask[1, 7:] = 0
    return ids, mask


BERT_CLASSES = [("BertForPreTraining", "gelu", {}), ("BertForMaskedLM", "gelu_new", {"tie_word_embeddings": False}),
                ("BertModel", "relu", {})]


@pytest.mark.parametrize("cls_name,hidden_act,options", BERT_CLASSES)
def test_bert_round_trip(tmp_path, capsys, cls_name, hidden_act, options):
    config = transformers.BertConfig(hidden_act=hidden_act, **SMALL, **options)
    hf = perturbed_hf_model(getattr(transformers, cls_name), config)
    hf_dir, out, printed = _round_trip(tmp_path, capsys, hf)
    assert printed.startswith(f"{cls_name} written to {out}")
    assert json.loads((out / "config.json").read_text())["architectures"] == [cls_name]
    _assert_same_tensors(hf_dir, out, None if config.tie_word_embeddings else _unused_head_bias)
    ids, mask = _ids(SMALL["vocab_size"])
    _assert_computes_like(hf, out, input_ids=ids, attention_mask=mask, token_type_ids=(ids % 2))


def _unused_head_bias(original, exported):
    """Untied, transformers adds cls.predictions.decoder.bias to the logits and never reads
    cls.predictions.bias (the import skips it): the export writes the used one under both names."""
    np.testing.assert_array_equal(exported["cls.predictions.bias"], original["cls.predictions.decoder.bias"])
    return {"cls.predictions.bias"}


def _roberta_folded(original, exported):
    """The import adds token type row 0 into the positions and drops the two rows RoBERTa never reads."""
    positions, types = (f"roberta.embeddings.{name}.weight" for name in ("position_embeddings", "token_type_embeddings"))
    np.testing.assert_allclose(exported[positions][2:] + exported[types][0],
                               original[positions][2:] + original[types][0], rtol=0, atol=1e-7)
    np.testing.assert_array_equal(exported[positions][:2], 0)
    return {positions, types}


@pytest.fixture(scope="module")
def bpe_files(tmp_path_factory, sentences):
    """A small byte-level BPE vocabulary trained as RoBERTa's, as vocab.json + merges.txt."""
    return roberta_bpe_files(sentences, 400, tmp_path_factory.mktemp("bpe"))


def test_roberta_round_trip(tmp_path, capsys, bpe_files):
    """With its byte-level BPE files: AutoTokenizer reads the exported ones to RoBERTa's ids, the mask
    taking the spaces before it."""
    vocab_size = len(json.loads((bpe_files / "vocab.json").read_text(encoding="utf-8")))
    config = transformers.RobertaConfig(type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0,
                                        eos_token_id=2, **dict(SMALL, vocab_size=vocab_size))
    hf = perturbed_hf_model(transformers.RobertaForMaskedLM, config)
    for name in ("vocab.json", "merges.txt"):
        (tmp_path / "hf").mkdir(exist_ok=True)
        (tmp_path / "hf" / name).write_bytes((bpe_files / name).read_bytes())
    hf_dir, out, printed = _round_trip(tmp_path, capsys, hf)
    assert printed.startswith(f"RobertaForMaskedLM written to {out}")
    _assert_same_tensors(hf_dir, out, _roberta_folded)
    _assert_computes_like(hf, out, **dict(zip(("input_ids", "attention_mask"), _ids(vocab_size))))
    texts = ["Now is the <mask> of our discontent.", "  To be,  or not\tto be!", "Hi."]
    mask = AddedToken("<mask>", lstrip=True, rstrip=False)  # as the import reads these files, and roberta-base has it
    expected = transformers.RobertaTokenizer.from_pretrained(str(hf_dir), mask_token=mask)(texts, padding="longest")
    expected = expected["input_ids"]
    assert transformers.AutoTokenizer.from_pretrained(str(out))(texts, padding="longest")["input_ids"] == expected


@pytest.mark.parametrize("cls_name", ["ElectraForPreTraining", "ElectraForMaskedLM"])
def test_electra_round_trip(tmp_path, capsys, cls_name):
    """Embeddings narrower than the encoder (embeddings_project), as ELECTRA's."""
    hf = perturbed_hf_model(getattr(transformers, cls_name), transformers.ElectraConfig(embedding_size=24, **SMALL))
    hf_dir, out, printed = _round_trip(tmp_path, capsys, hf)
    assert printed.startswith(f"{cls_name} written to {out}")
    _assert_same_tensors(hf_dir, out)
    ids, mask = _ids(SMALL["vocab_size"])
    _assert_computes_like(hf, out, input_ids=ids, attention_mask=mask, token_type_ids=(ids % 2))


@pytest.fixture(scope="module")
def albert_spiece(tmp_path_factory, sentences):
    """A unigram spiece.model with ALBERT's specials and no byte fallback, as ALBERT ships."""
    from keras_bertology.models.albert.tokenizer import ALBERT_SPECIAL_TOKENS
    from keras_bertology.tokenizers.sentencepiece import train_sentencepiece

    trained = train_sentencepiece([s.lower() for s in sentences], 300, model_type="unigram", byte_fallback=False,
                                  special_tokens=ALBERT_SPECIAL_TOKENS)
    path = tmp_path_factory.mktemp("spiece") / "spiece.model"
    path.write_bytes(trained.model_proto)
    return path


@pytest.mark.parametrize("cls_name,tokenizer_config", [("AlbertForPreTraining", {"keep_accents": True}),
                                                       ("AlbertForMaskedLM", {"do_lower_case": False})])
def test_albert_round_trip(tmp_path, capsys, albert_spiece, cls_name, tokenizer_config):
    """Two layers sharing one group, embeddings narrower than the encoder; the tokenizer's options survive."""
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    (hf_dir / "spiece.model").write_bytes(albert_spiece.read_bytes())
    (hf_dir / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    tokenizer = transformers.AlbertTokenizer.from_pretrained(str(hf_dir), **tokenizer_config)
    config = transformers.AlbertConfig(embedding_size=24, **dict(SMALL, vocab_size=len(tokenizer)))
    hf = perturbed_hf_model(getattr(transformers, cls_name), config)
    hf_dir, out, printed = _round_trip(tmp_path, capsys, hf)
    assert printed.startswith(f"{cls_name} written to {out}")
    _assert_same_tensors(hf_dir, out)
    ids, mask = _ids(len(tokenizer))
    _assert_computes_like(hf, out, input_ids=ids, attention_mask=mask, token_type_ids=(ids % 2))
    texts = ["``Café'' is NOT   naïve, Ünïcödé!", "Now is the winter of our [MASK].", "Hi."]
    exported = transformers.AutoTokenizer.from_pretrained(str(out))
    assert type(exported).__name__ == "AlbertTokenizer"
    assert exported(texts, padding="longest")["input_ids"] == tokenizer(texts, padding="longest")["input_ids"]


# A run made by this library -------------------------------------------------------------------------

# Case, accents, punctuation, CJK, words outside the vocabulary, runs of spaces, a pair of segments.
TEXTS = ["Now is the WINTER of our discontent.", "Café naïve:  to be, or not to be?  東京 xyzzyq!", "Hi."]
SECOND = ["Made glorious summer by this sun of York.", "That is the question.", "Ho."]
SEQ_LEN = 32


@pytest.fixture(scope="module")
def sentences():
    from keras_bertology.data.corpus import default_corpus_paths, read_corpus

    return [s for document in read_corpus(default_corpus_paths()[:1]) for s in document][:600]


def _perturb(model, seed=0, scale=0.2):
    """Every weight moved by N(0, scale): LayerNorms off (1, 0), biases off 0, activations nonlinear."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(variable.numpy() + rng.normal(0, scale, variable.shape).astype("float32"))


def _native_run(family_name, preset, sentences, run_dir, vocab_size=300, tokenizer=None, **pretrainer_options):
    from keras_bertology.models import FAMILIES

    keras.utils.set_random_seed(0)
    family = FAMILIES[family_name]
    tokenizer = tokenizer or family.train_tokenizer(sentences, vocab_size)
    backbone = family.backbone_cls(**family.backbone_config(preset, vocab_size=tokenizer.vocab_size,
                                                            max_positions=SEQ_LEN))
    pretrainer = family.build_pretrainer(backbone, pretrainer_options, preset=preset, batch_size=len(TEXTS))
    _perturb(pretrainer)
    run = RunModel(family_name, backbone, tokenizer, SEQ_LEN, pretrainer=pretrainer, preset=preset)
    save_run_model(run_dir, run)
    return run


@pytest.fixture(scope="module")
def bert_run(tmp_path_factory, sentences):
    run_dir = tmp_path_factory.mktemp("bert_run")
    return run_dir, _native_run("bert", "bert-tiny", sentences, run_dir)


def _keras_outputs(run, heads=True, texts=TEXTS, second=SECOND):
    """Our packed ids and the Keras model's outputs on (texts, second): the encoder's, and with `heads`
    MLM logits at every position and NSP logits where the run has that head."""
    import tensorflow as tf

    from keras_bertology.convert.hf_export import find_layer
    from keras_bertology.models import FAMILIES

    inputs = FAMILIES[run.family].pack_text(run.tokenizer, SEQ_LEN, tf.constant(texts),
                                            None if second is None else tf.constant(second))
    inputs = {name: value.numpy() for name, value in inputs.items()}
    outputs = dict(run.backbone({k: v for k, v in inputs.items() if k in run.backbone.input}))
    if not heads:
        return inputs, outputs
    positions = np.tile(np.arange(SEQ_LEN, dtype="int32"), (len(texts), 1))
    outputs["mlm"] = run.pretrainer.get_layer("mlm_head")(outputs["sequence_output"], positions)
    if find_layer(run.pretrainer, "nsp_head") is not None:
        outputs["nsp"] = run.pretrainer.get_layer("nsp_head")(outputs["pooled_output"])
    return inputs, {name: np.asarray(value) for name, value in outputs.items()}


def _assert_close(name, got, expected):
    """Equal within TOLERANCE of the values' scale (fp32 sums taken in another order, values up to ~10)."""
    diff, scale = np.abs(got - expected).max(), max(1.0, np.abs(expected).max())
    assert diff <= TOLERANCE * scale, f"{name}: max abs diff {diff} at scale {scale}"


def _assert_matches_transformers(run, out, architecture, auto_class=transformers.AutoModelForPreTraining,
                                 texts=TEXTS, second=SECOND):
    """AutoTokenizer's ids are ours, and `auto_class`'s hidden states and logits the Keras model's."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    ours, keras_out = _keras_outputs(run, texts=texts, second=second)
    pair = (texts,) if second is None else (texts, second)
    batch = tokenizer(*pair, padding="max_length", max_length=SEQ_LEN, truncation=True, return_tensors="pt")
    np.testing.assert_array_equal(batch["input_ids"].numpy(), ours["token_ids"])
    np.testing.assert_array_equal(batch["attention_mask"].numpy(), ours["padding_mask"])
    if "segment_ids" in run.backbone.input:
        np.testing.assert_array_equal(batch["token_type_ids"].numpy(), ours["segment_ids"])

    model = auto_class.from_pretrained(str(out), attn_implementation="eager").eval()
    assert type(model).__name__ == architecture
    with torch.no_grad():
        hf_out = model(**batch, output_hidden_states=True)
    real = ours["padding_mask"].astype(bool)
    logits = getattr(hf_out, "prediction_logits", None)
    for name, expected, got in (("sequence", keras_out["sequence_output"], hf_out.hidden_states[-1]),
                                ("mlm", keras_out["mlm"], hf_out.logits if logits is None else logits)):
        _assert_close(name, got.numpy()[real], expected[real])
    if "nsp" in keras_out:
        _assert_close("nsp", hf_out.seq_relationship_logits.numpy(), keras_out["nsp"])
    assert np.abs(keras_out["mlm"]).max() > 1, "weights too small to tell a mapping mistake"


def test_bert_run_exports_to_transformers(tmp_path, capsys, bert_run):
    run_dir, run = bert_run
    out = tmp_path / "hf"
    printed = _export(run_dir, out, capsys)
    assert printed.startswith(f"BertForPreTraining written to {out}")
    _assert_matches_transformers(run, out, "BertForPreTraining")
    # An earlier export is replaced whole; a transformers folder bertology did not write is refused.
    (out / "stale.txt").write_text("from the earlier export")
    assert _export(run_dir, out, capsys).startswith("BertForPreTraining written")
    assert not (out / "stale.txt").exists() and json.loads((out / "bertology.json").read_text())["family"] == "bert"
    (out / "bertology.json").unlink()
    assert main(["export", str(run_dir), "--format", "hf", "--out", str(out)]) == 2
    assert "holds files that bertology did not write" in capsys.readouterr().err


def test_roberta_run_exports_to_transformers(tmp_path, capsys, sentences):
    """A byte-level BPE vocabulary with RoBERTa's specials: RobertaTokenizer's ids (the mask taking the
    spaces before it) and RobertaForMaskedLM's numbers, positions numbered after the padding id."""
    from keras_bertology.models.roberta.tokenizer import ROBERTA_SPECIAL_TOKENS
    from keras_bertology.tokenizers.byte_bpe_training import train_byte_level_bpe

    run_dir, out = tmp_path / "run", tmp_path / "hf"
    run = _native_run("roberta", "roberta-tiny", sentences, run_dir, vocab_size=400)
    assert run.tokenizer.vocabulary == train_byte_level_bpe(sentences, 400, ROBERTA_SPECIAL_TOKENS).vocabulary
    assert _export(run_dir, out, capsys).startswith(f"RobertaForMaskedLM written to {out}")
    texts = ["Now is the <mask> of our discontent.", "  To be,  or not\tto be? 東京!", "Hi."]
    _assert_matches_transformers(run, out, "RobertaForMaskedLM", transformers.AutoModelForMaskedLM, texts, None)


def test_spanbert_run_exports_as_bert_masked_lm_from_the_command_line(tmp_path, sentences, capsys, monkeypatch):
    """`bertology export` to the default --out, under the working folder: the cased vocabulary, the MLM head,
    and a note for the span boundary head, which transformers lacks."""
    run_dir = tmp_path / "spanbert_run"
    run = _native_run("spanbert", "spanbert-tiny", sentences, run_dir)
    monkeypatch.chdir(tmp_path)
    assert main(["export", str(run_dir), "--format", "hf"]) == 0
    out = tmp_path / "hf" / "spanbert_run"
    assert capsys.readouterr().out.splitlines() == [
        f"BertForMaskedLM written to {Path('hf') / 'spanbert_run'}",
        "dropped the pretraining head sbo_head: transformers' BertForMaskedLM has no such head",
    ]
    assert json.loads((out / "tokenizer_config.json").read_text())["do_lower_case"] is False
    _assert_matches_transformers(run, out, "BertForMaskedLM", transformers.AutoModelForMaskedLM)


def test_electra_run_exports_discriminator_and_generator(tmp_path, capsys, sentences):
    """The discriminator as ElectraForPreTraining, the generator (sharing its embeddings) as
    ElectraForMaskedLM in generator/: both compute what the Keras models do."""
    run_dir, out = tmp_path / "run", tmp_path / "hf"
    run = _native_run("electra", "electra-tiny", sentences, run_dir)
    printed = _export(run_dir, out, capsys)
    assert printed.splitlines()[0] == (f"ElectraForPreTraining written to {out}; "
                                       f"ElectraForMaskedLM in {out / 'generator'}")
    ours, _ = _keras_outputs(run, heads=False)
    inputs = {k: v for k, v in ours.items() if k in run.backbone.input}
    batch = transformers.AutoTokenizer.from_pretrained(str(out / "generator"))(
        TEXTS, SECOND, padding="max_length", max_length=SEQ_LEN, truncation=True, return_tensors="pt")
    np.testing.assert_array_equal(batch["input_ids"].numpy(), ours["token_ids"])
    real = ours["padding_mask"].astype(bool)

    detector = transformers.AutoModelForPreTraining.from_pretrained(str(out), attn_implementation="eager").eval()
    generator = transformers.AutoModelForMaskedLM.from_pretrained(str(out / "generator"),
                                                                  attn_implementation="eager").eval()
    assert (type(detector).__name__, type(generator).__name__) == ("ElectraForPreTraining", "ElectraForMaskedLM")
    with torch.no_grad():
        detected, generated = detector(**batch).logits.numpy(), generator(**batch).logits.numpy()
    keras_detected = run.pretrainer.get_layer("rtd_head")(run.backbone(inputs)["sequence_output"])
    _assert_close("rtd", detected[real], np.asarray(keras_detected)[..., 0][real])
    positions = np.tile(np.arange(SEQ_LEN, dtype="int32"), (len(TEXTS), 1))
    keras_generated = run.pretrainer.get_layer("mlm_head")(run.pretrainer.generator(inputs)["sequence_output"],
                                                           positions)
    _assert_close("generator mlm", generated[real], np.asarray(keras_generated)[real])
    assert np.abs(keras_generated).max() > 1, "weights too small to tell a mapping mistake"


def test_albert_run_exports_to_transformers(tmp_path, capsys, sentences):
    """ALBERT's own vocabulary (lowercased, accents stripped, quotes replaced, <unk> for unseen
    characters) gives AlbertTokenizer's ids; AlbertForPreTraining's numbers are the Keras model's."""
    run_dir, out = tmp_path / "run", tmp_path / "hf"
    run = _native_run("albert", "albert-tiny", sentences, run_dir, vocab_size=500)
    assert _export(run_dir, out, capsys).startswith(f"AlbertForPreTraining written to {out}")
    texts = ["``Now'' is the WINTER of our discontent.", *TEXTS[1:]]
    assert run.tokenizer.unk_id in run.tokenizer.tokenize(texts).flat_values.numpy()  # 東京 is unseen
    _assert_matches_transformers(run, out, "AlbertForPreTraining", texts=texts)


def test_xlnet_run_exports_to_transformers(tmp_path, capsys, sentences):
    """XLNet's own cased vocabulary gives XLNetTokenizer's ids, segments and left padding; XLNetModel's
    hidden states are the Keras backbone's."""
    run_dir, out = tmp_path / "run", tmp_path / "hf"
    run = _native_run("xlnet", "xlnet-tiny", sentences, run_dir, vocab_size=500)
    assert _export(run_dir, out, capsys).startswith(f"XLNetLMHeadModel written to {out}")
    ours, keras_out = _keras_outputs(run, heads=False)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    batch = tokenizer(TEXTS, SECOND, padding="max_length", max_length=SEQ_LEN, truncation=True,
                      return_tensors="pt")
    for theirs, mine in (("input_ids", "token_ids"), ("attention_mask", "padding_mask")):
        np.testing.assert_array_equal(batch[theirs].numpy(), ours[mine])
    real = ours["padding_mask"].astype(bool)
    # Padding's segment (3 in ours, 0 in transformers 5's) reaches no real token: padding keys are masked.
    np.testing.assert_array_equal(batch["token_type_ids"].numpy()[real], ours["segment_ids"][real])
    model = transformers.AutoModel.from_pretrained(str(out), attn_implementation="eager").eval()
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state.numpy()
    _assert_close("sequence", hidden[real], keras_out["sequence_output"][real])
    assert np.abs(keras_out["sequence_output"]).max() > 1, "weights too small to tell a mapping mistake"


def test_a_tokenizer_transformers_cannot_express_is_refused(tmp_path, capsys, sentences):
    """A SentencePiece model that falls back to bytes, which AlbertTokenizer cannot: one line, and no
    --out folder."""
    from keras_bertology.models.albert.tokenizer import ALBERT_SPECIAL_TOKENS
    from keras_bertology.tokenizers.sentencepiece import train_sentencepiece

    run_dir, out = tmp_path / "run", tmp_path / "hf"
    bytes_too = train_sentencepiece(sentences, 500, model_type="unigram", special_tokens=ALBERT_SPECIAL_TOKENS,
                                    lower_case=True, strip_accents=True, replace_quotes=True)
    _native_run("albert", "albert-tiny", sentences, run_dir, tokenizer=bytes_too)
    assert main(["export", str(run_dir), "--format", "hf", "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == ["bertology: error: the run's SentencePiece model falls back to bytes for unknown characters; "
                     "transformers' AlbertTokenizer maps them to the unknown token instead"]
    assert not out.exists()


def test_gpt2_round_trip(tmp_path, capsys):
    config = transformers.GPT2Config(vocab_size=99, n_positions=40, n_embd=48, n_layer=2, n_head=3, n_inner=80,
                                     initializer_range=0.2)
    hf = perturbed_hf_model(transformers.GPT2LMHeadModel, config)
    hf_dir, out, printed = _round_trip(tmp_path, capsys, hf)
    assert printed.startswith(f"GPT2LMHeadModel written to {out}")
    _assert_same_tensors(hf_dir, out)
    _assert_computes_like(hf, out, **dict(zip(("input_ids", "attention_mask"), _ids(99))))


def test_gpt_run_exports_to_transformers(tmp_path, capsys, sentences):
    """GPT's byte-level BPE read by GPT2Tokenizer to our ids, and GPT2LMHeadModel's logits ours."""
    import tensorflow as tf

    run_dir, out = tmp_path / "run", tmp_path / "hf"
    run = _native_run("gpt", "gpt-tiny", sentences, run_dir, vocab_size=400)
    assert _export(run_dir, out, capsys).startswith(f"GPT2LMHeadModel written to {out}")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    assert type(tokenizer).__name__ == "GPT2Tokenizer"
    texts = ["Now is the WINTER of our discontent.", "  To be,  or not\tto be? 東京!"]
    ours = run.tokenizer.tokenize(tf.constant(texts)).to_list()
    assert tokenizer(texts, add_special_tokens=False)["input_ids"] == ours
    ids = np.array([ours[0][:SEQ_LEN]], dtype="int32")
    logits = run.pretrainer({"token_ids": ids, "padding_mask": np.ones_like(ids)})["clm"]
    model = transformers.AutoModelForCausalLM.from_pretrained(str(out), attn_implementation="eager").eval()
    with torch.no_grad():
        expected = model(input_ids=torch.tensor(ids, dtype=torch.long)).logits.numpy()
    _assert_close("clm", expected, np.asarray(logits))
    assert np.abs(expected).max() > 1, "weights too small to tell a mapping mistake"


def test_xlnet_round_trip(tmp_path, capsys, sentences):
    """Per-layer relative biases, and a cased SentencePiece model read back by XLNetTokenizer."""
    from keras_bertology.models.xlnet.tokenizer import XLNET_SPECIAL_TOKENS
    from keras_bertology.tokenizers.sentencepiece import train_sentencepiece

    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    trained = train_sentencepiece(sentences, 300, model_type="unigram", byte_fallback=False,
                                  special_tokens=XLNET_SPECIAL_TOKENS)
    (hf_dir / "spiece.model").write_bytes(trained.model_proto)
    tokenizer = transformers.XLNetTokenizer.from_pretrained(str(hf_dir))
    config = transformers.XLNetConfig(vocab_size=trained.vocab_size, d_model=48, n_layer=2, n_head=3, d_inner=80,
                                      initializer_range=0.2)
    hf = perturbed_hf_model(transformers.XLNetLMHeadModel, config)
    with torch.no_grad():  # random init gives every layer the same relative biases: make them differ
        for name, tensor in hf.named_parameters():
            if name.endswith(("r_w_bias", "r_r_bias", "r_s_bias")):
                tensor.normal_(0, 0.2)
    hf_dir, out, printed = _round_trip(tmp_path, capsys, hf)
    assert printed.startswith(f"XLNetLMHeadModel written to {out}")
    _assert_same_tensors(hf_dir, out)
    _assert_computes_like(hf, out, **dict(zip(("input_ids", "attention_mask"), _ids(trained.vocab_size))))
    texts = ["``Café'' is NOT   naïve, Ünïcödé!", "Now is the winter of our discontent.", "Hi."]
    exported = transformers.AutoTokenizer.from_pretrained(str(out))
    assert type(exported).__name__ == "XLNetTokenizer"
    assert exported(texts, padding="longest")["input_ids"] == tokenizer(texts, padding="longest")["input_ids"]


@pytest.mark.parametrize("options", [dict(lower_case=True, strip_accents=False, chinese_chars=False),
                                     dict(lower_case=False, strip_accents=True, chinese_chars=True)])
def test_wordpiece_options_off_bert_defaults_reach_transformers(tmp_path, bert_run, options):
    """Accents kept while lower-casing, stripped while cased, CJK left in words: BertTokenizer is told each."""
    import tensorflow as tf

    from keras_bertology.convert.hf_export import save_hf_tokenizer
    from keras_bertology.tokenizers.wordpiece import WordPieceTokenizer

    vocabulary = bert_run[1].tokenizer.vocabulary + ["café", "naïve", "cafe", "東京"]
    ours = WordPieceTokenizer(vocabulary, **options)
    save_hf_tokenizer(ours, tmp_path, {"wordpiece": "BertTokenizer"}, SEQ_LEN)
    texts = TEXTS + ["CAFÉ café Cafe naïve 東京東京"]
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path))(texts, add_special_tokens=False)
    assert theirs["input_ids"] == ours.tokenize(tf.constant(texts)).to_list()


T5_SMALL = dict(vocab_size=99, d_model=32, d_kv=12, d_ff=40, num_heads=4, num_layers=2, num_decoder_layers=3,
                relative_attention_num_buckets=6, relative_attention_max_distance=9, dropout_rate=0.0)


@pytest.mark.parametrize("cls_name,options", [
    ("T5ForConditionalGeneration", {}),  # v1.0: ReLU, the head the token table, states scaled
    ("T5ForConditionalGeneration", {"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False}),  # unscaled
    ("T5EncoderModel", {"feed_forward_proj": "gated-relu"})])
def test_t5_round_trip(tmp_path, capsys, cls_name, options):
    hf = perturbed_hf_model(getattr(transformers, cls_name), transformers.T5Config(**T5_SMALL, **options))
    hf_dir, out, printed = _round_trip(tmp_path, capsys, hf)
    assert printed.startswith(f"{cls_name} written to {out}")
    _assert_same_tensors(hf_dir, out)
    ids, mask = _ids(99)
    decoder = {} if cls_name == "T5EncoderModel" else {"decoder_input_ids": ids[:, :6]}
    _assert_computes_like(hf, out, input_ids=ids, attention_mask=mask, **decoder)


@pytest.mark.parametrize("tie,scale", [(True, True), (False, False), (False, True)])
def test_t5_run_exports_to_transformers(tmp_path, capsys, sentences, tie, scale):
    """Our T5 vocabulary (sentinels appended to a SentencePiece model) read by T5Tokenizer to our ids, and
    T5ForConditionalGeneration's logits ours, for a head tied or its own, scaled or not."""
    import tensorflow as tf

    from keras_bertology.models import FAMILIES
    from keras_bertology.models.t5.pretrainer import T5Pretrainer

    keras.utils.set_random_seed(0)
    family = FAMILIES["t5"]
    tokenizer = family.train_tokenizer(sentences, 400)
    backbone = family.backbone_cls(**family.backbone_config("t5-tiny", vocab_size=tokenizer.vocab_size))
    pretrainer = T5Pretrainer(backbone, tie_embeddings=tie, scale_logits=scale)
    _perturb(pretrainer, scale=0.05)
    run_dir, out = tmp_path / "run", tmp_path / "hf"
    save_run_model(run_dir, RunModel("t5", backbone, tokenizer, SEQ_LEN, pretrainer=pretrainer, preset="t5-tiny"))
    assert _export(run_dir, out, capsys).startswith(f"T5ForConditionalGeneration written to {out}")
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    # Sentinels inside words and in a row: transformers encodes the text after each as a text of its own.
    texts = ["Now is the <extra_id_0> of our <extra_id_1>.", "To be,  or not to be? 東京!", "<extra_id_99> Hi.",
             "a<extra_id_0>b <extra_id_1><extra_id_2><extra_id_3>x  y"]
    ours = tokenizer.tokenize(tf.constant(texts)).to_list()
    assert hf_tokenizer(texts, add_special_tokens=False)["input_ids"] == ours
    assert hf_tokenizer.convert_tokens_to_ids("<extra_id_0>") == tokenizer.vocab_size - 1
    ids = np.array([row[:8] + [tokenizer.sep_id] * (9 - len(row[:8])) for row in ours], dtype="int32")
    decoder_ids = np.pad(ids[:, :5], [(0, 0), (1, 0)])
    logits = pretrainer({"token_ids": ids, "padding_mask": np.ones_like(ids), "decoder_token_ids": decoder_ids,
                         "decoder_padding_mask": np.ones_like(decoder_ids)})["spans"]
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(out), attn_implementation="eager").eval()
    with torch.no_grad():
        expected = model(input_ids=torch.tensor(ids, dtype=torch.long),
                         decoder_input_ids=torch.tensor(decoder_ids, dtype=torch.long)).logits.numpy()
    _assert_close("spans", expected, np.asarray(logits))
    assert np.abs(expected).max() > 1, "weights too small to tell a mapping mistake"


DEBERTA_SMALL = dict(vocab_size=99, hidden_size=48, num_hidden_layers=2, num_attention_heads=3, intermediate_size=80,
                     max_position_embeddings=40, initializer_range=0.2, relative_attention=True, type_vocab_size=0,
                     position_biased_input=False, layer_norm_eps=1e-7)


@pytest.mark.parametrize("cls_name,config_name,options", [
    ("DebertaForMaskedLM", "DebertaConfig", dict(pos_att_type="c2p|p2c", max_relative_positions=7)),
    ("DebertaModel", "DebertaConfig", dict(pos_att_type="p2c", position_biased_input=True, type_vocab_size=2)),
    ("DebertaV2ForMaskedLM", "DebertaV2Config", dict(pos_att_type="p2c|c2p", share_att_key=True, position_buckets=8,
                                                     max_relative_positions=12, norm_rel_ebd="layer_norm",
                                                     conv_kernel_size=3, embedding_size=32)),
    ("DebertaV2Model", "DebertaV2Config", dict(pos_att_type=["c2p"], max_relative_positions=9))])
def test_deberta_round_trip(tmp_path, capsys, cls_name, config_name, options):
    config = getattr(transformers, config_name)(**{**DEBERTA_SMALL, **options})
    hf = perturbed_hf_model(getattr(transformers, cls_name), config)
    hf_dir, out, printed = _round_trip(tmp_path, capsys, hf)
    assert printed.startswith(f"{cls_name} written to {out}")
    _assert_same_tensors(hf_dir, out)
    ids, mask = _ids(99)
    segments = {"token_type_ids": torch.zeros_like(ids)} if config.type_vocab_size else {}
    _assert_computes_like(hf, out, input_ids=ids, attention_mask=mask, **segments)


def test_deberta_run_exports_to_transformers(tmp_path, capsys, sentences):
    """DeBERTa's byte-level BPE read by DebertaTokenizer to our ids; DebertaForMaskedLM's logits those of our
    head on the last layer (the EMD, which transformers lacks, dropped with a note)."""
    import tensorflow as tf

    run_dir, out = tmp_path / "run", tmp_path / "hf"
    run = _native_run("deberta", "deberta-tiny", sentences, run_dir, vocab_size=400)
    printed = _export(run_dir, out, capsys)
    assert printed.startswith(f"DebertaForMaskedLM written to {out}") and "enhanced mask decoder" in printed
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    assert type(tokenizer).__name__ == "DebertaTokenizer"
    ours = run.tokenizer.tokenize(tf.constant(TEXTS)).to_list()
    assert tokenizer(TEXTS, add_special_tokens=False)["input_ids"] == ours
    from keras_bertology.models import FAMILIES
    from keras_bertology.models.deberta import DebertaPretrainer

    # One text as DebertaTokenizer lays it out, [CLS] A [SEP]. (Its pairs read [CLS] A [SEP] [SEP] B [SEP];
    # ours, as the original's, [CLS] A [SEP] B [SEP]: docs/families/deberta.md.)
    first = [TEXTS[0][:20], TEXTS[2]]
    packed = FAMILIES["deberta"].pack_text(run.tokenizer, SEQ_LEN, tf.constant(first))
    real = packed["padding_mask"].numpy().astype(bool)
    assert [row[keep].tolist() for row, keep in zip(packed["token_ids"].numpy(), real)] == \
        tokenizer(first)["input_ids"]

    back, _ = convert_hf_checkpoint(out)  # DebertaTokenizer's files read back with DeBERTa's roles
    assert back.tokenizer.tokenize(tf.constant(TEXTS)).to_list() == ours
    assert [getattr(back.tokenizer, f"{role}_id") for role in ("cls", "sep", "pad", "unk", "mask")] == \
        [getattr(run.tokenizer, f"{role}_id") for role in ("cls", "sep", "pad", "unk", "mask")]

    plain = DebertaPretrainer(run.backbone, enhanced_mask_decoder=False)
    plain.get_layer("mlm_head").set_weights(run.pretrainer.get_layer("mlm_head").get_weights())
    ids = np.array([ours[0][:SEQ_LEN]], dtype="int32")
    positions = np.arange(ids.shape[1], dtype="int32")[None]
    logits = plain({"token_ids": ids, "padding_mask": np.ones_like(ids), "mask_positions": positions})["mlm"]
    model = transformers.AutoModelForMaskedLM.from_pretrained(str(out)).eval()
    with torch.no_grad():
        expected = model(input_ids=torch.tensor(ids, dtype=torch.long)).logits.numpy()
    _assert_close("mlm", expected, np.asarray(logits))
    assert np.abs(expected).max() > 1, "weights too small to tell a mapping mistake"


# The families whose own layout transformers' tokenizer class does not follow, said in their pages: GPT's
# text opens and closes with <|endoftext|> (GPT2Tokenizer adds nothing), and RobertaTokenizer's and
# DebertaTokenizer's pairs read <s> A </s> </s> B </s> where RoBERTa's and DeBERTa's own have one </s>.
OWN_LAYOUTS = {"gpt": ("single", "pair"), "roberta": ("pair",), "deberta": ("pair",)}


@pytest.mark.parametrize("family_name", sorted(name for name, family in __import__("keras_bertology.models").models
                                               .FAMILIES.items() if family.conversion.hf_exporter_path))
def test_transformers_auto_tokenizer_reads_every_familys_export_to_our_ids(tmp_path, capsys, sentences, family_name):
    """`export --format hf` of a run of each family (a tiny encoder, no heads): AutoTokenizer loads the folder
    and gives our tokens, and lays a text and a pair out as our packing does (ModernBERT's through the
    tokenizer.json transformers needs for it)."""
    import tensorflow as tf

    from keras_bertology.models import FAMILIES

    family = FAMILIES[family_name]
    preset = next(iter(family.presets))
    tokenizer = family.train_tokenizer(sentences, 400)
    config = family.backbone_config(preset, vocab_size=tokenizer.vocab_size)
    backbone = family.backbone_cls(**dict(config, **{"max_positions": SEQ_LEN} if "max_positions" in config else {}))
    run_dir, out = tmp_path / "run", tmp_path / "hf"
    save_run_model(run_dir, RunModel(family_name, backbone, tokenizer, SEQ_LEN, preset=preset))
    _export(run_dir, out, capsys)
    theirs = transformers.AutoTokenizer.from_pretrained(str(out))
    # (No tab: transformers 5's BigBirdTokenizer reads one as <unk>, where SentencePiece reads a space.)
    texts, second = ["Now is the WINTER of  our discontent.", "  To be,  or not to be? 東京!"], ["Hi.", "x y"]
    assert theirs(texts, add_special_tokens=False)["input_ids"] == tokenizer.tokenize(tf.constant(texts)).to_list()
    for kind, pair in (("single", (texts,)), ("pair", (texts, second))):
        if kind in OWN_LAYOUTS.get(family_name, ()):
            continue
        packed = family.pack_text(tokenizer, SEQ_LEN, *map(tf.constant, pair))
        real = packed["padding_mask"].numpy().astype(bool)
        ours = [row[keep].tolist() for row, keep in zip(packed["token_ids"].numpy(), real)]
        assert theirs(*pair, truncation=True, max_length=SEQ_LEN)["input_ids"] == ours, kind
