"""What a finished run reports: metrics.json and a loss-curve PNG."""

import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from keras_bertology.atomic import atomic_file  # noqa: E402


def objective_summary(records, objectives):
    """Per objective, the loss and accuracy of the first and of the last logged window."""
    return {
        name: {"first": _window(records[0], name), "last": _window(records[-1], name)}
        for name in objectives
    }


def _window(record, objective):
    return {
        "step": record["step"],
        "loss": record.get(f"{objective}_loss"),
        "accuracy": record.get(f"{objective}_accuracy"),
    }


def write_metrics(path, payload):
    """Write metrics.json atomically."""
    with atomic_file(path) as staging:
        staging.write_text(json.dumps(payload, indent=2))


def plot_training_curves(records, objectives, path, title):
    """One panel of losses and one of accuracies, per logged window."""
    steps = [record["step"] for record in records]
    figure, (loss_axis, accuracy_axis) = plt.subplots(1, 2, figsize=(11, 4))
    for name in objectives:
        loss_axis.plot(steps, [r.get(f"{name}_loss") for r in records], marker=".", label=f"{name} loss")
        accuracy_axis.plot(steps, [r.get(f"{name}_accuracy") for r in records], marker=".",
                           label=f"{name} accuracy")
    loss_axis.set(xlabel="step", ylabel="cross-entropy", title="training loss")
    accuracy_axis.set(xlabel="step", ylabel="accuracy", title="training accuracy", ylim=(0, 1))
    for axis in (loss_axis, accuracy_axis):
        axis.grid(alpha=0.3)
        axis.legend()
    figure.suptitle(title)
    figure.tight_layout()
    with atomic_file(path) as staging:
        figure.savefig(staging, dpi=110, format="png")
    plt.close(figure)
