"""Large batches: gradient accumulation (`--accumulate`), Keras's optimizers with the library's additions
(`--optimizer`), the schedules (`--schedule`, `--warmup-steps`) and held-out evaluation (`--eval-every`)."""

import json

import keras
import numpy as np
import pytest

from keras_bertology.data.corpus import default_corpus_paths
from keras_bertology.data.pipeline import make_dataset
from keras_bertology.errors import ConfigError
from keras_bertology.models.registry import get_family
from keras_bertology.pretraining import pretrain as pretrain_module
from keras_bertology.pretraining.held_out import eval_windows, split_off_eval_documents
from keras_bertology.engine.optimization import (
    OPTIMIZERS, WarmupCosineDecay, WarmupPolynomialDecay, learning_rate_schedule, make_optimizer)
from keras_bertology.engine.model_batches import micro_batches, model_batches
from keras_bertology.engine.choices import RATE_FACTORS
from keras_bertology.pretraining.options import PretrainOptions

VOCAB, LENGTH, BATCH = 120, 24, 16
TOKENIZER = type("Tokenizer", (), dict(vocab_size=VOCAB, pad_id=0, cls_id=2, sep_id=3, mask_id=4,
                                       special_ids=[0, 1, 2, 3, 4], word_start_table=np.ones(VOCAB, bool)))()


def _albert():
    """ALBERT-Tiny without dropout (its masks would differ with the rows a step holds): MLM and SOP."""
    family = get_family("albert")
    keras.utils.set_random_seed(0)
    backbone = family.backbone_cls(**family.backbone_config("albert-tiny", vocab_size=VOCAB, dropout=0.0,
                                                            attention_dropout=0.0, num_layers=2))
    return family, family.build_pretrainer(backbone, None, "albert-tiny", BATCH)


def _batches(family, model, count, accumulate=1):
    """`count` global batches of BATCH sentence pairs, masked (MLM weights vary from row to row), as the
    model takes them, in `accumulate` micro-batches each."""
    rng = np.random.default_rng(0)
    ids = rng.integers(5, VOCAB, (4 * BATCH, LENGTH)).astype("int32")
    ids[:, 0], ids[:, LENGTH // 2], ids[:, -1] = 2, 3, 3
    instances = {"token_ids": ids, "segment_ids": (np.arange(LENGTH) > LENGTH // 2).astype("int32")[None].repeat(
        4 * BATCH, 0), "sop_labels": rng.integers(0, 2, 4 * BATCH).astype("int32")}
    masker = family.build_masker(TOKENIZER, 4)
    return micro_batches(model_batches(make_dataset(instances, BATCH, masker=masker, seed=3).take(count), model),
                         BATCH, accumulate)


def _trained(accumulate, updates=4, kind="adamw"):
    family, model = _albert()
    model.compile(optimizer=make_optimizer(kind, 1e-2, updates, accumulate=accumulate))
    model.fit(_batches(family, model, updates, accumulate), epochs=1, steps_per_epoch=updates * accumulate,
              verbose=0)
    return model


# One batch of 16 and four micro-batches of 4 sum the same per-token gradients in another order, and each
# micro-batch's loss divides by the whole batch's mean weight (split_features runs before the split): float32
# rounding (~1e-7 relative per operation, through 4 updates at 1e-2 with clipping at norm 1) is all that
# differs. Measured: about 2e-7. Updating every micro-batch, or averaging each micro-batch's own masked
# tokens, moves the weights by 1e-3 or more.
TOLERANCE = 1e-5


def test_four_micro_batches_give_the_weights_of_one_batch_of_four_times_their_rows():
    whole, accumulated = _trained(accumulate=1), _trained(accumulate=4)
    assert int(accumulated.optimizer.iterations) == int(whole.optimizer.iterations) == 4  # updates, not batches
    gap = max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
              for a, b in zip(whole.trainable_weights, accumulated.trainable_weights))
    assert gap < TOLERANCE
    moved = max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
                for a, b in zip(whole.trainable_weights, _albert()[1].trainable_weights))
    assert moved > 100 * TOLERANCE  # the updates did move the weights


def test_the_schedule_is_read_at_the_count_of_updates_while_micro_batches_accumulate():
    schedule = learning_rate_schedule("linear", 1e-2, 10, warmup_steps=4)
    optimizer = make_optimizer("lamb", 1e-2, 10, warmup_steps=4, accumulate=3)
    variable = keras.Variable(np.ones(3, "float32"))
    optimizer.build([variable])
    for micro_batch in range(8):  # two updates and a third begun
        optimizer.apply([keras.ops.ones(3)], [variable])
    assert int(optimizer.iterations) == 2
    assert float(optimizer.learning_rate) == pytest.approx(float(schedule(2)))


@pytest.mark.parametrize("kind", OPTIMIZERS)
def test_each_optimizer_trains_both_objectives_of_albert_and_keeps_the_library_additions(kind):
    """24 updates on the same two batches: MLM and SOP losses fall. A rate factor of 0 keeps the
    embeddings where they were (the layer-wise rates apply), norms and biases get no weight decay, and the
    optimizer round-trips through its config with both."""
    family, model = _albert()
    embeddings = [variable.path for variable in model.backbone.trainable_weights if "embedding" in variable.path]
    multipliers = {path: 0.0 for path in embeddings}
    # Each at its default rate's share of AdamW's (LAMB and Adafactor 10x, Lion a third).
    optimizer = make_optimizer(kind, 3e-3 * RATE_FACTORS[kind], 24, warmup_steps=0, lr_multipliers=multipliers,
                               weight_decay=0.0)
    model.compile(optimizer=optimizer)
    data = _batches(family, model, 2).cache().repeat()
    before = {variable.path: np.asarray(variable) for variable in model.trainable_weights}
    first = model.evaluate(data, steps=2, return_dict=True, verbose=0)
    model.fit(data, epochs=1, steps_per_epoch=24, verbose=0)
    last = model.evaluate(data, steps=2, return_dict=True, verbose=0)
    for objective in ("mlm", "sop"):
        assert last[f"{objective}_loss"] < first[f"{objective}_loss"] - 0.01, (objective, first, last)
    for variable in model.trainable_weights:
        unchanged = np.array_equal(np.asarray(variable), before[variable.path])
        assert unchanged == (variable.path in multipliers), variable.path
    decayed = {variable.path: optimizer._use_weight_decay(variable) for variable in model.trainable_weights}
    assert not any(decayed[path] for path in decayed if path.endswith(("bias", "gamma", "beta")))
    assert any(decayed.values())
    rebuilt = type(optimizer).from_config(optimizer.get_config())
    assert (rebuilt.lr_multipliers, rebuilt.no_decay_names) == (optimizer.lr_multipliers, optimizer.no_decay_names)


def test_the_schedules_warm_up_then_fall_to_zero_in_their_shapes():
    steps, warmup = 100, 20
    for schedule in (WarmupPolynomialDecay(1.0, warmup, steps, 2.0), WarmupCosineDecay(1.0, warmup, steps)):
        rates = np.array([float(schedule(step)) for step in range(steps + 1)])
        np.testing.assert_allclose(rates[:warmup + 1], np.arange(warmup + 1) / warmup, rtol=1e-6)
        assert rates[-1] == pytest.approx(0.0, abs=1e-7) and (np.diff(rates[warmup:]) <= 1e-7).all()
    progress = 0.5  # halfway through the decay
    assert float(WarmupPolynomialDecay(1.0, warmup, steps, 2.0)(60)) == pytest.approx((1 - progress) ** 2)
    assert float(WarmupCosineDecay(1.0, warmup, steps)(60)) == pytest.approx(0.5 * (1 + np.cos(np.pi * progress)))
    no_warmup = learning_rate_schedule("polynomial", 1.0, steps, warmup_steps=0, power=2.0)
    assert float(no_warmup(0)) == 1.0 and float(no_warmup(50)) == pytest.approx(0.25)  # the peak at once


@pytest.mark.parametrize("flags, message", [
    (dict(accumulate=3), "multiple of --accumulate 3"),
    (dict(accumulate=2, model="xlnet", preset="xlnet-tiny"), "memory"),
    (dict(warmup_steps=700), "--warmup-steps 700 is more than the run's --steps 600"),
    (dict(eval_every=601), "--eval-every 601"),
    (dict(eval_every=10, data="shards", preset="bert-tiny"), "--eval-every holds documents"),
    (dict(optimizer="sgd"), "--optimizer must be one of adamw, lamb, lion, adafactor"),
    (dict(decay_power=0.0), "--decay-power"),
    (dict(accumulate=0), "--accumulate"),
])
def test_large_batch_flags_that_cannot_work_are_refused(flags, message):
    with pytest.raises(ConfigError, match=message):
        PretrainOptions(**{"batch_size": 32, **flags}).validate()


def test_albert_trains_with_lamb_and_the_others_with_adamw_unless_told():
    albert, bert = get_family("albert"), get_family("bert")
    assert PretrainOptions(model="albert").optimizer_name(albert) == "lamb"
    assert PretrainOptions(model="bert").optimizer_name(bert) == "adamw"
    # The family's rate is its own optimizer's; another takes it scaled (LAMB steps relative to each weight).
    assert PretrainOptions(model="albert", optimizer="adamw").peak_learning_rate(albert) == pytest.approx(1e-3)
    assert PretrainOptions(model="bert", optimizer="lion").peak_learning_rate(bert) == pytest.approx(1e-3 / 3)
    assert PretrainOptions(model="bert", optimizer="lion", learning_rate=5e-4).peak_learning_rate(bert) == 5e-4


def test_held_out_documents_never_reach_training():
    rng = np.random.default_rng(0)
    many = [[f"document {d} sentence {s}" for s in range(rng.integers(3, 40))] for d in range(60)]
    few = [[f"play {d} line {s}" for s in range(400)] for d in range(3)]
    for documents in (many, few):
        kept, held = split_off_eval_documents(documents, np.random.default_rng(1))
        trained = {sentence for document in kept for sentence in document}
        evaluated = {sentence for document in held for sentence in document}
        assert not trained & evaluated and trained | evaluated == {s for d in documents for s in d}
        share = len(evaluated) / (len(trained) + len(evaluated))
        assert 0.05 <= share < 0.05 + max(map(len, documents)) / len(trained)  # at most one document over
    assert len(split_off_eval_documents(many, np.random.default_rng(1))[1]) < len(many)  # whole documents
    with pytest.raises(ConfigError, match="--eval-every needs documents to hold out"):
        split_off_eval_documents([["one", "two"]] * 3, rng)


def test_evaluations_come_at_the_window_ends_where_they_are_due():
    assert eval_windows(12, 5, 10) == [2, 4, 6, 8, 10, 12]  # windows of 5, every 10 updates
    assert eval_windows(10, 50, 120) == [3, 5, 8, 10]  # 120, 240, 360, 480 fall in windows 3, 5, 8, 10
    assert PretrainOptions(steps=600, eval_every=10).steps_per_window == 10
    assert PretrainOptions(steps=600, eval_every=75).steps_per_window == 25  # a divisor of 75
    assert PretrainOptions(steps=600, eval_every=97).steps_per_window == 50  # 97 is prime: the usual windows


@pytest.mark.slow
def test_albert_with_lamb_accumulating_four_micro_batches_evaluates_held_out_documents(tmp_path, monkeypatch):
    """The issue's run, in miniature: `--model albert --optimizer lamb --accumulate 4 --eval-every 10`.
    Training and held-out losses fall; metrics.json, TensorBoard and the plot hold the held-out curves;
    and the instances scored are built from documents that training never saw."""
    built = {}

    def spying(name, function):
        def spy(family, tokenized, *args, **kwargs):
            # Sentences of 12 tokens or more: shorter ones ("Exeunt.", "My lord?") recur across documents.
            built[name] = {tuple(sentence) for document in tokenized for sentence in document if len(sentence) >= 12}
            return function(family, tokenized, *args, **kwargs)
        monkeypatch.setattr(pretrain_module, name, spy)

    spying("build_instances", pretrain_module.build_instances)
    spying("eval_dataset", pretrain_module.eval_dataset)
    corpus = [str(path) for path in default_corpus_paths()[:3]]
    metrics = pretrain_module.pretrain(PretrainOptions(
        model="albert", preset="albert-tiny", optimizer="lamb", accumulate=4, eval_every=10, steps=40,
        batch_size=16, seq_len=64, vocab_size=600, dupe_factor=1, corpus=corpus, out=str(tmp_path / "run"),
        no_export=True, verbose=0))
    assert not built["build_instances"] & built["eval_dataset"] and built["eval_dataset"]
    assert (metrics["optimizer"], metrics["accumulate"]) == ("lamb", 4)
    # Windows of 2 updates (4 would leave the evaluations between window ends), counted in updates.
    assert [record["step"] for record in metrics["history"]] == list(range(2, 41, 2))
    evaluations = metrics["eval"]
    assert [evaluation["step"] for evaluation in evaluations] == [10, 20, 30, 40]
    mlm = [evaluation["objectives"]["mlm"] for evaluation in evaluations]
    assert mlm[-1]["loss"] < mlm[0]["loss"] - 0.1 and mlm[-1]["perplexity"] == pytest.approx(np.exp(mlm[-1]["loss"]))
    assert set(evaluations[0]["objectives"]["sop"]) == {"loss", "accuracy"}
    history = metrics["history"]
    assert history[-1]["mlm_loss"] < history[0]["mlm_loss"] - 0.3
    written = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert written["eval"] == evaluations
    assert any((tmp_path / "run" / "logs" / "validation").iterdir())  # TensorBoard's held-out curves


def test_held_out_evaluation_leaves_no_trace_on_training():
    """ELECTRA draws its replaced tokens from a seed generator, which evaluating advances too: with the
    generator's state put back after each evaluation (KeepTrainingState), training with evaluations gives
    the weights of training without them."""
    from keras_bertology.pretraining.held_out import KeepTrainingState

    family = get_family("electra")

    def trained(evaluate):
        keras.utils.set_random_seed(0)
        backbone = family.backbone_cls(**family.backbone_config("electra-tiny", vocab_size=VOCAB, dropout=0.0,
                                                                attention_dropout=0.0, num_layers=1))
        model = family.build_pretrainer(backbone, None, "electra-tiny", BATCH)
        model.compile(optimizer=make_optimizer("adamw", 1e-3, 6))
        ids = np.random.default_rng(0).integers(5, VOCAB, (2 * BATCH, LENGTH)).astype("int32")
        ids[:, 0], ids[:, -1] = 2, 3
        instances = {"token_ids": ids, "segment_ids": np.zeros_like(ids)}
        data = model_batches(make_dataset(instances, BATCH, masker=family.build_masker(TOKENIZER, 4), seed=3), model)
        held_out = dict(validation_data=data.take(1).cache(), validation_steps=1, validation_freq=[1, 2],
                        callbacks=[KeepTrainingState()]) if evaluate else {}
        model.fit(data, epochs=3, steps_per_epoch=2, verbose=0, **held_out)
        return [np.asarray(weight) for weight in model.weights]

    for plain, evaluated in zip(trained(False), trained(True)):
        np.testing.assert_array_equal(plain, evaluated)
