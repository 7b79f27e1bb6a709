"""Every refused input: one `bertology: error:` line, exit status 2, no traceback, nothing left behind.

Each row is (name, argv, text the error must contain). Paths are built in a
temporary folder; `{tmp}` in an argument is replaced by it, and `{hf}`,
`{run}` by a valid Hugging Face checkpoint folder and a valid run folder, so
that each row breaks exactly one thing.
"""

import json
import os
import shutil

import pytest
import transformers

from keras_bertology.cli import main

TEXT = "It was a dark night. The wind blew hard.\n\nA second document begins. It ends here.\n"


def _write(tmp, name, data):
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def _corpora(tmp):
    """Bad corpora by name, plus a good one."""
    _write(tmp, "good.txt", TEXT * 20)
    _write(tmp, "empty.txt", b"")
    _write(tmp, "blank.txt", "  \n\n\t \n")
    _write(tmp, "binary.bin", bytes(range(256)) * 4)
    _write(tmp, "nul.txt", "text\x00with a NUL byte.\n")
    _write(tmp, "latin1.txt", "caf\xe9 au lait.\n".encode("latin-1"))
    _write(tmp, "utf16.txt", TEXT.encode("utf-16"))
    _write(tmp, "utf16le.txt", TEXT.encode("utf-16-le"))  # no byte-order mark: NUL bytes, yet not binary
    _write(tmp, "utf16be.txt", TEXT.encode("utf-16-be"))
    _write(tmp, "utf32le.txt", TEXT.encode("utf-32-le"))
    os.mkfifo(tmp / "fifo")  # no writer: reading it would hang
    _write(tmp, "dangling/good.txt", TEXT * 20)
    os.symlink(tmp / "moved_away.txt", tmp / "dangling" / "gone.txt")
    _write(tmp, "onedoc.txt", "One document. Two sentences here. And a third.\n" * 30)
    _write(tmp, "onesentence.txt", "\n\n".join(f"Document number {i} has one sentence" for i in range(50)))
    (tmp / "empty_folder").mkdir()
    _write(tmp, "hidden_only/.secret.txt", TEXT)
    _write(tmp, "a_file", "I am a file, not a folder.")
    for folder, train in [("header_twice", "text\tlabel\na\tx\ntext\tlabel\nb\ty\n"),
                          ("one_class", "text\tlabel\na\tx\nb\tx\n"),
                          ("case_labels", "text\tlabel\na\tpos\nb\tPos\nc\tPOS\nd\tneg\n")]:
        _write(tmp, f"{folder}/train.tsv", train)
        _write(tmp, f"{folder}/test.tsv", "text\tlabel\nc\tx\n" if folder != "case_labels" else
               "text\tlabel\nc\tpos\n")


def _hf_checkpoint(tmp):
    """A tiny BertModel as transformers saves it, and broken copies of it."""
    config = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=24, max_position_embeddings=32)
    transformers.BertModel(config).save_pretrained(str(tmp / "hf"))
    weights = (tmp / "hf" / "model.safetensors").read_bytes()

    def variant(name, config_text=None, weights_bytes=weights, extra=None):
        folder = tmp / name
        shutil.copytree(tmp / "hf", folder)
        if config_text is not None:
            (folder / "config.json").write_text(config_text)
        if weights_bytes is None:
            (folder / "model.safetensors").unlink()
        else:
            (folder / "model.safetensors").write_bytes(weights_bytes)
        for file_name, content in (extra or {}).items():
            (folder / file_name).write_text(content)

    good = json.loads((tmp / "hf" / "config.json").read_text())
    variant("hf_bad_json", "{not json")
    variant("hf_list_json", "[1, 2]")
    variant("hf_bart", json.dumps(dict(good, model_type="bart")))
    variant("hf_gpt2_layer_scaled", json.dumps(dict(model_type="gpt2", vocab_size=99, n_positions=32, n_embd=16,
                                                    n_layer=1, n_head=2, scale_attn_by_inverse_layer_idx=True)))
    variant("hf_transfo_xl_pre_ln", json.dumps(dict(model_type="transfo-xl", vocab_size=99, d_model=16, n_head=2,
                                                    d_head=8, d_inner=32, n_layer=1, pre_lnorm=True)))
    deberta = dict(model_type="deberta", vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                   intermediate_size=24, max_position_embeddings=32, relative_attention=True, pos_att_type="c2p|p2c")
    variant("hf_deberta_absolute", json.dumps(dict(deberta, relative_attention=False)))
    variant("hf_deberta_talking", json.dumps(dict(deberta, talking_head=True)))
    variant("hf_deberta_terms", json.dumps(dict(deberta, pos_att_type="c2p|p2p")))
    variant("hf_no_hidden", json.dumps({k: v for k, v in good.items() if k != "hidden_size"}))
    variant("hf_wider", json.dumps(dict(good, hidden_size=32)))
    variant("hf_act", json.dumps(dict(good, hidden_act="mish")))
    variant("hf_no_weights", weights_bytes=None)
    variant("hf_garbage", weights_bytes=b"this is not a safetensors file at all")
    variant("hf_truncated", weights_bytes=weights[: len(weights) // 2])
    variant("hf_pickle", weights_bytes=None, extra={"pytorch_model.bin": "pickle"})
    variant("hf_fewer_layers", json.dumps(dict(good, num_hidden_layers=2)))
    variant("hf_big_vocab", extra={"vocab.txt": "\n".join(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"word{i}" for i in range(100)])})
    (tmp / "hf_no_config").mkdir()


def _run_folders(tmp):
    """A converted run folder, and damaged copies of it."""
    assert main(["convert", "--from-hf", str(tmp / "hf"), "--out", str(tmp / "run")]) == 0
    (tmp / "run_empty").mkdir()
    shutil.copytree(tmp / "run", tmp / "run_bad_json")
    (tmp / "run_bad_json" / "model" / "run.json").write_text("{oops")
    shutil.copytree(tmp / "run", tmp / "run_bad_keras")
    (tmp / "run_bad_keras" / "model" / "backbone.keras").write_bytes(b"not a zip archive")
    shutil.copytree(tmp / "run", tmp / "run_transformer_xl")  # a family transformers has no model for
    run_file = tmp / "run_transformer_xl" / "model" / "run.json"
    run_file.write_text(json.dumps(dict(json.loads(run_file.read_text()), family="transformer-xl")))


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad_input")
    _corpora(folder)
    _hf_checkpoint(folder)
    _run_folders(folder)
    return folder


def _pretrain(*args, corpus="{tmp}/good.txt", export=("--export", "{tmp}/export")):
    return ["pretrain", "--corpus", corpus, "--out", "{tmp}/out", *export,
            "--steps", "2", "--vocab-size", "200", "--seq-len", "32", *args]


CASES = [
    # pretrain: the corpus
    ("missing corpus", _pretrain(corpus="{tmp}/no_such.txt"), "does not exist"),
    ("empty corpus", _pretrain(corpus="{tmp}/empty.txt"), "no text"),
    ("whitespace corpus", _pretrain(corpus="{tmp}/blank.txt"), "no text"),
    ("binary corpus", _pretrain(corpus="{tmp}/binary.bin"), "binary"),
    ("NUL byte", _pretrain(corpus="{tmp}/nul.txt"), "binary"),
    ("non-UTF-8 corpus", _pretrain(corpus="{tmp}/latin1.txt"), "not valid UTF-8"),
    ("UTF-16 corpus", _pretrain(corpus="{tmp}/utf16.txt"), "UTF-16: save it as UTF-8"),
    ("UTF-16LE corpus without a BOM", _pretrain(corpus="{tmp}/utf16le.txt"), "UTF-16: save it as UTF-8"),
    ("UTF-16BE corpus without a BOM", _pretrain(corpus="{tmp}/utf16be.txt"), "UTF-16: save it as UTF-8"),
    ("UTF-32LE corpus without a BOM", _pretrain(corpus="{tmp}/utf32le.txt"), "UTF-32: save it as UTF-8"),
    ("FIFO corpus", _pretrain(corpus="{tmp}/fifo"), "is a pipe, not a regular file"),
    ("endless device corpus", _pretrain(corpus="/dev/zero"), "is a character device, not a regular file"),
    ("prepare FIFO corpus", ["prepare", "--model", "bert", "--corpus", "{tmp}/fifo", "--out", "{tmp}/p"],
     "is a pipe, not a regular file"),
    ("empty folder", _pretrain(corpus="{tmp}/empty_folder"), "has no files"),
    ("dangling symlink in a corpus folder", _pretrain(corpus="{tmp}/dangling"),
     "gone.txt: a symlink to {tmp}/moved_away.txt, which does not exist"),
    ("hidden files only", _pretrain(corpus="{tmp}/hidden_only"), "has no files"),
    ("one document for NSP", _pretrain(corpus="{tmp}/onedoc.txt"), "at least two non-empty documents"),
    ("one sentence per document", _pretrain(corpus="{tmp}/onesentence.txt"), "at least two sentences"),
    # pretrain: model and flags
    ("unknown model", _pretrain("--model", "nonesuch"), "invalid choice: 'nonesuch'"),
    ("t5 --noise-density out of range", _pretrain("--model", "t5", "--preset", "t5-tiny", "--noise-density", "0"),
     "--noise-density"),
    ("t5 --max-predictions", _pretrain("--model", "t5", "--preset", "t5-tiny", "--max-predictions", "5"),
     "--max-predictions does not apply to --model t5"),
    ("deberta --enhanced-mask-decoder out of range",
     _pretrain("--model", "deberta", "--preset", "deberta-tiny", "--enhanced-mask-decoder", "2"),
     "--enhanced-mask-decoder"),
    ("deberta-v3 --embedding-sharing full",
     _pretrain("--model", "deberta-v3", "--preset", "deberta-v3-tiny", "--embedding-sharing", "full"),
     "invalid choice: 'full'"),
    ("deberta-v3 generator flag with --objective mlm",
     _pretrain("--model", "deberta-v3", "--preset", "deberta-v3-tiny", "--objective", "mlm", "--generator-layers", "1"),
     "--generator-layers applies to --objective rtd, not mlm"),
    ("bigbird --block-size 0", _pretrain("--model", "bigbird", "--preset", "bigbird-tiny", "--block-size", "0"),
     "--block-size"),
    ("linformer --sharing unknown", _pretrain("--model", "linformer", "--preset", "linformer-tiny", "--sharing",
                                              "columnwise"), "invalid choice: 'columnwise'"),
    ("linformer --projected-length past n", _pretrain("--model", "linformer", "--preset", "linformer-tiny",
                                                      "--projected-length", "5000", "--vocab-size", "400"),
     "projected_length must be from 1 to max_length 4096"),
    ("--block-size for a family without blocks", _pretrain("--block-size", "16"), "--block-size does not apply"),
    # No --preset either: the family's first (distilbert-tiny), so the teacher is what is missing.
    ("distilbert without a teacher", _pretrain("--model", "distilbert"), "give --teacher RUN_OR_CHECKPOINT"),
    ("distilbert --teacher a preset", _pretrain("--model", "distilbert", "--preset", "distilbert-tiny", "--teacher",
                                                "bert-tiny"), "is a preset, which has no trained weights"),
    ("distilbert --teacher nowhere", _pretrain("--model", "distilbert", "--preset", "distilbert-tiny", "--teacher",
                                               "{tmp}/nowhere"), "--teacher {tmp}/nowhere:"),
    ("distilbert --teacher an encoder alone", _pretrain("--model", "distilbert", "--preset", "distilbert-tiny",
                                                        "--teacher", "{tmp}/run"), "has no masked-LM head"),
    ("distilbert --temperature 0", _pretrain("--model", "distilbert", "--preset", "distilbert-tiny", "--teacher",
                                             "{tmp}/run", "--temperature", "0"), "--temperature"),
    ("deberta-v3 --generator-layers out of range",
     _pretrain("--model", "deberta-v3", "--preset", "deberta-v3-tiny", "--generator-layers", "0"),
     "--generator-layers"),
    ("--masking-units of an unknown unit", _pretrain("--masking-units", "clauses"), "--masking-units must be one of"),
    ("--masking-units phrases for xlnet", _pretrain("--model", "xlnet", "--masking-units", "phrases"),
     "does not apply to --model xlnet"),
    ("a masking schedule with static masks", _pretrain("--masking-units", "words,phrases"),
     "it needs --masking dynamic"),
    ("--whole-word beside --masking-units", _pretrain("--whole-word", "--masking-units", "words"),
     "--whole-word is --masking-units words"),
    ("--masking-units for gpt", _pretrain("--model", "gpt", "--masking-units", "words"),
     "--masking-units does not apply to --model gpt"),
    ("--gazetteer missing", _pretrain("--model", "ernie", "--gazetteer", "{tmp}/no_such.txt"),
     "--gazetteer {tmp}/no_such.txt is not a file"),
    ("--gazetteer a pipe", _pretrain("--model", "ernie", "--gazetteer", "{tmp}/fifo"), "is not a file"),
    ("--phrases empty", _pretrain("--model", "ernie", "--phrases", "{tmp}/empty.txt"),
     "--phrases {tmp}/empty.txt has no entry of two or more words"),
    ("--phrases without phrases", _pretrain("--masking-units", "entities", "--masking", "dynamic", "--phrases",
                                            "{tmp}/good.txt"), "--phrases applies to --masking-units with phrases"),
    ("t5's option for bert", _pretrain("--mean-noise-span-length", "2"),
     "--mean-noise-span-length does not apply to --model bert"),
    ("gpt --whole-word", _pretrain("--model", "gpt", "--preset", "gpt-tiny", "--whole-word"),
     "--whole-word does not apply to --model gpt"),
    ("gpt --masking static", _pretrain("--model", "gpt", "--preset", "gpt-tiny", "--masking", "static"),
     "--masking static does not apply to --model gpt"),
    ("elmo --whole-word", _pretrain("--model", "elmo", "--whole-word"), "--whole-word does not apply to --model elmo"),
    ("elmo --masking-units", _pretrain("--model", "elmo", "--masking-units", "words"),
     "--masking-units does not apply to --model elmo"),
    ("elmo --xla on", _pretrain("--model", "elmo", "--xla", "on"), "--xla on: XLA cannot compile"),
    ("elmo --max-predictions", _pretrain("--model", "elmo", "--max-predictions", "5"),
     "--max-predictions does not apply to --model elmo"),
    ("elmo --softmax-samples negative", _pretrain("--model", "elmo", "--softmax-samples", "-1"), "--softmax-samples"),
    ("elmo's option for bert", _pretrain("--softmax-samples", "64"), "--softmax-samples does not apply to --model bert"),
    ("transformer-xl --reuse-len", _pretrain("--model", "transformer-xl", "--preset", "transformer-xl-tiny",
                                             "--reuse-len", "8"), "--reuse-len does not apply to --model transformer-xl"),
    ("transformer-xl --mem-len out of range", _pretrain("--model", "transformer-xl", "--preset",
                                                        "transformer-xl-tiny", "--mem-len", "5000"), "--mem-len"),
    ("unknown preset", _pretrain("--preset", "bert-gigantic"), "unknown preset 'bert-gigantic'"),
    ("other family's preset", _pretrain("--model", "roberta", "--preset", "bert-tiny"), "unknown preset"),
    ("zero steps", _pretrain("--steps", "0"), "argument --steps: '0' is not a whole number from 1 to 1000000000"),
    ("negative steps", _pretrain("--steps", "-5"), "'-5' is not a whole number from 1"),
    ("non-numeric steps", _pretrain("--steps", "many"), "'many' is not a whole number"),
    ("zero batch", _pretrain("--batch-size", "0"), "argument --batch-size: '0' is not a whole number from 1"),
    ("seq-len above positions", _pretrain("--seq-len", "1024"), "above the 512 positions"),
    ("seq-len too short", _pretrain("--seq-len", "4"), "argument --seq-len: '4' is not a whole number from 8"),
    ("length bucket zero", _pretrain("--length-buckets", "16,0"),
     "argument --length-buckets: in '16,0': '0' is not a whole number from 1 to 65536"),
    ("length bucket not a number", _pretrain("--length-buckets", "16,x"), "in '16,x': 'x' is not a whole number"),
    ("length bucket above seq-len", _pretrain("--length-buckets", "16,64"),
     "--length-buckets 64: each bucket must be a whole number of tokens from 1 to 32, the sequence length"),
    ("NaN learning rate", _pretrain("--learning-rate", "nan"), "'nan' is not a number in (0, 10]"),
    ("infinite learning rate", _pretrain("--learning-rate", "inf"), "'inf' is not a number in (0, 10]"),
    ("negative learning rate", _pretrain("--learning-rate=-1e-3"), "'-1e-3' is not a number in (0, 10]"),
    ("vocabulary too small", _pretrain("--vocab-size", "6"), "vocab_size"),
    ("SentencePiece vocabulary above the corpus",
     _pretrain("--model", "albert", "--preset", "albert-tiny", "--vocab-size", "8000"), "pass --vocab-size"),
    ("too many predictions", _pretrain("--max-predictions", "500"), "above the 29 maskable positions"),
    ("zero dupe factor", _pretrain("--dupe-factor", "0"), "argument --dupe-factor: '0' is not a whole number from 1"),
    ("unknown masking", _pretrain("--masking", "random"), "invalid choice: 'random'"),
    ("unknown precision", _pretrain("--precision", "float16"), "invalid choice: 'float16'"),
    ("packing for NSP", _pretrain("--packing", "doc-sentences"), "does not apply to --model bert, which takes none"),
    ("unpadded packing for NSP", _pretrain("--packing", "unpadded"), "does not apply to --model bert"),
    ("unknown schedule", _pretrain("--schedule", "exponential"), "invalid choice: 'exponential'"),
    ("unknown optimizer", _pretrain("--optimizer", "sgd"), "invalid choice: 'sgd'"),
    ("no accumulation", _pretrain("--accumulate", "0"), "argument --accumulate: '0' is not a whole number from 1 to 8192"),
    ("accumulation that does not divide the batch", _pretrain("--accumulate", "3"),
     "--batch-size 32 (the batch of one update) must be a multiple of --accumulate 3"),
    ("accumulation of a memory", _pretrain("--model", "xlnet", "--preset", "xlnet-tiny", "--accumulate", "2"),
     "--accumulate does not apply to --model xlnet"),
    ("warmup past the run", _pretrain("--warmup-steps", "5"), "--warmup-steps 5 is more than the run's --steps 2"),
    ("evaluation past the run", _pretrain("--eval-every", "3"), "--eval-every 3 is more than the run's --steps 2"),
    ("non-finite decay power", _pretrain("--decay-power", "nan"), "argument --decay-power: 'nan' is not a number in"),
    ("no decay share", _pretrain("--decay-share", "0"), "argument --decay-share: '0' is not a number in (0, 1]"),
    ("init from no run", _pretrain("--init-from", "{tmp}/no_run"), "is not a finished run folder"),
    ("--preset of other sizes than --init-from", _pretrain("--preset", "bert-mini", "--init-from", "{tmp}/run"),
     "--preset bert-mini (num_layers 4, hidden_size 256, num_heads 4, intermediate_size 1024) disagrees with the "
     "converted model of --init-from {tmp}/run (num_layers 1, hidden_size 16, num_heads 2, intermediate_size 24), "
     "whose shape the run keeps: leave --preset out"),
    ("zero rotary base", _pretrain("--model", "modernbert", "--preset", "modernbert-tiny", "--global-rotary-base",
                                   "0"), "argument --global-rotary-base: '0' is not a number from 1.0 to 1000000000.0"),
    ("other family's option", _pretrain("--max-span", "4"), "--max-span does not apply to --model bert"),
    ("option of the other family", _pretrain("--model", "albert", "--preset", "albert-tiny", "--span-p", "0.3"),
     "--span-p does not apply to --model albert, which takes --max-ngram"),
    ("zero span length", _pretrain("--model", "spanbert", "--preset", "spanbert-tiny", "--max-span", "0"),
     "argument --max-span: '0' is not a whole number from 1 to 30"),
    ("NaN span p", _pretrain("--model", "spanbert", "--preset", "spanbert-tiny", "--span-p", "nan"),
     "argument --span-p: 'nan' is not a number from 0.01 to 1.0"),
    ("non-numeric n-gram", _pretrain("--model", "albert", "--preset", "albert-tiny", "--max-ngram", "three"),
     "argument --max-ngram: 'three' is not a whole number from 1 to 10"),
    ("layer decay above 1", _pretrain("--layer-decay", "1.5"),
     "argument --layer-decay: '1.5' is not a number in (0, 1]"),
    ("NaN layer decay", _pretrain("--layer-decay", "nan"), "'nan' is not a number in (0, 1]"),
    ("attention dropout of 1", _pretrain("--attention-dropout", "1"),
     "argument --attention-dropout: '1' is not a number in [0, 1)"),
    ("attention dropout of a backbone with one dropout", _pretrain("--model", "xlnet", "--preset", "xlnet-tiny",
                                                                   "--attention-dropout", "0"),
     "--attention-dropout does not apply to --model xlnet: its backbone has no dropout of the attention "
     "probabilities of its own"),
    ("seed above int32", _pretrain("--seed", "4294967296"),
     "argument --seed: '4294967296' is not a whole number from 0 to 2147483647"),
    ("negative seed", _pretrain("--seed", "-1"), "argument --seed: '-1' is not a whole number from 0"),
    ("unknown flag", _pretrain("--no-such-flag"), "unrecognized arguments: --no-such-flag"),
    # Abbreviations would bypass the checks of a flag given by name (see also test_prepare's --data cases).
    ("abbreviated flag", _pretrain("--vocab", "300"), "unrecognized arguments: --vocab 300"),
    ("abbreviated flag with =", _pretrain("--dupe=5"), "unrecognized arguments: --dupe=5"),
    ("abbreviated --backend", _pretrain("--back", "tensorflow"), "unrecognized arguments: --back tensorflow"),
    ("--out is a file", _pretrain("--out", "{tmp}/a_file"), "is a file"),
    ("--out under /proc", _pretrain("--out", "/proc/bertology/run"), "cannot be written"),
    ("--export is a file", _pretrain("--export", "{tmp}/a_file"), "is a file"),
    ("--export under /proc", _pretrain("--export", "/proc/bertology/sm"), "cannot be written"),
    ("--export and --no-export", _pretrain("--export", "{tmp}/sm", "--no-export"), "contradict each other"),
    # flags that would do nothing in their context
    ("--decay-share of a linear schedule", _pretrain("--decay-share", "0.2"),
     "--decay-share applies to --schedule wsd, not linear"),
    ("--decay-power of a cosine schedule", _pretrain("--schedule", "cosine", "--decay-power", "2"),
     "--decay-power applies to --schedule polynomial, not cosine"),
    ("--serving-xla without an export", _pretrain("--serving-xla", export=["--no-export"]),
     "--serving-xla applies to the SavedModel, which --no-export leaves out"),
    ("--length-buckets without an export", _pretrain("--length-buckets", "16", export=["--no-export"]),
     "--length-buckets applies to the SavedModel, which --no-export leaves out"),
    ("multiworker without TF_CONFIG", _pretrain("--strategy", "multiworker"),
     "--strategy multiworker: TF_CONFIG is not set, so this process would train alone"),
    # finetune
    ("finetune --export and --no-export",
     ["finetune", "--task", "bbc-news", "--from", "{tmp}/run", "--export", "{tmp}/e", "--no-export"],
     "contradict each other"),
    ("finetune --serving-xla with --results-only",
     ["finetune", "--task", "bbc-news", "--from", "{tmp}/run", "--results-only", "--serving-xla", "--out", "{tmp}/ft"],
     "--serving-xla applies to the SavedModel, which --results-only leaves out"),
    ("finetune --serving-xla with --no-export",
     ["finetune", "--task", "bbc-news", "--from", "{tmp}/run", "--no-export", "--serving-xla", "--out", "{tmp}/ft"],
     "--serving-xla applies to the SavedModel, which --no-export leaves out"),
    ("finetune header repeated in the data", ["finetune", "--task", "{tmp}/header_twice", "--from", "{tmp}/run",
                                              "--out", "{tmp}/ft", "--no-export"], "line 3: repeats the header row"),
    ("finetune data of one class", ["finetune", "--task", "{tmp}/one_class", "--from", "{tmp}/run",
                                    "--out", "{tmp}/ft", "--no-export"], "has a single class ('x')"),
    ("finetune --max-examples of one class", ["finetune", "--task", "bbc-news", "--from", "{tmp}/run",
                                              "--max-examples", "1", "--out", "{tmp}/ft", "--no-export"],
     "bbc-news cut to its first 1 (--max-examples 1) has a single class ('business')"),
    # study
    ("study --seeds 0", ["study", "--seeds", "0", "--out", "{tmp}/s"], "--seeds"),
    ("study unknown arm", ["study", "--arms", "bert", "nonesuch", "--out", "{tmp}/s"], "invalid choice: 'nonesuch'"),
    ("study missing task folder", ["study", "--scale", "smoke", "--tasks", "{tmp}/nowhere", "--out", "{tmp}/s"],
     "nowhere"),
    ("study empty corpus", ["study", "--scale", "smoke", "--corpus", "{tmp}/empty.txt", "--out", "{tmp}/s"],
     "no text"),
    ("study --out holding other files", ["study", "--scale", "smoke", "--out", "{tmp}/hidden_only"],
     "holds files that bertology did not write"),
    ("study --out under /proc", ["study", "--out", "/proc/bertology/s"], "cannot be written"),
    # convert
    ("missing checkpoint folder", ["convert", "--from-hf", "{tmp}/nowhere", "--out", "{tmp}/c"], "not a folder"),
    ("no config.json", ["convert", "--from-hf", "{tmp}/hf_no_config", "--out", "{tmp}/c"], "config.json not found"),
    ("invalid config.json", ["convert", "--from-hf", "{tmp}/hf_bad_json", "--out", "{tmp}/c"], "not valid JSON"),
    ("config.json not an object", ["convert", "--from-hf", "{tmp}/hf_list_json", "--out", "{tmp}/c"],
     "must hold a JSON object"),
    ("unsupported model_type", ["convert", "--from-hf", "{tmp}/hf_bart", "--out", "{tmp}/c"],
     "model_type 'bart' is not supported"),
    ("GPT-2 with layer-scaled attention", ["convert", "--from-hf", "{tmp}/hf_gpt2_layer_scaled", "--out", "{tmp}/c"],
     "scale_attn_by_inverse_layer_idx=True is not supported"),
    ("pre-LN Transformer-XL", ["convert", "--from-hf", "{tmp}/hf_transfo_xl_pre_ln", "--out", "{tmp}/c"],
     "pre_lnorm=True is not supported"),
    ("config lacks a size", ["convert", "--from-hf", "{tmp}/hf_no_hidden", "--out", "{tmp}/c"],
     "hidden_size must be a positive integer"),
    ("DeBERTa without relative attention", ["convert", "--from-hf", "{tmp}/hf_deberta_absolute", "--out", "{tmp}/c"],
     "relative_attention is false"),
    ("DeBERTa talking heads", ["convert", "--from-hf", "{tmp}/hf_deberta_talking", "--out", "{tmp}/c"],
     "talking_head (mixing the heads' scores) is not supported"),
    ("DeBERTa unknown score term", ["convert", "--from-hf", "{tmp}/hf_deberta_terms", "--out", "{tmp}/c"],
     "pos_att_type ['p2p'] is not supported"),
    ("unsupported activation", ["convert", "--from-hf", "{tmp}/hf_act", "--out", "{tmp}/c"],
     "hidden_act 'mish' is not supported"),
    ("missing safetensors", ["convert", "--from-hf", "{tmp}/hf_no_weights", "--out", "{tmp}/c"],
     "model.safetensors not found"),
    ("corrupt safetensors", ["convert", "--from-hf", "{tmp}/hf_garbage", "--out", "{tmp}/c"], "cannot read"),
    ("truncated safetensors", ["convert", "--from-hf", "{tmp}/hf_truncated", "--out", "{tmp}/c"], "cannot read"),
    ("pickle weights only", ["convert", "--from-hf", "{tmp}/hf_pickle", "--out", "{tmp}/c"],
     "only PyTorch pickle weights"),
    ("config wider than weights", ["convert", "--from-hf", "{tmp}/hf_wider", "--out", "{tmp}/c"],
     "shape mismatch"),
    ("config deeper than weights", ["convert", "--from-hf", "{tmp}/hf_fewer_layers", "--out", "{tmp}/c"],
     "no tensor 'encoder.layer.1"),
    ("vocabulary larger than the model", ["convert", "--from-hf", "{tmp}/hf_big_vocab", "--out", "{tmp}/c"],
     "do not belong together"),
    ("convert --seq-len above positions",
     ["convert", "--from-hf", "{tmp}/hf", "--out", "{tmp}/c", "--seq-len", "64"], "above the checkpoint's 32"),
    ("convert --out is a file", ["convert", "--from-hf", "{tmp}/hf", "--out", "{tmp}/a_file"], "is a file"),
    # export
    ("missing run folder", ["export", "{tmp}/no_run", "--out", "{tmp}/e"], "not a finished run folder"),
    ("empty run folder", ["export", "{tmp}/run_empty", "--out", "{tmp}/e"], "not a finished run folder"),
    ("damaged run.json", ["export", "{tmp}/run_bad_json", "--out", "{tmp}/e"], "is damaged"),
    ("damaged model archive", ["export", "{tmp}/run_bad_keras", "--out", "{tmp}/e"], "cannot load"),
    ("export --out under /proc", ["export", "{tmp}/run", "--out", "/proc/bertology/e"], "cannot be written"),
    ("export without tokenizer", ["export", "{tmp}/run", "--out", "{tmp}/e"], "no in-graph tokenizer"),
    ("export --format hf of a family transformers lacks",
     ["export", "{tmp}/run_transformer_xl", "--format", "hf", "--out", "{tmp}/e"],
     "transformers has no model for the transformer-xl family; families that export: albert, bert, bigbird, deberta, "
     "deberta-v3, distilbert, electra, ernie, gpt, modernbert, roberta, spanbert, t5, xlnet"),
    ("export --format hf --serving-xla", ["export", "{tmp}/run", "--format", "hf", "--serving-xla", "--out", "{tmp}/e"],
     "--serving-xla applies to a SavedModel, not to --format hf"),
    ("export --format hf --length-buckets",
     ["export", "{tmp}/run", "--format", "hf", "--length-buckets", "16", "--out", "{tmp}/e"],
     "--length-buckets applies to a SavedModel, not to --format hf"),
    ("unknown export format", ["export", "{tmp}/run", "--format", "tflite", "--out", "{tmp}/e"],
     "argument --format: invalid choice: 'tflite'"),
    ("export --format onnx --serving-xla", ["export", "{tmp}/run", "--format", "onnx", "--serving-xla", "--out",
                                            "{tmp}/e"], "--serving-xla applies to a SavedModel, not to --format onnx"),
    ("export --format onnx --out holding other files", ["export", "{tmp}/run", "--format", "onnx", "--out",
                                                        "{tmp}/hidden_only"], "holds files that bertology did not write"),
    ("export --format onnx of a missing run", ["export", "{tmp}/no_run", "--format", "onnx", "--out", "{tmp}/e"],
     "not a finished run folder"),
    ("export --format hf --out holding other files", ["export", "{tmp}/run", "--format", "hf", "--out",
                                                      "{tmp}/hidden_only"], "holds files that bertology did not write"),
    ("export --format hf of a missing run", ["export", "{tmp}/no_run", "--format", "hf", "--out", "{tmp}/e"],
     "not a finished run folder"),
]


def test_the_table_is_large():
    assert len(CASES) >= 30


@pytest.mark.parametrize("name,argv,message", CASES, ids=[case[0] for case in CASES])
def test_bad_input_is_refused_cleanly(tmp, capsys, name, argv, message):
    assert _refused(tmp, capsys, argv, message) == []


# Input that still makes a sensible run, said in one warning line on stderr: each row also breaks
# something checked after the warning, so that the command stops there instead of training.
WARNED = [
    ("odd --local-window", _pretrain("--model", "modernbert", "--local-window", "3", "--out", "{tmp}/a_file"),
     "--local-window 3 works as 2 (the model takes it in steps of 2)", "is a file"),
    ("--resume without a run", _pretrain("--resume", corpus="{tmp}/empty.txt"),
     "--resume: {tmp}/out holds no checkpoint to resume from; starting a fresh run", "no text"),
    ("labels differing in case", ["finetune", "--task", "{tmp}/case_labels", "--from", "{tmp}/no_run",
                                  "--out", "{tmp}/ft", "--no-export"],
     "labels 'POS', 'Pos', 'pos' differ only in case: they are 3 classes; write them alike if they are one",
     "not a finished run folder"),
]


@pytest.mark.parametrize("name,argv,warning,message", WARNED, ids=[case[0] for case in WARNED])
def test_doubtful_input_is_warned_of_in_one_line(tmp, capsys, name, argv, warning, message):
    assert _refused(tmp, capsys, argv, message) == [f"bertology: warning: {warning.replace('{tmp}', str(tmp))}"]


def _refused(tmp, capsys, argv, message):
    """The lines before a refusal (one `bertology: error:` line containing `message`, exit status 2, no
    traceback, nothing left behind)."""
    before = set(tmp.iterdir())
    argv = [arg.replace("{tmp}", str(tmp)) for arg in argv]
    message = message.replace("{tmp}", str(tmp))
    try:
        status = main(argv)
    except SystemExit as exit_:  # argparse's usage errors
        status = exit_.code
    captured = capsys.readouterr()
    *warnings, error = captured.err.strip().splitlines()
    assert status == 2, captured.err
    assert error.startswith("bertology: error: "), captured.err
    assert message in error
    assert "Traceback" not in captured.err + captured.out
    assert set(tmp.iterdir()) == before, "a refused command left files behind"
    return warnings


def test_a_full_disk_under_convert_out_names_the_path(tmp, tmp_path, capsys, monkeypatch):
    """Every text write fails as on a full disk (an OSError that names no file): the one line names the output
    it was writing. (finetune --out: tests/finetune/test_finetune.py.)"""
    import errno
    import pathlib

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    out = tmp_path / "out"
    monkeypatch.setattr(pathlib.Path, "write_text", full)
    assert main(["convert", "--from-hf", str(tmp / "hf"), "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"bertology: error: {out}/model: No space left on device"]
