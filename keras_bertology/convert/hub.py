"""Checkpoints by name: `hf://ORG/NAME[@REVISION]`, fetched through huggingface_hub and converted once.

The download is huggingface_hub's own `snapshot_download`, so its cache
(`HF_HOME`, `HF_HUB_CACHE`), `HF_TOKEN`, `HF_HUB_OFFLINE`, `HF_ENDPOINT` and
progress bars all apply; they are read when a handle is loaded, so a notebook
may set them after importing. Only what the converter reads is fetched:
config.json, safetensors weights (one file, or the shards its index names) and
tokenizer files. Pickled weights (`pytorch_model.bin`) are never fetched:
unpickling runs code.

The converted model is cached beside the download, in the repository's cache
folder under `keras-bertology/<version>/<commit>/`: a run folder that
`from_preset` and `bertology convert` read. Keying by the resolved commit
means a moved branch converts again and an unchanged one converts nothing; in
offline mode nothing is requested at all. Processes converting one commit take
turns on a file lock, and the folder appears whole or not at all.
"""

import dataclasses
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from keras_bertology.errors import CheckpointError, ConfigError
from keras_bertology.extras import require_extra

HANDLE_PREFIX = "hf://"
CONFIG_FILE = "config.json"
SINGLE_WEIGHTS, WEIGHTS_INDEX = "model.safetensors", "model.safetensors.index.json"
WEIGHT_PATTERNS = (SINGLE_WEIGHTS, WEIGHTS_INDEX, "model-*-of-*.safetensors")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "merges.txt",
                   "spiece.model", "spm.model")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
CONVERTED_DIR = "keras-bertology"
REPORT_FILE = "conversion.json"
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
_TRUE = {"1", "ON", "YES", "TRUE"}


@dataclass(frozen=True)
class Handle:
    """A repository of the Hugging Face Hub and the revision asked for (None: its default branch)."""

    repo_id: str
    revision: str | None = None

    def __str__(self):
        return HANDLE_PREFIX + self.repo_id + (f"@{self.revision}" if self.revision else "")


def parse_handle(text):
    """The `Handle` of `hf://ORG/NAME[@REVISION]` (the prefix optional), or a ConfigError."""
    body = text[len(HANDLE_PREFIX):] if text.startswith(HANDLE_PREFIX) else text
    repo_id, _, revision = body.partition("@")
    if not _REPO_ID.fullmatch(repo_id) or ".." in repo_id or (revision == "" and "@" in body):
        raise ConfigError(f"{text!r} is not a Hugging Face repository: write {HANDLE_PREFIX}ORG/NAME or "
                          f"{HANDLE_PREFIX}ORG/NAME@REVISION (a branch, tag or commit)")
    return Handle(repo_id, revision or None)


def handle_for_source(text):
    """The `Handle` that `bertology convert --from-hf TEXT` names, or None for a local folder: an `hf://`
    handle always, ORG/NAME[@REVISION] when no such path exists here."""
    if text.startswith(HANDLE_PREFIX):
        return parse_handle(text)
    if Path(text).exists() or not _REPO_ID.fullmatch(text.partition("@")[0]):
        return None
    return parse_handle(text)


@dataclass(frozen=True)
class HubSettings:
    """The huggingface_hub environment as it is now (its own module read it at import)."""

    endpoint: str
    cache_dir: str
    offline: bool

    @classmethod
    def from_environment(cls):
        require_extra("huggingface_hub", "A hf:// handle")
        from huggingface_hub import constants

        env = os.environ
        if env.get("HF_HUB_CACHE"):
            cache = env["HF_HUB_CACHE"]
        elif env.get("HF_HOME"):
            cache = os.path.join(env["HF_HOME"], "hub")
        else:
            cache = constants.HF_HUB_CACHE
        offline = env["HF_HUB_OFFLINE"].upper() in _TRUE if "HF_HUB_OFFLINE" in env else constants.HF_HUB_OFFLINE
        endpoint = env.get("HF_ENDPOINT") or constants.ENDPOINT
        return cls(endpoint.rstrip("/"), os.path.expanduser(cache), offline)


def download(handle, settings=None):
    """The snapshot folder (`.../snapshots/<commit>`) holding the files the converter reads; a
    CheckpointError of one line when the hub or the cache cannot provide them."""
    settings = settings or HubSettings.from_environment()
    folder = Path(_snapshot(handle, settings, [CONFIG_FILE, *WEIGHT_PATTERNS, *TOKENIZER_FILES]))
    if not (folder / CONFIG_FILE).is_file():
        raise CheckpointError(f"{handle} has no {CONFIG_FILE}: it is not a transformers model repository")
    if (folder / WEIGHTS_INDEX).is_file():
        missing = [shard for shard in _indexed_shards(folder / WEIGHTS_INDEX) if not (folder / shard).is_file()]
        if missing:  # shards named other than model-XXXXX-of-YYYYY.safetensors
            _snapshot(handle, settings, missing)
    elif not (folder / SINGLE_WEIGHTS).is_file():
        raise CheckpointError(_no_safetensors(handle, folder, settings))
    return folder


def _snapshot(handle, settings, patterns):
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(handle.repo_id, revision=handle.revision, allow_patterns=patterns,
                                 cache_dir=settings.cache_dir, endpoint=settings.endpoint,
                                 local_files_only=settings.offline)
    except Exception as error:  # huggingface_hub's and httpx's errors, and OSError from the disk
        raise CheckpointError(_download_error(handle, error, settings)) from None


def _indexed_shards(index):
    try:
        return sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except (ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as error:
        raise CheckpointError(f"{index} is not a valid safetensors index: {error}") from None


def _no_safetensors(handle, folder, settings):
    from huggingface_hub import get_cached_repo_tree

    try:
        files = [entry.path for entry in get_cached_repo_tree(handle.repo_id, revision=folder.name,
                                                              cache_dir=settings.cache_dir)]
    except Exception:  # no listing cached: say what is missing without naming what is there
        files = []
    pickles = [name for name in files if name.endswith(PICKLE_SUFFIXES)]
    if pickles:
        return (f"{handle} has only pickled PyTorch weights ({', '.join(sorted(pickles))}), which keras-bertology "
                "never loads because unpickling runs code: load the model in transformers and save_pretrained() "
                "it (that writes model.safetensors), then pass that folder or a repository holding it")
    return f"{handle} has no {SINGLE_WEIGHTS} nor {WEIGHTS_INDEX}: nothing to convert"


def _download_error(handle, error, settings):
    """One line for what went wrong fetching `handle`."""
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError,
                                        RepositoryNotFoundError, RevisionNotFoundError)

    where = settings.endpoint
    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(error, RevisionNotFoundError):
        return f"{handle}: {handle.repo_id} has no revision {handle.revision!r} on {where}"
    if isinstance(error, GatedRepoError) or status in (401, 403):
        token = "HF_TOKEN is set but was refused" if os.environ.get("HF_TOKEN") else "HF_TOKEN is not set"
        return (f"{handle}: {where} refused access ({status}): the repository is private or gated, or does not "
                f"exist; {token}: set HF_TOKEN to a token that can read it (or run `hf auth login`)")
    if isinstance(error, RepositoryNotFoundError):
        return f"{handle}: no repository {handle.repo_id} on {where} (nor a local folder of that name)"
    if isinstance(error, LocalEntryNotFoundError):
        if settings.offline:
            return (f"{handle} is not in the Hugging Face cache {settings.cache_dir} and HF_HUB_OFFLINE is set: "
                    "load it once with a network, or unset HF_HUB_OFFLINE")
        cause = error.__cause__ or error
        return (f"{handle}: {where} cannot be reached and the Hugging Face cache {settings.cache_dir} does not "
                f"hold it ({_first_line(cause)})")
    if isinstance(error, HfHubHTTPError):
        return f"{handle}: {where} answered {status}: {_first_line(error)}"
    return f"{handle}: the download from {where} failed: {type(error).__name__}: {_first_line(error)}"


def _first_line(error):
    return next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)


def converted_run(handle, settings=None):
    """The run folder of `handle`'s model in keras-bertology's form, converted on first use and cached
    beside the download (keyed by repository, resolved commit and this library's version)."""
    from keras_bertology import __version__

    settings = settings or HubSettings.from_environment()
    snapshot = download(handle, settings)
    commit = snapshot.name
    versions = snapshot.parent.parent / CONVERTED_DIR / __version__
    target = versions / commit
    if (target / REPORT_FILE).is_file():
        return target
    versions.mkdir(parents=True, exist_ok=True)
    from huggingface_hub.utils import WeakFileLock

    with WeakFileLock(versions / f".{commit}.lock"):
        if not (target / REPORT_FILE).is_file():  # another process may have converted it meanwhile
            print(f"bertology: converting {handle} (commit {commit[:12]}) into {target}", file=sys.stderr)
            _convert_into(snapshot, target)
    return target


def _convert_into(snapshot, target):
    from keras_bertology.atomic import atomic_directory
    from keras_bertology.convert.hf_checkpoint import convert_hf_checkpoint
    from keras_bertology.runs import save_run_model

    run, report = convert_hf_checkpoint(snapshot)
    record = {**dataclasses.asdict(report),
              "tokenizer": type(run.tokenizer).__name__ if run.tokenizer is not None else None,
              "max_positions": getattr(run.backbone, "max_positions", None)}
    with atomic_directory(target) as staging:
        save_run_model(staging, run)
        (staging / REPORT_FILE).write_text(json.dumps(record, indent=2))


def read_report(run_dir):
    """What converting the cached run in `run_dir` reported (`ConversionReport`'s fields, the tokenizer's
    class name and the model's positions)."""
    return json.loads((Path(run_dir) / REPORT_FILE).read_text(encoding="utf-8"))
