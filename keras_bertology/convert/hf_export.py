"""Export a run folder as a Hugging Face model folder: the reverse of `convert_hf_checkpoint`.

    DIR/
      config.json          the family's transformers config, with `architectures`
      model.safetensors    float32 tensors under transformers' names
      vocab.txt | spiece.model | spm.model | vocab.json + merges.txt, tokenizer_config.json
      bertology.json       what was exported from where (marks the folder as ours)
      generator/           ELECTRA's generator, a model folder of its own

The family's exporter (`Conversion.hf_exporter_path`) maps the tensors and
names the transformers class; the tokenizer's files are written by the format a
family declares for the tokenizer class (`convert.hf_tokenizer.HFTokenizerFormat`),
with the writers of this module; this module writes the files into a staging
folder that replaces DIR whole once complete (`atomic.atomic_directory`).
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

from keras_bertology.errors import CheckpointError

MARKER_FILE = "bertology.json"


@dataclass
class HFExport:
    """What a family's exporter gives: one transformers model folder's content.

    Attributes:
        architecture: the transformers class (`BertForPreTraining`, ...), written as `architectures`.
        config: config.json's keys, `model_type` included.
        tensors: transformers tensor name -> float32 NumPy array.
        tokenizer_classes: our tokenizer kind (`type_name`) -> the transformers tokenizer class that
            reads it back (tokenizer_config.json's `tokenizer_class`); other kinds are refused.
        notes: lines for the user (what was dropped or left to transformers).
        parts: sub-folder name -> HFExport of another model of the run (ELECTRA's generator).
    """

    architecture: str
    config: dict
    tensors: dict
    tokenizer_classes: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    parts: dict = field(default_factory=dict)


def export_hf(run_dir, out):
    """Write the run in `run_dir` as a Hugging Face folder `out`; returns the `HFExport` written."""
    from keras_bertology.atomic import atomic_directory
    from keras_bertology.models import FAMILIES, get_family
    from keras_bertology.runs import load_run_model

    run = load_run_model(run_dir)
    family = get_family(run.family)
    if family.conversion.hf_exporter_path is None:
        exporting = ", ".join(name for name, other in FAMILIES.items() if other.conversion.hf_exporter_path)
        raise CheckpointError(f"--format hf: transformers has no model for the {run.family} family; "
                              f"families that export: {exporting}")
    exported = family.export_hf(run)
    if run.tokenizer is None:
        exported.notes.append("the run has no tokenizer: no tokenizer files were written")
    with atomic_directory(out) as staging:
        _write_model(staging, exported, run)
        for name, part in exported.parts.items():
            _write_model(staging / name, part, run)
        marker = {"format": "hf", "run": str(Path(run_dir).resolve()), "family": run.family,
                  "architecture": exported.architecture,
                  "parts": {name: part.architecture for name, part in exported.parts.items()}}
        (staging / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    return exported


def _write_model(folder, exported, run):
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    config = {"architectures": [exported.architecture], **exported.config}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    save_file(exported.tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    if run.tokenizer is not None:
        from keras_bertology.models import get_family

        save_hf_tokenizer(run.tokenizer, folder, exported.tokenizer_classes, run.seq_len,
                          segments="segment_ids" in run.backbone.input,
                          layout=get_family(run.family).text_layout(run.tokenizer))


def find_layer(model, name):
    """`model`'s layer `name`, or None (also for no model)."""
    if model is None:
        return None
    return next((layer for layer in model.layers if layer.name == name), None)


def dropped_heads_note(pretrainer, exported, architecture):
    """Lines naming the pretrainer's heads (layers ending in `_head`) not among `exported`."""
    if pretrainer is None:
        return []
    dropped = [layer.name for layer in pretrainer.layers if layer.name.endswith("_head") and layer.name not in exported]
    return [f"dropped the pretraining head {name}: transformers' {architecture} has no such head" for name in dropped]


# Tokenizer files: the family's format writes them (`convert.hf_tokenizer.HFTokenizerFormat.write`) with the
# writers below, one per kind of vocabulary file. ------------------------------------------------------------


def save_hf_tokenizer(tokenizer, folder, tokenizer_classes, seq_len, segments=True, layout=None):
    """The files the transformers tokenizer class of `tokenizer`'s kind (`tokenizer_classes`) reads to
    give the ids `tokenizer` gives, written by the format a family declares for that class; a
    CheckpointError where that class cannot express its options. With `segments` (a model with segment
    embeddings) the tokenizer returns token_type_ids too, which some classes (ALBERT's, XLNet's) leave out
    by default: the model would then read every pair as one segment. `layout` (a `Tokenizer.layout`: the
    run's) is for a class that runs tokenizer.json as written, where the post-processor places the specials."""
    from keras_bertology.convert.hf_tokenizer import format_for_class

    kind = tokenizer.type_name
    if kind not in tokenizer_classes:
        wanted = ", ".join(f"{theirs} ({ours})" for ours, theirs in tokenizer_classes.items()) or "none"
        raise CheckpointError(f"the run's {kind} tokenizer has no transformers form for this model; its "
                              f"tokenizers: {wanted}")
    tokenizer_class = tokenizer_classes[kind]
    form = format_for_class(tokenizer_class)
    if form.write is None:
        raise CheckpointError(f"transformers' {tokenizer_class} is read, not written")
    config = form.write(tokenizer, Path(folder), tokenizer_class, layout)
    inputs = ["input_ids", "token_type_ids", "attention_mask"] if segments else ["input_ids", "attention_mask"]
    config = {"tokenizer_class": tokenizer_class, "model_max_length": seq_len, "model_input_names": inputs,
              **config}
    (Path(folder) / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def special_entries(tokenizer, roles):
    """`{role}_token` entries of tokenizer_config.json for the roles the tokenizer has."""
    tokens = tokenizer.vocabulary
    return {f"{role}_token": tokens[getattr(tokenizer, f"{role}_id")] for role in roles if tokenizer.has_role(role)}


ALL_ROLES = ("unk", "sep", "pad", "cls", "mask")


def write_wordpiece(tokenizer, folder, tokenizer_class, layout=None):
    """vocab.txt, and the BERT normaliser's options."""
    if not tokenizer.options["clean_text"]:
        raise CheckpointError(f"the run's WordPiece tokenizer keeps control characters (clean_text off); "
                              f"transformers' {tokenizer_class} always deletes them")
    (folder / "vocab.txt").write_text("".join(token + "\n" for token in tokenizer.vocabulary), encoding="utf-8")
    return dict(do_lower_case=tokenizer.lower_case, strip_accents=tokenizer.options["strip_accents"],
                tokenize_chinese_chars=tokenizer.options["chinese_chars"], **special_entries(tokenizer, ALL_ROLES))


def check_unknown_characters(tokenizer, tokenizer_class):
    """A CheckpointError where the SentencePiece model falls back to bytes, which transformers' classes do not."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    if any(processor.is_byte(i) for i in range(processor.get_piece_size())):
        raise CheckpointError(f"the run's SentencePiece model falls back to bytes for unknown characters; "
                              f"transformers' {tokenizer_class} maps them to the unknown token instead")


def refuse_preprocessing(tokenizer, tokenizer_class, refused):
    """A CheckpointError where the tokenizer applies any of the `refused` preprocessing steps."""
    changed = sorted(name for name in refused if tokenizer.preprocessing[name])
    if changed:
        raise CheckpointError(f"the run's SentencePiece tokenizer preprocesses text ({', '.join(changed)}); "
                              f"transformers' {tokenizer_class} passes it to SentencePiece unchanged")


def write_unchanged_text_model(tokenizer, path, tokenizer_class, refused):
    """The model written to `path` for a class that preprocesses none of `refused`, and its specials, the
    beginning and end tokens being [CLS] and [SEP] (the model has no others)."""
    check_unknown_characters(tokenizer, tokenizer_class)
    refuse_preprocessing(tokenizer, tokenizer_class, refused)
    path.write_bytes(tokenizer.model_proto)
    specials = special_entries(tokenizer, ALL_ROLES)
    return dict(bos_token=specials["cls_token"], eos_token=specials["sep_token"], **specials)


def write_byte_bpe(tokenizer, folder, tokenizer_class, layout=None):
    """vocab.json + merges.txt, and the specials (the mask taking the spaces before it as `mask_lstrip` says)."""
    tokenizer.save(folder)  # vocab.json + merges.txt, and our own tokenizer.json, which transformers must not read
    (folder / "tokenizer.json").unlink()
    config = dict(add_prefix_space=False, **special_entries(tokenizer, ALL_ROLES))
    if tokenizer.has_role("cls"):
        config.update(bos_token=config["cls_token"], eos_token=config["sep_token"])
    if tokenizer.has_role("mask"):
        config["mask_token"] = {"content": config["mask_token"], "lstrip": tokenizer.mask_lstrip, "rstrip": False,
                                "normalized": False, "single_word": False, "special": True,
                                "__type": "AddedToken"}
    return config


def write_tokenizer_json(tokenizer, folder, tokenizer_class, layout):
    """A byte-level BPE for a class that runs tokenizer.json as written: `write_byte_bpe`'s files, and
    tokenizer.json with the specials placed as `layout` says."""
    if tokenizer.type_name != "byte_bpe" or layout is None:
        raise CheckpointError(f"the run's {tokenizer.type_name} tokenizer has no tokenizer.json form")
    config = write_byte_bpe(tokenizer, folder, tokenizer_class)
    spec = _byte_bpe_tokenizer_json(tokenizer, layout)
    (folder / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    return config


def _byte_bpe_tokenizer_json(tokenizer, layout):
    """tokenizer.json of a byte-level BPE: the model, GPT-2's byte-level pre-tokenizer and decoder, the
    specials as added tokens (the mask taking the spaces before it as `mask_lstrip` says), and `layout`
    as a TemplateProcessing post-processor."""
    from keras_bertology.data.packing import TEXT_PIECES

    tokens = tokenizer.vocabulary
    vocab = {token: index for index, token in enumerate(tokens)}
    mask_id = tokenizer.optional_id("mask")
    added = [{"id": index, "content": tokens[index], "single_word": False, "normalized": False, "special": True,
              "lstrip": index == mask_id and tokenizer.mask_lstrip, "rstrip": False}
             for index in tokenizer.special_ids]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}

    def template(kind):
        return [{"Sequence": {"id": piece[1:], "type_id": segment}} if piece in TEXT_PIECES
                else {"SpecialToken": {"id": piece, "type_id": segment}} for piece, segment in layout[kind]]

    placed = {piece for pieces in layout.values() for piece, _ in pieces if piece not in TEXT_PIECES}
    post_processor = {"type": "TemplateProcessing", "single": template("single"), "pair": template("pair"),
                      "special_tokens": {piece: {"id": piece, "ids": [vocab[piece]], "tokens": [piece]}
                                         for piece in sorted(placed)}}
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
             "vocab": vocab, "merges": [f"{left} {right}" for left, right in tokenizer.merges]}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": byte_level, "post_processor": post_processor, "decoder": byte_level, "model": model}
