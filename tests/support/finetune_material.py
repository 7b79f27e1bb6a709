"""Fine-tuning's test material: a small random run folder and user task folders with learnable rules (the
fine-tuning, flag-range and ELMo tests share them)."""

import json
import textwrap

import numpy as np

from keras_bertology.models import FAMILIES
from keras_bertology.runs import RunModel, save_run_model

SMALL = dict(num_layers=2, num_heads=2, hidden_size=32, intermediate_size=64)


def make_run(path, family_name, sentences, seq_len=32):
    """A run folder like `bertology pretrain` writes, with a small random encoder."""
    family = FAMILIES[family_name]
    tokenizer = family.train_tokenizer(sentences, 600)
    preset = next(iter(family.presets))
    config = dict(family.presets[preset]["config"], vocab_size=tokenizer.vocab_size, **family.sized_config(SMALL))
    if "embedding_size" in config:
        config["embedding_size"] = 16
    save_run_model(path, RunModel(family_name, family.backbone_cls(**config), tokenizer, seq_len, None, preset))
    return path


def write_file(path, name, text):
    path.mkdir(parents=True, exist_ok=True)
    (path / name).write_text(textwrap.dedent(text).lstrip())


def user_folders(root):
    """A TSV pair task, a CoNLL tagging task and a JSONL span task, each with a rule the model can learn."""
    rng = np.random.default_rng(0)
    rows = ["label\ttext_b\ttext\tnote"]
    filler = ["art", "thou", "spain", "plain", "Romeo", "falls"]
    for _ in range(240):
        label = rng.choice(["wet", "dry"])
        weather = rng.choice(["rain", "storm", "flood"] if label == "wet" else ["sun", "heat", "drought"])
        rows.append(f"{label}\t{' '.join(rng.choice(filler, 3))}\tthe {weather} {' '.join(rng.choice(filler, 3))}\tx")
    for split, part in (("train", rows[:161]), ("dev", rows[:1] + rows[161:201]), ("test", rows[:1] + rows[201:])):
        write_file(root / "pairs", f"{split}.tsv", "\n".join(part) + "\n")
    sentences = []
    for _ in range(200):
        words = list(rng.choice(["the", "rain", "falls", "on", "Romeo", "Juliet"], 6))
        tags = ["B-person" if w in ("Romeo", "Juliet") else "O" for w in words]
        sentences.append("\n".join(f"{w}\t{t}" for w, t in zip(words, tags)))
    write_file(root / "tags", "train.conll", "\n\n".join(sentences[:160]) + "\n")
    write_file(root / "tags", "test.conll", "\n\n".join(sentences[160:]) + "\n")
    spans = []
    for _ in range(200):
        name = rng.choice(["Romeo", "Juliet", "Tybalt"])
        context = f"the rain falls on {name} in spain"
        spans.append(json.dumps({"question": "on whom does the rain fall", "context": context,
                                 "answers": [{"text": name, "answer_start": context.index(name)}]}))
    write_file(root / "spans", "train.jsonl", "\n".join(spans[:160]) + "\n")
    write_file(root / "spans", "test.jsonl", "\n".join(spans[160:]) + "\n")
    return {"pairs": root / "pairs", "tags": root / "tags", "spans": root / "spans"}
