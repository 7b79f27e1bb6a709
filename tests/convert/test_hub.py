"""Checkpoints by name (`hf://ORG/NAME`, `convert --from-hf ORG/NAME`) against a hub on the loopback interface:
the same weights as a local folder, the cache, offline mode, and every way a download can fail."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import transformers

import transformer_xl_reference
from hf_reference import perturbed_hf_model, roberta_bpe_files, save_hf_model
from keras_bertology.cli import main
from keras_bertology.convert import hub
from keras_bertology.convert.hf_checkpoint import convert_hf_checkpoint
from keras_bertology.models import Backbone, Pretrainer, SequenceClassifier
from keras_bertology.runs import MODEL_DIR, load_run_model
from loopback_hub import LoopbackHub

SMALL = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
             max_position_embeddings=64, initializer_range=0.2)
T = transformers
# A random transformers model of each model_type a family converts (transfo-xl: written from the reference).
MODELS = {
    "bert": lambda: perturbed_hf_model(T.BertForPreTraining, T.BertConfig(**SMALL)),
    "ernie": lambda: perturbed_hf_model(T.ErnieForPreTraining, T.ErnieConfig(**SMALL)),
    "roberta": lambda: perturbed_hf_model(T.RobertaForMaskedLM, T.RobertaConfig(
        **dict(SMALL, vocab_size=300, max_position_embeddings=66), type_vocab_size=1, pad_token_id=1)),
    "albert": lambda: perturbed_hf_model(T.AlbertForPreTraining, T.AlbertConfig(**SMALL, embedding_size=16)),
    "electra": lambda: perturbed_hf_model(T.ElectraForPreTraining, T.ElectraConfig(**SMALL, embedding_size=16)),
    "big_bird": lambda: perturbed_hf_model(T.BigBirdForPreTraining, T.BigBirdConfig(
        **SMALL, attention_type="block_sparse", block_size=4, num_random_blocks=2)),
    "distilbert": lambda: perturbed_hf_model(T.DistilBertForMaskedLM, T.DistilBertConfig(
        vocab_size=99, dim=32, n_layers=2, n_heads=2, hidden_dim=37, max_position_embeddings=64)),
    "deberta": lambda: perturbed_hf_model(T.DebertaForMaskedLM, T.DebertaConfig(
        **SMALL, relative_attention=True, pos_att_type=["c2p", "p2c"], position_biased_input=False,
        type_vocab_size=0)),
    "deberta-v2": lambda: perturbed_hf_model(T.DebertaV2ForMaskedLM, T.DebertaV2Config(
        **SMALL, relative_attention=True, position_buckets=8, norm_rel_ebd="layer_norm", share_att_key=True,
        pos_att_type=["p2c", "c2p"], position_biased_input=False, type_vocab_size=0)),
    "gpt2": lambda: perturbed_hf_model(T.GPT2LMHeadModel, T.GPT2Config(vocab_size=99, n_embd=32, n_layer=2,
                                                                       n_head=2, n_positions=64)),
    "t5": lambda: perturbed_hf_model(T.T5ForConditionalGeneration, T.T5Config(
        vocab_size=99, d_model=32, d_ff=37, d_kv=16, num_layers=2, num_heads=2)),
    "xlnet": lambda: perturbed_hf_model(T.XLNetLMHeadModel, T.XLNetConfig(vocab_size=99, d_model=32, n_layer=2,
                                                                          n_head=2, d_inner=37)),
}
TRANSFO_XL = dict(vocab_size=61, d_model=18, d_embed=18, n_head=3, d_head=6, d_inner=40, n_layer=2, mem_len=6,
                  clamp_len=-1, same_length=False, layer_norm_epsilon=1e-5, pre_lnorm=False, attn_type=0,
                  cutoffs=[12, 30], div_val=2, untie_r=False, tie_projs=[False, True, False])
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(94)]


def write_checkpoint(model_type, folder, sentences=None):
    """A random checkpoint of `model_type` in `folder` (with a tokenizer for bert and roberta)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if model_type == "transfo-xl":
        from safetensors.numpy import save_file

        save_file(transformer_xl_reference.random_state_dict(TRANSFO_XL, seed=4, scale=0.3),
                  str(folder / "model.safetensors"))
        (folder / "config.json").write_text(json.dumps(dict(TRANSFO_XL, model_type="transfo-xl", adaptive=True,
                                                            architectures=["TransfoXLLMHeadModel"])))
        return folder
    save_hf_model(MODELS[model_type](), folder)
    if model_type == "bert":
        (folder / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    if model_type == "roberta":
        roberta_bpe_files(sentences * 20, 300, folder)
    return folder


SENTENCES = ["now is the winter of our discontent", "made glorious summer by this sun of york",
             "to be or not to be that is the question"]


@pytest.fixture(scope="module")
def loopback():
    with LoopbackHub() as served:
        yield served


@pytest.fixture
def hub_env(loopback, tmp_path, monkeypatch):
    """HF_ENDPOINT at the loopback hub, a fresh cache, online, no token."""
    monkeypatch.setenv("HF_ENDPOINT", loopback.endpoint)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    for name in ("HF_HUB_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)  # the suite's conftest set it at import
    return tmp_path / "hf-cache"


@pytest.fixture(scope="module")
def bert_repo(loopback, tmp_path_factory):
    """org/tiny-bert: a BERT with its pretraining heads and vocab.txt; (repo id, folder, commit)."""
    folder = write_checkpoint("bert", tmp_path_factory.mktemp("tiny-bert"))
    return "org/tiny-bert", folder, loopback.publish("org/tiny-bert", folder)


def _assert_same_run(cached_dir, run):
    """The run cached in `cached_dir` holds bit for bit the weights, tokenizer and settings of `run`."""
    cached = load_run_model(cached_dir)
    assert (cached.family, cached.seq_len) == (run.family, run.seq_len)
    for mine, theirs in [(cached.backbone, run.backbone), (cached.pretrainer, run.pretrainer)]:
        assert (mine is None) == (theirs is None)
        if mine is not None:
            got, expected = mine.get_weights(), theirs.get_weights()
            assert len(got) == len(expected) and all(np.array_equal(a, b) for a, b in zip(got, expected))
    assert (cached.tokenizer is None) == (run.tokenizer is None)
    if run.tokenizer is not None:
        text = np.array(["now is the winter w3 w17"])
        assert cached.tokenizer.tokenize(text).to_list() == run.tokenizer.tokenize(text).to_list()


@pytest.mark.slow
@pytest.mark.parametrize("model_type", [*MODELS, "transfo-xl"])
def test_every_family_converts_by_name_as_from_a_local_folder(loopback, hub_env, tmp_path, model_type):
    folder = write_checkpoint(model_type, tmp_path / "checkpoint", SENTENCES)
    repo = f"org/{model_type}-tiny"
    commit = loopback.publish(repo, folder)
    cached_dir = hub.converted_run(hub.parse_handle(f"hf://{repo}"))
    assert cached_dir.name == commit and cached_dir.is_relative_to(hub_env / f"models--org--{model_type}-tiny")
    _assert_same_run(cached_dir, convert_hf_checkpoint(folder)[0])


def test_a_sharded_checkpoint_converts_by_name(loopback, hub_env, tmp_path):
    model = MODELS["bert"]()
    folder = tmp_path / "sharded"
    model.save_pretrained(folder, max_shard_size="20KB")
    (folder / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    shards = sorted(path.name for path in folder.glob("*.safetensors"))
    assert len(shards) > 2 and (folder / "model.safetensors.index.json").is_file()
    loopback.publish("org/sharded-bert", folder)
    cached_dir = hub.converted_run(hub.parse_handle("hf://org/sharded-bert"))
    _assert_same_run(cached_dir, convert_hf_checkpoint(folder)[0])


def test_shards_named_otherwise_are_fetched_by_the_names_their_index_gives(loopback, hub_env, tmp_path):
    """An index whose shards are not called model-XXXXX-of-YYYYY.safetensors: the first fetch misses them,
    a second fetches exactly the names the index lists."""
    model = MODELS["bert"]()
    folder = tmp_path / "renamed"
    model.save_pretrained(folder, max_shard_size="20KB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    renamed = {old: f"part-{number}.safetensors" for number, old in enumerate(sorted(set(index["weight_map"].values())))}
    for old, new in renamed.items():
        (folder / old).rename(folder / new)
    index["weight_map"] = {name: renamed[shard] for name, shard in index["weight_map"].items()}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "stray.safetensors").write_bytes(b"not fetched")
    loopback.publish("org/renamed-shards", folder)
    cached_dir = hub.converted_run(hub.parse_handle("hf://org/renamed-shards"))
    _assert_same_run(cached_dir, convert_hf_checkpoint(folder)[0])
    assert not list(Path(hub_env).rglob("stray.safetensors"))


def test_a_second_load_converts_nothing_and_offline_requests_nothing(loopback, bert_repo, hub_env, monkeypatch,
                                                                      capsys):
    repo, folder, commit = bert_repo
    first = Backbone.from_preset(f"hf://{repo}")
    assert "converting hf://org/tiny-bert" in capsys.readouterr().err
    weights = first.get_weights()

    def refuse(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr("keras_bertology.convert.hf_checkpoint.convert_hf_checkpoint", refuse)
    before = len(loopback.requests)
    again = Backbone.from_preset(f"hf://{repo}")
    assert loopback.requests[before:] == [("GET", f"/api/models/{repo}/revision/main")]  # the branch, resolved
    assert all(np.array_equal(a, b) for a, b in zip(again.get_weights(), weights))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = len(loopback.requests)
    offline = Pretrainer.from_preset(f"hf://{repo}")
    pinned = Backbone.from_preset(f"hf://{repo}@{commit}")
    classifier = SequenceClassifier.from_preset(f"hf://{repo}", num_classes=3)
    assert len(loopback.requests) == before
    assert type(offline).__name__ == "BertPretrainer" and len(pinned.get_weights()) == len(weights)
    assert all(np.array_equal(a, b) for a, b in zip(classifier.backbone.get_weights(), weights))
    assert "converting" not in capsys.readouterr().err


def test_the_cache_key_is_the_commit_a_branch_resolves_to(loopback, hub_env, tmp_path):
    """A branch that moves converts again; a pinned older commit keeps its own weights."""
    first_folder = write_checkpoint("bert", tmp_path / "first")
    old = loopback.publish("org/moving-bert", first_folder)
    first = Backbone.from_preset("hf://org/moving-bert").get_weights()
    second_folder = tmp_path / "second"
    save_hf_model(perturbed_hf_model(T.BertForPreTraining, T.BertConfig(**dict(SMALL, initializer_range=0.3))),
                  second_folder)
    new = loopback.publish("org/moving-bert", second_folder)
    assert new != old
    moved = Backbone.from_preset("hf://org/moving-bert").get_weights()
    expected = convert_hf_checkpoint(second_folder)[0].backbone.get_weights()
    assert all(np.array_equal(a, b) for a, b in zip(moved, expected))
    pinned = Backbone.from_preset(f"hf://org/moving-bert@{old}").get_weights()
    assert all(np.array_equal(a, b) for a, b in zip(pinned, first))
    assert not all(np.array_equal(a, b) for a, b in zip(pinned, moved))


def test_convert_by_name_from_the_command_line_writes_what_a_local_convert_writes(bert_repo, hub_env, tmp_path,
                                                                                   capsys):
    repo, folder, _ = bert_repo
    assert main(["convert", "--from-hf", repo, "--out", str(tmp_path / "by-name"), "--seq-len", "48"]) == 0
    by_name = capsys.readouterr().out
    assert main(["convert", "--from-hf", str(folder), "--out", str(tmp_path / "local"), "--seq-len", "48"]) == 0
    assert capsys.readouterr().out.replace(str(tmp_path / "local"), str(tmp_path / "by-name")) == by_name
    _assert_same_run(tmp_path / "by-name", load_run_model(tmp_path / "local"))
    assert json.loads((tmp_path / "by-name" / MODEL_DIR / "run.json").read_text())["seq_len"] == 48
    assert main(["convert", "--from-hf", f"hf://{repo}", "--out", str(tmp_path / "long"), "--seq-len", "65"]) == 2
    assert "above the checkpoint's 64 positions" in capsys.readouterr().err
    assert not (tmp_path / "long").exists()


def _publish_files(loopback, tmp_path, repo, files, token=None):
    folder = tmp_path / repo.replace("/", "--")
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return loopback.publish(repo, folder, token=token)


def _refused(capsys, tmp_path, hub_cache, source, expected):
    """`convert --from-hf source` exits 2 with one error line (after huggingface_hub's progress bars) holding
    `expected`, writes no --out and no converted model into the cache."""
    capsys.readouterr()
    out = tmp_path / "refused"
    assert main(["convert", "--from-hf", source, "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    err = lines[-1]
    assert err.startswith("bertology: error: ") and expected in err, lines
    assert not [line for line in lines[:-1] if "error" in line.lower() or "Traceback" in line], lines
    assert not out.exists()
    repo_folder = "models--" + hub.parse_handle(source).repo_id.replace("/", "--")
    assert not list(Path(hub_cache).glob(f"{repo_folder}/{hub.CONVERTED_DIR}/*/*/{MODEL_DIR}"))
    return err


def test_what_cannot_be_fetched_is_one_line_and_writes_nothing(loopback, bert_repo, hub_env, tmp_path, capsys,
                                                               monkeypatch):
    _refused(capsys, tmp_path, hub_env, "org/no-such-model", "no repository org/no-such-model")
    _refused(capsys, tmp_path, hub_env, "hf://org/tiny-bert@v2.0", "has no revision 'v2.0'")
    private = write_checkpoint("bert", tmp_path / "private")
    loopback.publish("org/private-bert", private, token="hf_secret")
    _refused(capsys, tmp_path, hub_env, "org/private-bert", "HF_TOKEN is not set")
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    _refused(capsys, tmp_path, hub_env, "org/private-bert", "HF_TOKEN is set but was refused")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    assert main(["convert", "--from-hf", "org/private-bert", "--out", str(tmp_path / "private-run")]) == 0
    monkeypatch.delenv("HF_TOKEN")
    config = (private / "config.json").read_bytes()
    _publish_files(loopback, tmp_path, "org/pickled-bert", {"config.json": config, "pytorch_model.bin": b"\x80\x04"})
    err = _refused(capsys, tmp_path, hub_env, "org/pickled-bert", "only pickled PyTorch weights (pytorch_model.bin)")
    assert "unpickling runs code" in err
    assert not list(Path(hub_env).rglob("pytorch_model.bin"))  # never even downloaded
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _refused(capsys, tmp_path, hub_env, "org/never-loaded", "HF_HUB_OFFLINE is set")


def test_a_connection_dropped_in_the_middle_of_a_file_is_one_line_and_writes_nothing(loopback, hub_env, tmp_path,
                                                                                    capsys):
    folder = write_checkpoint("bert", tmp_path / "dropped")
    loopback.publish("org/dropped-bert", folder)
    size = (folder / "model.safetensors").stat().st_size
    loopback.drop_connection("org/dropped-bert", "model.safetensors", after_bytes=size // 2)
    _refused(capsys, tmp_path, hub_env, "org/dropped-bert", "503")
    snapshots = list(Path(hub_env).glob("models--org--dropped-bert/snapshots/*"))
    assert all(not (snapshot / "model.safetensors").exists() for snapshot in snapshots)


@pytest.mark.slow
def test_two_processes_loading_one_handle_at_once_both_succeed_and_convert_it_once(loopback, bert_repo, hub_env):
    repo, _, commit = bert_repo
    script = ("import sys; from keras_bertology.models import Backbone; "
              f"print(type(Backbone.from_preset('hf://{repo}')).__name__)")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    processes = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [process.communicate(timeout=300) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], results
    assert [out.strip() for out, _ in results] == ["BertBackbone"] * 2
    assert sum(err.count("bertology: converting") for _, err in results) == 1
    converted = list(Path(hub_env).glob(f"*/{hub.CONVERTED_DIR}/*/[!.]*"))
    assert [path.name for path in converted] == [commit]


def test_handles_are_parsed_and_malformed_ones_refused(tmp_path, monkeypatch):
    assert hub.parse_handle("hf://google-bert/bert-base-uncased") == hub.Handle("google-bert/bert-base-uncased")
    assert hub.parse_handle("hf://org/name@refs/pr/1") == hub.Handle("org/name", "refs/pr/1")
    assert hub.handle_for_source("org/name@v1") == hub.Handle("org/name", "v1")
    existing = tmp_path / "org"
    (existing / "name").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert hub.handle_for_source("org/name") is None  # a local folder wins over a repository name
    for bad in ["hf://bert-base-uncased", "hf://org/name@", "hf://org/../name", "hf://org/na me"]:
        with pytest.raises(Exception, match="is not a Hugging Face repository"):
            hub.parse_handle(bad)


def test_a_preset_with_weights_pretrained_loads_its_repository(loopback, hub_env, tmp_path, capsys):
    from keras_bertology.tokenizers.base import Tokenizer
    from keras_bertology.errors import ConfigError
    from keras_bertology.models import FAMILIES

    repo = FAMILIES["bert"].presets["bert-tiny"]["hf_repo"]
    folder = write_checkpoint("bert", tmp_path / "published")
    loopback.publish(repo, folder)
    loaded = Backbone.from_preset("bert-tiny", weights="pretrained")
    expected = convert_hf_checkpoint(folder)[0]
    assert all(np.array_equal(a, b) for a, b in zip(loaded.get_weights(), expected.backbone.get_weights()))
    tokenizer = Tokenizer.from_preset("bert-tiny", weights="pretrained")
    assert tokenizer.vocab_size == len(WORDS)
    with pytest.raises(ConfigError, match="needs a preset with published weights.*bert-base"):
        Backbone.from_preset("roberta-tiny", weights="pretrained")
    with pytest.raises(ConfigError, match="weights='random'"):
        Backbone.from_preset("bert-tiny", weights="random")
    assert main(["presets"]) == 0
    listing = capsys.readouterr().out
    assert f"[weights: hf://{repo}]" in listing and "[weights: hf://google-bert/bert-base-uncased]" in listing


@pytest.mark.slow
def test_finetuning_starts_from_a_repository_by_name(bert_repo, hub_env, tmp_path):
    from keras_bertology.finetune.run import FinetuneOptions, finetune

    repo, _, commit = bert_repo
    results = finetune(FinetuneOptions(task="bbc-news", from_dir=f"hf://{repo}", epochs=1, max_examples=40,
                                       seq_len=16, no_export=True, verbose=0, out=str(tmp_path / "tuned")))
    assert results["encoder"]["family"] == "bert" and results["encoder"]["from"].endswith(commit)
