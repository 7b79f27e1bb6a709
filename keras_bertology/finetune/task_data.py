"""`TaskData`: a fine-tuning task's kind, labels and train/dev/test examples, as every source of tasks gives it."""

from dataclasses import dataclass

SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class TaskData:
    """A fine-tuning task: its kind (a name of `example_kinds.EXAMPLE_KINDS`, which says what its examples
    and labels look like), label set and train/dev/test examples (`datasets.load_task`)."""

    name: str
    kind: str
    labels: tuple
    pairs: bool
    splits: dict
    source: str
    untrained_labels: tuple = ()  # dev/test labels absent from the train split (carved into dev)
    text_of: str | None = None  # the task whose training text this one's is, split alike (bbc-names: bbc-news)


def tenth(count) -> int:
    """10% of `count`, halves rounded up (integer arithmetic, so no float surprises at x.5)."""
    return (count + 5) // 10


def split_counts(splits) -> str:
    """"train N, dev N, test N", for a task's `source`."""
    return ", ".join(f"{split} {len(splits[split]):,}" for split in SPLITS)
