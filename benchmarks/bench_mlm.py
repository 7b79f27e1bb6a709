"""MLM pretraining throughput: keras-bertology `BertPretrainer` vs keras-hub `BertMaskedLM`.

Both systems get the same model shape, batch, sequence length, precision,
optimizer, loss, metric and the same synthetic in-memory `tf.data` batches,
and are trained with `model.fit(steps_per_epoch=...)`, so the whole Keras
train step (forward, loss, backward, AdamW update, metric update, input
fetch) is timed. Every measurement runs in a fresh Python subprocess (one
system, one configuration); the first `--warmup-steps` steps (tracing and
first-touch allocation included) are excluded. Rounds alternate
ours, keras-hub, ours, keras-hub, ... so slow drift of the machine hits both.

Run from the repository root:

    .venv/bin/python -m benchmarks.bench_mlm                 # full run, ~20 min on 2 cores
    .venv/bin/python -m benchmarks.bench_mlm --smoke         # tiny float32 shape, ~45 s
    .venv/bin/python -m benchmarks.bench_mlm --configs small_float32 --rounds 5

Results go to `<out>/<name>.json` and `<out>/<name>.md` (written atomically).
"""

import argparse
import contextlib
import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results"
VOCAB_SIZE = 30522
SYSTEMS = ("ours", "keras_hub")
SYSTEM_LABELS = {"ours": "keras-bertology", "keras_hub": "keras-hub"}
SUBPROCESS_TIMEOUT_S = 3600


@dataclasses.dataclass(frozen=True)
class Config:
    """One benchmark shape; `steps` and `warmup_steps` are its defaults."""

    num_layers: int
    hidden_size: int
    num_heads: int
    intermediate_size: int
    seq_len: int
    batch_size: int
    num_predictions: int
    dtype: str
    warmup_steps: int
    steps: int

    def describe(self):
        return (
            f"{self.num_layers}L/{self.hidden_size}H/{self.num_heads}A/{self.intermediate_size}F"
            f" seq {self.seq_len} batch {self.batch_size} {self.dtype}"
        )


def _pair(num_layers, hidden, heads, ffn, seq_len, batch, predictions, warmup, steps):
    shape = (num_layers, hidden, heads, ffn, seq_len, batch, predictions)
    return {
        dtype: Config(*shape, dtype=dtype, warmup_steps=warmup, steps=steps)
        for dtype in ("float32", "mixed_bfloat16")
    }


def _configs():
    configs = {}
    for prefix, pair in (
        ("small", _pair(4, 256, 4, 1024, 128, 32, 20, warmup=3, steps=20)),
        ("base", _pair(12, 768, 12, 3072, 128, 8, 20, warmup=3, steps=10)),
        ("tiny", _pair(2, 64, 2, 128, 32, 8, 5, warmup=1, steps=3)),
    ):
        for dtype, config in pair.items():
            configs[f"{prefix}_{dtype}"] = config
    return configs


CONFIGS = _configs()
FULL_CONFIGS = ("small_float32", "small_mixed_bfloat16", "base_float32", "base_mixed_bfloat16")
SMOKE_CONFIGS = ("tiny_float32",)


# --------------------------------------------------------------------------- worker side


def make_arrays(config, num_batches=4, seed=1234):
    """Synthetic MLM batches as numpy arrays, identical for both systems (fixed seed).

    Random token ids (above the special-token range), two segments, no padding,
    `num_predictions` distinct masked positions per row (never position 0 or
    the last one), random target ids and unit weights.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    rows, length, preds = num_batches * config.batch_size, config.seq_len, config.num_predictions
    token_ids = rng.integers(1000, VOCAB_SIZE, size=(rows, length), dtype=np.int32)
    segment_ids = np.zeros((rows, length), np.int32)
    segment_ids[:, length // 2 :] = 1
    padding_mask = np.ones((rows, length), np.int32)
    order = np.argsort(rng.random((rows, length - 2)), axis=1)[:, :preds] + 1
    mask_positions = np.sort(order, axis=1).astype(np.int32)
    mask_ids = rng.integers(1000, VOCAB_SIZE, size=(rows, preds), dtype=np.int32)
    mask_weights = np.ones((rows, preds), np.float32)
    features = {
        "token_ids": token_ids,
        "segment_ids": segment_ids,
        "padding_mask": padding_mask,
        "mask_positions": mask_positions,
    }
    return features, mask_ids, mask_weights


def make_dataset(config, system):
    """A repeating, prefetched `tf.data` pipeline of (x, y, sample_weight) in memory."""
    import tensorflow as tf

    features, mask_ids, mask_weights = make_arrays(config)
    if system == "ours":
        y, weights = {"mlm": mask_ids}, {"mlm": mask_weights}
    else:
        y, weights = mask_ids, mask_weights
    dataset = tf.data.Dataset.from_tensor_slices((features, y, weights))
    return dataset.batch(config.batch_size, drop_remainder=True).repeat().prefetch(tf.data.AUTOTUNE)


def build_model(config, system, jit_compile=False):
    """Random-init MLM model of `system`, compiled with the shared training set-up.

    Both get AdamW(1e-4), sparse categorical cross-entropy on logits averaged
    over the sample weights, and weighted sparse categorical accuracy as the
    only metric, so the train steps do the same work.
    """
    import keras

    loss = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction="mean_with_sample_weight"
    )
    accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
    optimizer = keras.optimizers.AdamW(1e-4)
    if system == "ours":
        from keras_bertology.models import BertBackbone, BertPretrainer

        backbone = BertBackbone(
            vocab_size=VOCAB_SIZE,
            num_layers=config.num_layers,
            num_heads=config.num_heads,
            hidden_size=config.hidden_size,
            intermediate_size=config.intermediate_size,
            max_positions=512,
            num_segments=2,
            use_pooler=True,
            dtype=config.dtype,
        )
        model = BertPretrainer(backbone, next_sentence_prediction=False)
        model.compile(
            optimizer=optimizer,
            loss={"mlm": loss},
            weighted_metrics={"mlm": [accuracy]},
            jit_compile=jit_compile,
        )
    elif system == "keras_hub":
        import keras_hub

        backbone = keras_hub.models.BertBackbone(
            vocabulary_size=VOCAB_SIZE,
            num_layers=config.num_layers,
            num_heads=config.num_heads,
            hidden_dim=config.hidden_size,
            intermediate_dim=config.intermediate_size,
            max_sequence_length=512,
            num_segments=2,
            dtype=config.dtype,
        )
        model = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
        model.compile(
            optimizer=optimizer,
            loss=loss,
            weighted_metrics=[accuracy],
            jit_compile=jit_compile,
        )
    else:
        raise ValueError(f"unknown system {system!r}")
    return model


def _cpu_seconds():
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _machine_cpu_seconds():
    """(busy, total, steal) CPU seconds of the whole machine so far, from /proc/stat (Linux).

    Steal is time the hypervisor gave our virtual CPUs to other machines.
    """
    try:
        with open("/proc/stat") as handle:
            fields = [int(v) for v in handle.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    steal = fields[7] if len(fields) > 7 else 0
    return (total - idle) / ticks, total / ticks, steal / ticks


def _current_rss_mib():
    """Current resident set size of this process in MiB (Linux), else None."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError):
        pass
    return None


def _load_average():
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def measure(config, system, warmup_steps, steps, jit_compile=False):
    """Train `warmup_steps + steps` steps in one `fit` call; time the last `steps`."""
    import resource

    import keras
    import numpy as np

    # Import the system's library first so its resident memory before the
    # model exists can be reported apart from the model's own peak.
    if system == "keras_hub":
        import keras_hub  # noqa: F401
    else:
        import keras_bertology.models  # noqa: F401
    baseline_mib = _current_rss_mib()

    started = time.perf_counter()
    keras.utils.set_random_seed(0)
    model = build_model(config, system, jit_compile=jit_compile)
    dataset = make_dataset(config, system)
    build_s = time.perf_counter() - started

    class StepTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.fit_start = None
            self.timed_start = None
            self.timed_cpu = None
            self.step_begin = None
            self.step_ms = []
            self.timed_end = None
            self.timed_cpu_end = None
            self.last_loss = None
            self.load_start = None
            self.machine_start = self.machine_end = None

        def on_train_begin(self, logs=None):
            self.fit_start = time.perf_counter()

        def on_train_batch_begin(self, batch, logs=None):
            if batch == warmup_steps:
                self.timed_start = time.perf_counter()
                self.timed_cpu = _cpu_seconds()
                self.load_start = _load_average()
                self.machine_start = _machine_cpu_seconds()
            self.step_begin = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            # Reading the loss makes sure the step has really finished.
            self.last_loss = float(np.asarray(logs["loss"]))
            now = time.perf_counter()
            if batch >= warmup_steps:
                self.step_ms.append(1000.0 * (now - self.step_begin))
            self.timed_end = now
            self.timed_cpu_end = _cpu_seconds()
            self.machine_end = _machine_cpu_seconds()

    timer = StepTimer()
    model.fit(
        dataset, epochs=1, steps_per_epoch=warmup_steps + steps, verbose=0, callbacks=[timer]
    )
    timed_s = timer.timed_end - timer.timed_start
    cpu_count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    own_cpu_s = timer.timed_cpu_end - timer.timed_cpu
    others_busy = steal = None
    if timer.machine_start and timer.machine_end:
        busy, total, stolen = (end - start for end, start in zip(timer.machine_end, timer.machine_start))
        if total > 0:
            others_busy = max(0.0, busy - own_cpu_s) / total
            steal = stolen / total
    return {
        "system": system,
        "samples_per_sec": steps * config.batch_size / timed_s,
        "ms_per_step": 1000.0 * timed_s / steps,
        "median_step_ms": statistics.median(timer.step_ms),
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        # Resident memory after importing TF/Keras and the system's library,
        # before building the model: peak_mib - baseline_mib is the training itself.
        "baseline_mib": baseline_mib,
        "cpu_busy": own_cpu_s / (timed_s * cpu_count),
        # Process CPU time per step: less sensitive than wall time to other
        # processes competing for the cores (but it counts spin-waiting too).
        "cpu_ms_per_step": 1000.0 * own_cpu_s / steps,
        "timed_steps": steps,
        "warmup_steps": warmup_steps,
        "warmup_s": timer.timed_start - timer.fit_start,
        "build_s": build_s,
        "timed_s": timed_s,
        "num_params": int(model.count_params()),
        "num_trainable_variables": len(model.trainable_variables),
        "final_loss": timer.last_loss,
        # 1-minute load average of the whole machine before / after the timed
        # steps: well above the core count means other processes competed.
        "loadavg_start": timer.load_start,
        "loadavg_end": _load_average(),
        # Share of the machine's CPU time used by *other* processes during the
        # timed steps (from /proc/stat): 0 means the benchmark had the machine.
        "others_cpu_busy": others_busy,
        "steal": steal,
    }


def worker_main(args):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    config = CONFIGS[args.config]
    result = measure(config, args.system, args.warmup_steps, args.steps, args.jit_compile)
    with atomic_write(Path(args.result_file)) as handle:
        json.dump(result, handle)


# --------------------------------------------------------------------------- driver side


@contextlib.contextmanager
def atomic_write(path):
    """Open a temporary file next to `path`; it replaces `path` only if the block succeeds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(staging, 0o666 & ~umask)  # mkstemp creates 0600; give the usual file mode
        with os.fdopen(fd, "w") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(staging, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(staging)


def write_report_files(out_dir, name, report, markdown):
    """(`<name>.json`, `<name>.md`) in `out_dir`: the report and its markdown, each replaced whole."""
    json_path, md_path = Path(out_dir) / f"{name}.json", Path(out_dir) / f"{name}.md"
    with atomic_write(json_path) as handle:
        json.dump(report, handle, indent=2)
        handle.write("\n")
    with atomic_write(md_path) as handle:
        handle.write(markdown)
    return json_path, md_path


def write_and_print_report(out_dir, name, report, markdown):
    """`write_report_files`, then the markdown printed: how the benchmarks that write one report end."""
    write_report_files(out_dir, name, report, markdown)
    print(markdown)


def _worker_env():
    env = dict(os.environ)
    env["KERAS_BACKEND"] = "tensorflow"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return env


def wait_for_quiet(max_busy, max_wait_s, window_s=5.0, windows=3):
    """Sleep until the machine was less than `max_busy` busy for `windows` windows in a row.

    Nothing of ours runs meanwhile, so all measured CPU use is other processes'.
    Gives up after `max_wait_s`; returns the seconds waited.
    """
    started = time.perf_counter()
    quiet = 0
    while quiet < windows and time.perf_counter() - started < max_wait_s:
        before = _machine_cpu_seconds()
        time.sleep(window_s)
        after = _machine_cpu_seconds()
        if before is None or after is None:
            break
        busy, total = after[0] - before[0], after[1] - before[1]
        quiet = quiet + 1 if total > 0 and busy / total <= max_busy else 0
    return time.perf_counter() - started


def run_worker(config_name, system, warmup_steps, steps, jit_compile, out_dir):
    """One measurement in a fresh interpreter; returns the worker's result dict."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".worker_", suffix=".tmp", dir=out_dir) as tmp:
        result_file = Path(tmp) / "result.json"
        command = [
            sys.executable, str(Path(__file__).resolve()), "--worker",
            "--system", system, "--configs", config_name,
            "--warmup-steps", str(warmup_steps), "--steps", str(steps),
            "--result-file", str(result_file),
        ]
        if jit_compile:
            command.append("--jit-compile")
        started = time.perf_counter()
        proc = subprocess.run(
            command, env=_worker_env(), cwd=REPO_ROOT, capture_output=True, text=True,
            timeout=SUBPROCESS_TIMEOUT_S,
        )
        if proc.returncode != 0 or not result_file.exists():
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
            raise RuntimeError(
                f"worker {system}/{config_name} failed with exit code {proc.returncode}:\n{tail}"
            )
        result = json.loads(result_file.read_text())
    result["process_s"] = time.perf_counter() - started
    return result


def _median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _memory_text(summary):
    """Peak MiB, with the growth over the post-import baseline when known."""
    text = f"{summary['peak_mib']:.0f}"
    if summary.get("baseline_mib") is not None:
        text += f" (+{summary['peak_mib'] - summary['baseline_mib']:.0f})"
    return text


def summarize(rounds):
    """Median over rounds of one system's measurements, plus all round values."""
    return {
        "samples_per_sec": statistics.median(r["samples_per_sec"] for r in rounds),
        "ms_per_step": statistics.median(r["ms_per_step"] for r in rounds),
        "peak_mib": statistics.median(r["peak_mib"] for r in rounds),
        "baseline_mib": _median_or_none(r.get("baseline_mib") for r in rounds),
        "cpu_busy": statistics.median(r["cpu_busy"] for r in rounds),
        "cpu_ms_per_step": statistics.median(r["cpu_ms_per_step"] for r in rounds),
        "num_params": rounds[0]["num_params"],
        "num_trainable_variables": rounds[0]["num_trainable_variables"],
        "rounds": rounds,
    }


# The processor's vector extensions that decide the CPU kernels' speed (oneDNN's float32 and bf16 paths), as
# /proc/cpuinfo's flags name them.
VECTOR_EXTENSIONS = (("avx2", "AVX2"), ("avx512f", "AVX-512"), ("avx512_vnni", "AVX-512-VNNI"),
                     ("avx512_bf16", "AVX-512-BF16"), ("amx_bf16", "AMX-BF16"))


# The settings that hold the kernels below what the processor has (to measure an AVX2-only processor's kernels
# on one with AVX-512): oneDNN's (TensorFlow's and PyTorch's), PyTorch's own, and XLA's code generation.
ISA_CAPS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")
XLA_ISA_CAP = "--xla_cpu_max_isa="


def describe_processor(machine):
    """'2 usable CPUs (AMD EPYC ...; AVX2, AVX-512, ...)': the processor as a report's header names it, and the
    settings that held its kernels to fewer extensions, where a run set them."""
    recorded = machine.get("vector_extensions")  # absent from reports written before they were recorded
    extensions = "" if recorded is None else "; " + ", ".join(recorded or ["no AVX2"])
    caps = machine.get("isa_caps")
    held = f"; kernels held by {', '.join(f'{name}={value}' for name, value in caps.items())}" if caps else ""
    return f"{machine['usable_cpus']} usable CPUs ({machine['cpu_model']}{extensions}{held})"


def isa_caps(environ=os.environ):
    """{setting: value} of the ISA_CAPS and XLA's cap (in XLA_FLAGS) that `environ` sets."""
    caps = {name: environ[name] for name in ISA_CAPS if environ.get(name)}
    xla = [flag.split("=", 1)[1] for flag in environ.get("XLA_FLAGS", "").split() if flag.startswith(XLA_ISA_CAP)]
    return caps | ({"xla_cpu_max_isa": xla[-1]} if xla else {})


def processor_facts():
    """{cpu_model, vector_extensions} from /proc/cpuinfo (None and [] where it cannot be read), and the settings
    that hold the kernels to fewer of them (`isa_caps`)."""
    cpu_model, flags = None, set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu_model is None:
                cpu_model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    return {"cpu_model": cpu_model, "vector_extensions": [name for flag, name in VECTOR_EXTENSIONS if flag in flags],
            "isa_caps": isa_caps()}


def machine_info():
    def version(package):
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return None

    commit = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        proc = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
            text=True, timeout=10,
        )
        commit = proc.stdout.strip() or None
    return {
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        **processor_facts(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "tensorflow": version("tensorflow"),
        "keras": version("keras"),
        "keras_hub": version("keras-hub"),
        "numpy": version("numpy"),
        "git_commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _percent(value):
    return "n/a" if value is None else f"{value:.0%}"


def render_markdown(report):
    settings, machine = report["settings"], report["machine"]
    lines = [
        f"# MLM pretraining throughput: {report['name']}",
        "",
        f"keras-bertology `BertPretrainer` (MLM only) vs keras-hub `BertMaskedLM`, random init, "
        f"vocab {VOCAB_SIZE}, AdamW(1e-4), jit_compile={settings['jit_compile']}, "
        f"median of {settings['rounds']} alternating rounds, each in a fresh process.",
        "",
        f"Machine: {machine['cpu_count']} CPUs ({machine['cpu_model']}), TF {machine['tensorflow']}, "
        f"Keras {machine['keras']}, keras-hub {machine['keras_hub']}, {machine['date']}.",
        "",
        "| config | shape | seq | batch | precision | ours samples/s | keras-hub samples/s "
        "| ratio ours/hub | ours ms/step | keras-hub ms/step | ours peak MiB | keras-hub peak MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, entry in report["configs"].items():
        shape = entry["shape"]
        ours, hub = entry["systems"]["ours"], entry["systems"]["keras_hub"]
        lines.append(
            f"| {name} | {shape['num_layers']}L/{shape['hidden_size']}H/{shape['num_heads']}A/"
            f"{shape['intermediate_size']}F | {shape['seq_len']} | {shape['batch_size']} "
            f"| {shape['dtype']} | {ours['samples_per_sec']:.2f} | {hub['samples_per_sec']:.2f} "
            f"| {entry['ratio_vs_keras_hub']:.3f} | {ours['ms_per_step']:.1f} | {hub['ms_per_step']:.1f} "
            f"| {_memory_text(ours)} | {_memory_text(hub)} |"
        )
    lines += [
        "",
        "ratio > 1: keras-bertology is faster. Expect +-20-30% noise between runs on a shared",
        "machine; compare ratios measured within one run, not absolute numbers across runs.",
        "Peak MiB is the worker's max RSS; in brackets its growth over the RSS after importing",
        "TensorFlow, Keras and the system's library (keras-hub also loads tensorflow-text).",
        "",
        "Per-round samples/s (process CPU ms per step; share of the machine's CPU used by other",
        "processes during the timed steps: more than a few % means the round was contended):",
        "",
    ]

    def rounds_text(summary):
        return ", ".join(
            f"{r['samples_per_sec']:.2f} ({r['cpu_ms_per_step']:.0f} cpu-ms, "
            f"others {_percent(r.get('others_cpu_busy'))})"
            for r in summary["rounds"]
        )

    for name, entry in report["configs"].items():
        systems = entry["systems"]
        lines.append(
            f"- {name}: ours {rounds_text(systems['ours'])}; "
            f"keras-hub {rounds_text(systems['keras_hub'])}"
        )
        dropped = sum(len(v) for v in entry.get("discarded_contended_rounds", {}).values())
        if dropped or entry.get("contended_rounds_kept"):
            lines.append(
                f"  ({dropped} contended measurement(s) discarded and repeated; "
                f"{entry.get('contended_rounds_kept', 0)} contended round(s) kept after all retries)"
            )
    return "\n".join(lines) + "\n"


def write_report(report, out_dir):
    return write_report_files(out_dir, report["name"], report, render_markdown(report))


def driver_main(args):
    config_names = args.configs or list(SMOKE_CONFIGS if args.smoke else FULL_CONFIGS)
    unknown = [name for name in config_names if name not in CONFIGS]
    if unknown:
        raise SystemExit(f"unknown configs {unknown}; choose from {sorted(CONFIGS)}")
    rounds = args.rounds or (1 if args.smoke else 3)
    name = args.name or ("mlm_throughput_smoke" if args.smoke else "mlm_throughput")
    report = {
        "benchmark": "mlm_throughput",
        "name": name,
        "smoke": bool(args.smoke),
        "settings": {
            "rounds": rounds,
            "warmup_steps": args.warmup_steps,
            "steps": args.steps,
            "jit_compile": bool(args.jit_compile),
            "optimizer": "AdamW(learning_rate=1e-4)",
            "loss": "SparseCategoricalCrossentropy(from_logits=True, reduction='mean_with_sample_weight')",
            "metrics": "weighted SparseCategoricalAccuracy",
            "vocab_size": VOCAB_SIZE,
            "order": "per config: round r runs ours then keras-hub, each in a fresh subprocess",
            "max_others_busy": args.max_others_busy,
            "contention_retries": args.contention_retries,
            "quiet_wait_s": args.quiet_wait,
        },
        "machine": machine_info(),
        "configs": {},
    }
    started = time.perf_counter()
    print(f"MLM throughput benchmark -> {Path(args.out) / name}.json; configs {config_names}, "
          f"{rounds} round(s)", flush=True)
    for config_name in config_names:
        config = CONFIGS[config_name]
        warmup = args.warmup_steps if args.warmup_steps is not None else config.warmup_steps
        steps = args.steps if args.steps is not None else config.steps
        per_system = {system: [] for system in SYSTEMS}
        print(f"[{config_name}] {config.describe()}, {warmup} warm-up + {steps} timed steps",
              flush=True)
        discarded = {system: [] for system in SYSTEMS}
        for round_index in range(rounds):
            for system in SYSTEMS:
                for attempt in range(args.contention_retries + 1):
                    result = run_worker(config_name, system, warmup, steps, args.jit_compile, args.out)
                    others = result.get("others_cpu_busy")
                    result["contended"] = others is not None and others > args.max_others_busy
                    print(
                        f"[{config_name}] round {round_index + 1}/{rounds} {SYSTEM_LABELS[system]:>15}: "
                        f"{result['samples_per_sec']:8.2f} samples/s {result['ms_per_step']:9.1f} ms/step "
                        f"peak {result['peak_mib']:6.0f} MiB cpu-busy {result['cpu_busy']:.0%} "
                        f"others {_percent(others)} (process {result['process_s']:.0f} s)"
                        + (" CONTENDED" if result["contended"] else ""),
                        flush=True,
                    )
                    if not result["contended"] or attempt == args.contention_retries:
                        break
                    discarded[system].append(result)
                    print(f"[{config_name}] other processes used {_percent(others)} of the CPU "
                          f"(> {_percent(args.max_others_busy)}): waiting up to {args.quiet_wait:.0f} s "
                          f"for a quiet machine, then measuring again", flush=True)
                    waited = wait_for_quiet(args.max_others_busy, args.quiet_wait)
                    print(f"[{config_name}] waited {waited:.0f} s", flush=True)
                per_system[system].append(result)
        systems = {system: summarize(per_system[system]) for system in SYSTEMS}
        ratio = systems["ours"]["samples_per_sec"] / systems["keras_hub"]["samples_per_sec"]
        report["configs"][config_name] = {
            "shape": {**dataclasses.asdict(config), "vocab_size": VOCAB_SIZE},
            "warmup_steps": warmup,
            "steps": steps,
            "systems": systems,
            "ratio_vs_keras_hub": ratio,
            "discarded_contended_rounds": discarded,
            "contended_rounds_kept": sum(r["contended"] for rs in per_system.values() for r in rs),
            "round_ratios": [
                o["samples_per_sec"] / h["samples_per_sec"]
                for o, h in zip(per_system["ours"], per_system["keras_hub"])
            ],
        }
        report["elapsed_s"] = time.perf_counter() - started
        json_path, md_path = write_report(report, args.out)
        print(f"[{config_name}] median: ours {systems['ours']['samples_per_sec']:.2f}, keras-hub "
              f"{systems['keras_hub']['samples_per_sec']:.2f} samples/s, ratio {ratio:.3f}", flush=True)
    print(f"wrote {json_path} and {md_path} in {time.perf_counter() - started:.0f} s", flush=True)
    print(render_markdown(report), flush=True)
    return report


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", metavar="NAME",
                        help=f"configurations to run (default: {' '.join(FULL_CONFIGS)}; "
                             f"with --smoke: {' '.join(SMOKE_CONFIGS)}); all: {' '.join(CONFIGS)}")
    parser.add_argument("--rounds", type=int, help="alternating rounds per config (default 3, smoke 1)")
    parser.add_argument("--warmup-steps", type=int, help="untimed steps first (default per config)")
    parser.add_argument("--steps", type=int, help="timed steps (default per config)")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, 1 round: a quick functional check")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="output directory")
    parser.add_argument("--name", help="output file stem (default mlm_throughput[_smoke])")
    parser.add_argument("--jit-compile", action="store_true", help="XLA-compile both train steps")
    parser.add_argument("--max-others-busy", type=float, default=0.10,
                        help="a round during which other processes used more than this share of "
                             "the machine's CPU time counts as contended (default 0.10)")
    parser.add_argument("--contention-retries", type=int,
                        help="how often a contended round is measured again (default 2, smoke 0)")
    parser.add_argument("--quiet-wait", type=float, default=600.0,
                        help="before measuring a contended round again, wait up to this many "
                             "seconds for the machine to be quiet (default 600)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--system", choices=SYSTEMS, help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.contention_retries is None:
        args.contention_retries = 0 if args.smoke else 2
    for flag in ("rounds", "steps"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.warmup_steps is not None and args.warmup_steps < 1:
        parser.error("--warmup-steps must be at least 1 (the first step traces the graph)")
    return args


def _exit_on_sigterm(signum, frame):
    # Turn SIGTERM into an exception so subprocess.run kills the running worker.
    raise SystemExit(128 + signum)


def main(argv=None):
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if args.worker:
        args.config = args.configs[0]
        worker_main(args)
    else:
        driver_main(args)


if __name__ == "__main__":
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    main()
