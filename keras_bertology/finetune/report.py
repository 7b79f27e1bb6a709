"""What a fine-tuning run reports besides results.json: a Markdown table and a training-curve PNG."""

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from keras_bertology.atomic import atomic_file  # noqa: E402


def results_markdown(results):
    """A table per split: the metrics at the best dev epoch and on test, then the dev scores per epoch."""
    encoder = results["encoder"]
    names = list(results["test"])
    lines = [
        f"# {results['task']} ({results['kind']})",
        "",
        f"Encoder: {encoder['family']} {encoder['preset'] or ''} from `{encoder['from']}`"
        + (" (re-initialised)" if encoder["random_init"] else "") + f", {encoder['parameters']:,} parameters.",
        f"Data: {results['data']}",
        f"Recipe: {', '.join(f'{k} {v}' for k, v in results['recipe'].items())}; best dev epoch "
        f"{results['best_epoch']} by {results['primary_metric']}.",
        "",
        "| split | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for split in ("dev", "test"):
        lines.append(f"| {split} | " + " | ".join(f"{results[split][n]:.4f}" for n in names) + " |")
    lines += ["", "| epoch | train loss | " + " | ".join(f"dev {n}" for n in names) + " |",
              "|---|---|" + "---|" * len(names)]
    for record in results["history"]:
        lines.append(f"| {record['epoch']} | {record['train_loss']:.4f} | "
                     + " | ".join(f"{record['dev'][n]:.4f}" for n in names) + " |")
    return "\n".join(lines) + "\n"


def plot_finetuning(results, path):
    """Training loss by step and the dev metrics by epoch, the best epoch marked."""
    figure, (loss_axis, dev_axis) = plt.subplots(1, 2, figsize=(11, 4))
    losses = np.asarray(results["step_losses"])
    steps = np.arange(1, len(losses) + 1)
    window = max(1, min(20, len(losses) // 10))
    smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
    loss_axis.plot(steps, losses, alpha=0.3, label="each step")
    loss_axis.plot(steps[window - 1:], smooth, label=f"mean of {window} steps")
    loss_axis.set(xlabel="step", ylabel="cross-entropy", title="training loss")
    loss_axis.legend()
    epochs = [record["epoch"] for record in results["history"]]
    dev_axis.set_xticks(epochs)
    for name in results["dev"]:
        dev_axis.plot(epochs, [record["dev"][name] for record in results["history"]], marker="o", label=name)
    dev_axis.axvline(results["best_epoch"], color="grey", linestyle=":", label="best epoch")
    dev_axis.set(xlabel="epoch", ylabel="score", title="dev split", ylim=(0, 1))
    dev_axis.legend()
    for axis in (loss_axis, dev_axis):
        axis.grid(alpha=0.3)
    encoder = results["encoder"]
    figure.suptitle(f"{results['task']}: {encoder['family']} {encoder['preset'] or ''}"
                    + (" from random init" if encoder["random_init"] else ""))
    figure.tight_layout()
    with atomic_file(path) as staging:
        figure.savefig(staging, dpi=110, format="png")
    plt.close(figure)
