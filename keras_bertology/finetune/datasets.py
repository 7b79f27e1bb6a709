"""Labeled data for fine-tuning: three built-in tasks and the user's own folders.

`load_task(name_or_path)` returns a `TaskData` whose train, dev and test splits
hold examples of one kind (finetune/example_kinds.py says what each kind's
examples and labels are). A built-in task (finetune/builtin_tasks.py) is read
from the data files of a PyPI package; a folder (finetune/user_folders.py)
holds `train.<ext>`, `test.<ext>` and optionally `dev.<ext>` in one of the
formats of finetune/data_files.py.

`max_examples` keeps the first N examples of each split after splitting, for
quick runs. `sample_training_examples` draws N labeled examples from train
alone (a learning curve over label counts), the same N for every model given
the same seed, so that models can be compared example for example.

Every problem the data can cause raises `DataError` with one message naming
the file, the line where there is one, and how to fix it. These modules are
pure Python (no TensorFlow), so they are cheap to import.
"""

import dataclasses
import os
import random
from pathlib import Path

from keras_bertology.errors import DataError
from keras_bertology.finetune.builtin_tasks import BUILTIN_LOADERS, BUILTIN_TASKS
from keras_bertology.finetune.example_kinds import EXAMPLE_KINDS
from keras_bertology.finetune.task_data import TaskData
from keras_bertology.finetune.user_folders import load_folder


def load_task(name_or_path, max_examples=None) -> TaskData:
    """A built-in task by name, or the data folder at `name_or_path`; keep the first `max_examples` per split.

    A built-in name wins over a folder of the same name; write `./bbc-news` for the folder.
    """
    name = os.fspath(name_or_path)
    if name in BUILTIN_LOADERS:
        task = BUILTIN_LOADERS[name]()
    elif os.path.isdir(name):
        task = load_folder(Path(name))
    elif os.path.exists(name):
        raise DataError(f"{name} is a file: pass the folder that holds train.<ext> and test.<ext>, or a built-in "
                        f"task ({', '.join(BUILTIN_TASKS)})")
    else:
        raise DataError(f"{name!r} is neither a built-in task ({', '.join(BUILTIN_TASKS)}) nor an existing folder")
    if max_examples is None:
        return task
    return _cut(task, {split: examples[:max_examples] for split, examples in task.splits.items()},
                f"first {max_examples} examples of each split kept",
                f"the training split of {task.name} cut to its first {max_examples} (--max-examples {max_examples})")


def sample_training_examples(task, count, seed) -> TaskData:
    """`task` with `count` training examples drawn by `seed` (dev and test untouched), as its kind draws
    (`ExampleKind.draw`: classification covers every class first, other kinds draw uniformly).

    A draw depends only on the task, `count` and `seed`, never on the model: every model fine-tuned with
    one seed learns from the same examples.
    """
    train = task.splits["train"]
    if not 1 <= count <= len(train):
        raise DataError(f"{task.name} has {len(train):,} training examples: cannot draw {count:,}")
    chosen = EXAMPLE_KINDS[task.kind].draw(train, count, random.Random(f"{task.name}/{count}/{seed}"))
    return _cut(task, {**task.splits, "train": chosen}, f"{count:,} training examples drawn with seed {seed}",
                f"the training split of {task.name} drawn down to {count:,} (--train-examples {count})")


def _cut(task, splits, how, which):
    """`task` with fewer examples (`splits`, kept `how`), whose training examples (`which`, for the message)
    must still hold two classes, as its files had to: one would train a model that scores perfectly."""
    kind = EXAMPLE_KINDS[task.kind]
    kind.check_learnable(tuple(sorted(kind.label_set(splits["train"]))), which)
    return dataclasses.replace(task, splits=splits, source=f"{task.source}; {how}")


def case_variants(labels) -> list:
    """The groups of `labels` that differ only in case ('pos', 'Pos', 'POS'): each is a class of its own,
    which is seldom what was meant."""
    groups = {}
    for label in labels:
        groups.setdefault(label.casefold(), []).append(label)
    return [group for group in groups.values() if len(group) > 1]
