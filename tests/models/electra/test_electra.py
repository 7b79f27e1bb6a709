"""ELECTRA: parity with transformers, shared embeddings, no gradient through sampling, masking, the CLI."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers

from cli_runs import pretrain_two_plays
from hf_reference import nonlinear_share, perturbed_hf_model
from keras_bertology.convert.hf_checkpoint import convert_hf_checkpoint
from keras_bertology.data.builder_contexts import MaskingContext
from keras_bertology.layers import GumbelSampler, ReplaceTokens
from keras_bertology.models import BertBackbone
from keras_bertology.models.electra import ELECTRA
from keras_bertology.models.electra.masking import electra_masker
from keras_bertology.models.electra.pretrainer import electra_pretrainer, generator_config
from keras_bertology.models.generator_discriminator import GeneratorDiscriminator
from keras_bertology.engine.optimization import bert_adamw

TOLERANCE = 1e-5
VOCAB = 97


def _hf(cls, **overrides):
    config = transformers.ElectraConfig(vocab_size=VOCAB, embedding_size=24, hidden_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, intermediate_size=96, max_position_embeddings=40,
                                        initializer_range=0.2, **overrides)
    return perturbed_hf_model(cls, config)


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(5, VOCAB, (3, 20)).astype("int32")
    padding_mask = (np.arange(20)[None] < np.array([[20], [13], [6]])).astype("int32")
    segment_ids = (np.arange(20)[None] >= 8).astype("int32").repeat(3, 0)
    return token_ids, padding_mask, segment_ids


def _torch(token_ids, padding_mask, segment_ids):
    return dict(input_ids=torch.tensor(token_ids, dtype=torch.long), attention_mask=torch.tensor(padding_mask),
                token_type_ids=torch.tensor(segment_ids))


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new"])
def test_discriminator_matches_transformers(tmp_path, hidden_act):
    hf = _hf(transformers.ElectraForPreTraining, hidden_act=hidden_act)
    hf.save_pretrained(str(tmp_path))
    run, report = convert_hf_checkpoint(tmp_path)
    assert run.family == "electra" and report.heads == ["rtd"] and report.skipped == []
    token_ids, padding_mask, segment_ids = _batch()
    inputs = {"input_ids": torch.tensor(token_ids, dtype=torch.long), "attention_mask": torch.tensor(padding_mask)}
    assert nonlinear_share(hf, inputs) >= 0.3
    with torch.no_grad():
        expected = hf(**_torch(token_ids, padding_mask, segment_ids), output_hidden_states=True)
    ours = run.pretrainer.predict({"token_ids": token_ids, "segment_ids": segment_ids,
                                   "padding_mask": padding_mask}, verbose=0)
    hidden = run.backbone.predict({"token_ids": token_ids, "segment_ids": segment_ids,
                                   "padding_mask": padding_mask}, verbose=0)["sequence_output"]
    real = padding_mask.astype(bool)
    assert np.abs(hidden[real] - expected.hidden_states[-1].numpy()[real]).max() <= TOLERANCE
    assert np.abs(ours["rtd"][..., 0][real] - expected.logits.numpy()[real]).max() <= TOLERANCE


def test_generator_matches_transformers(tmp_path):
    hf = _hf(transformers.ElectraForMaskedLM)
    hf.save_pretrained(str(tmp_path))
    run, report = convert_hf_checkpoint(tmp_path)
    assert report.heads == ["mlm"] and report.skipped == []
    token_ids, padding_mask, segment_ids = _batch(1)
    positions = np.array([[1, 4, 9], [0, 7, 12], [2, 3, 5]], dtype="int32")
    with torch.no_grad():
        expected = hf(**_torch(token_ids, padding_mask, segment_ids)).logits.numpy()
    ours = run.pretrainer.predict({"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask,
                                   "mask_positions": positions}, verbose=0)["mlm"]
    assert np.abs(ours - np.take_along_axis(expected, positions[..., None], axis=1)).max() <= TOLERANCE


def _tiny_electra(fraction=0.5):
    keras.utils.set_random_seed(0)
    discriminator = BertBackbone(vocab_size=VOCAB, num_layers=2, num_heads=2, hidden_size=128, intermediate_size=256,
                                 max_positions=32, embedding_size=32, use_pooler=False)
    return electra_pretrainer(discriminator, generator_fraction=fraction)


class _Tokenizer:
    vocab_size, mask_id, pad_id, special_ids = VOCAB, 3, 0, [0, 1, 2, 3]
    word_start_table = np.ones(VOCAB, bool)


def _masked_batch(rows=16, length=24, seed=2, max_predictions=4):
    ids = np.random.default_rng(seed).integers(4, VOCAB, (rows, length)).astype("int32")
    ids[:, 0], ids[:, -1] = 1, 2
    ids[: rows // 2, -5:] = 0  # some padding
    return electra_masker(MaskingContext(_Tokenizer(), max_predictions))({"token_ids": tf.constant(ids),
                                                                          "segment_ids": tf.zeros_like(ids)})


def test_generator_and_discriminator_share_one_embedding_layer():
    model = _tiny_electra()
    generator, discriminator = model.generator, model.backbone
    assert generator.hidden_size == 64 and generator.num_heads == 1 and generator.intermediate_size == 256
    shared = {id(v) for v in generator.weights} & {id(v) for v in discriminator.weights}
    assert shared == {id(v) for v in discriminator.embeddings.weights}
    assert len({id(v) for v in model.weights}) == len(model.weights)  # one variable each, however reached


@pytest.mark.parametrize("hidden,fraction,expected", [
    (128, 0.25, (32, 1)), (256, 0.25, (64, 1)), (768, 1 / 3, (256, 4)), (1024, 0.25, (256, 4)), (768, 0.26, (200, 2))])
def test_generator_sizes_follow_the_original_rule(hidden, fraction, expected):
    """hidden = round(fraction x H), heads = max(1, hidden // 64) (lowered until they divide it)."""
    discriminator = BertBackbone(vocab_size=VOCAB, num_layers=1, num_heads=hidden // 64, hidden_size=hidden,
                                 intermediate_size=8, max_positions=8, use_pooler=False)
    config = generator_config(discriminator, fraction)
    assert (config["hidden_size"], config["num_heads"]) == expected
    assert config["intermediate_size"] == 4 * expected[0]


def test_detection_loss_never_reaches_the_generator():
    model = _tiny_electra()
    model.compile()
    x, y, weights = model.split_features(_masked_batch())
    shared = {id(v) for v in model.backbone.embeddings.weights}
    generator_only = [v for v in model.generator.trainable_weights + model.get_layer("mlm_head").trainable_weights
                      if id(v) not in shared]  # the tied decoder is the shared table
    bce = keras.losses.BinaryCrossentropy(from_logits=True)
    with tf.GradientTape(persistent=True) as tape:
        outputs = model(x, training=True)
        rtd = bce(outputs["rtd_labels"], outputs["rtd"], sample_weight=weights["rtd"])
        mlm = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y["mlm"], outputs["mlm"],
                                                                          sample_weight=weights["mlm"])
    for variable, gradient in zip(generator_only, tape.gradient(rtd, generator_only)):
        assert gradient is None or not np.any(tf.convert_to_tensor(gradient).numpy()), variable.path
    assert any(g is not None and np.any(tf.convert_to_tensor(g).numpy()) for g in tape.gradient(mlm, generator_only))
    embedding = model.backbone.token_embedding.embeddings
    assert np.any(tf.convert_to_tensor(tape.gradient(rtd, embedding)).numpy())  # the discriminator's share


def test_pretrainer_trains():
    model = _tiny_electra()
    model.compile(optimizer=keras.optimizers.Adam(2e-3))
    model.optimizer.build(model.trainable_variables)  # not inside fit's first trace, which then runs twice
    data = tf.data.Dataset.from_tensors(_masked_batch()).repeat().map(model.split_features)
    before = model.evaluate(data.take(1), return_dict=True, verbose=0)
    history = model.fit(data, epochs=1, steps_per_epoch=60, verbose=0).history
    after = model.evaluate(data.take(1), return_dict=True, verbose=0)
    assert {"rtd_precision", "rtd_recall", "rtd_auc", "rtd_replaced_rate", "mlm_accuracy"} <= set(history)
    assert after["mlm_loss"] < before["mlm_loss"] - 1.0
    assert before["loss"] == pytest.approx(before["mlm_loss"] + 50 * before["rtd_loss"], rel=1e-4)
    assert model.masked_lm_model() is None  # only the discriminator is served


def test_replacement_labels_count_a_sample_equal_to_the_original_as_original():
    ids = tf.constant([[1, 3, 3, 3, 7, 2]])
    positions, originals = tf.constant([[1, 2, 3, 0]]), tf.constant([[10, 11, 12, 0]])
    weights, samples = tf.constant([[1.0, 1.0, 1.0, 0.0]]), tf.constant([[10, 40, 12, 55]])
    corrupted, labels = ReplaceTokens()(ids, positions, originals, weights, samples)
    assert corrupted.numpy().tolist() == [[1, 10, 40, 12, 7, 2]]  # the filler slot writes nothing
    assert labels.numpy()[0, :, 0].tolist() == [0, 0, 1, 0, 0, 0]


def test_gumbel_samples_follow_the_softmax():
    logits = tf.constant([[0.0, 1.0, 2.0, -1.0]])
    draws = 200_000
    samples = GumbelSampler(temperature=1.0, seed=3)(tf.tile(logits[:, None, :], [1, draws, 1])).numpy().ravel()
    expected = tf.nn.softmax(logits[0]).numpy()
    observed = np.bincount(samples, minlength=4) / draws
    np.testing.assert_array_less(np.abs(observed - expected), 5 * np.sqrt(expected * (1 - expected) / draws))
    hot = GumbelSampler(temperature=0.1, seed=3)(tf.tile(logits[:, None, :], [1, 2000, 1])).numpy()
    assert np.mean(hot == 2) > 0.99  # a low temperature sharpens toward the argmax


def test_masking_is_85_mask_15_kept_and_never_random():
    out = _masked_batch(rows=4000, length=64, max_predictions=9)
    used = out["mask_weights"].numpy() > 0
    now = np.take_along_axis(out["token_ids"].numpy(), out["mask_positions"].numpy(), axis=1)[used]
    original = out["mask_ids"].numpy()[used]
    masked, kept = np.mean(now == 3), np.mean(now == original)
    n = used.sum()
    assert masked + kept == 1.0, "a random replacement happened"
    assert abs(masked - 0.85) < 5 * math.sqrt(0.85 * 0.15 / n)
    assert ELECTRA.max_predictions(128) == 19 and ELECTRA.max_predictions(512) == 79  # int((0.15 + 0.005) L)


@pytest.mark.slow
def test_pretrain_electra_from_the_command_line(tmp_path, capsys):
    metrics, served = pretrain_two_plays(tmp_path, capsys, "electra", "electra-tiny", "--seq-len", "64",
                                         "--vocab-size", "800", "--generator-fraction", "0.5")
    assert set(metrics["objectives"]) == {"mlm", "rtd"} and metrics["max_predictions"] == 9
    rtd = metrics["objectives"]["rtd"]
    assert {"precision", "recall", "auc", "replaced_rate"} <= set(rtd["last"])
    rate = rtd["last"]["replaced_rate"]
    assert rtd["chance"]["accuracy"] == pytest.approx(1 - rate) and rtd["chance"]["recall"] == rate
    assert rtd["chance"]["auc"] == 0.5
    assert metrics["family_options"] == {"generator_fraction": 0.5, "generator_layers": None, "rtd_weight": 50.0,
                                         "two_stage_steps": 0, "loss_chunk_size": 0}
    assert metrics["learning_rate"] == 3e-4  # the family's rate
    assert not hasattr(served, "mlm")  # the generator is discarded
    out = served.serve(tf.constant(["To be, or not to be."]))
    assert out["sequence_output"].shape[-1] == 128


def test_two_stage_variant_trains_generator_then_discriminator_from_it():
    """On both backends (the JAX suite runs it too, where each stage's step updates its part of the one
    optimizer state: LayerwiseAdamW.stateless_apply): each stage updates its model's weights and slots
    only, AdamW's weight decay included, and the discriminator starts stage 2 from the generator."""
    keras.utils.set_random_seed(0)
    discriminator = BertBackbone(vocab_size=VOCAB, num_layers=1, num_heads=2, hidden_size=64, intermediate_size=128,
                                 max_positions=32, use_pooler=False)
    model = electra_pretrainer(discriminator, two_stage_steps=4)
    assert model.generator.embeddings is not discriminator.embeddings
    model.compile(optimizer=bert_adamw(1e-2, total_steps=20))
    batch = keras.tree.map_structure(np.asarray, model.split_features(
        keras.tree.map_structure(lambda tensor: tensor.numpy(), _masked_batch())))

    def batches():
        while True:
            yield batch

    def fit(steps):
        model.fit(batches(), epochs=1, steps_per_epoch=steps, shuffle=False, verbose=0,
                  callbacks=model.training_callbacks())

    def snapshot(backbone):
        return [keras.ops.convert_to_numpy(w).copy() for w in backbone.weights]

    def slots(backbone):
        optimizer, ids = model.optimizer, {id(w) for w in backbone.weights}
        return [keras.ops.convert_to_numpy(moments[optimizer._get_variable_index(variable)]).copy()
                for variable in optimizer._trainable_variables if id(variable) in ids
                for moments in (optimizer._momentums, optimizer._velocities)]

    disc_start, gen_start = snapshot(model.backbone), snapshot(model.generator)
    fit(3)  # stage 1
    assert [v.path for v in model.trainable_variables] == [v.path for v in model.optimizer._trainable_variables
                                                           if v.trainable]  # the part, in the optimizer's order
    assert all(np.array_equal(a, b) for a, b in zip(snapshot(model.backbone), disc_start))
    assert not any(slot.any() for slot in slots(model.backbone))
    assert not all(np.array_equal(a, b) for a, b in zip(snapshot(model.generator), gen_start))
    fit(1)  # step 4: the switch
    gen_at_switch, gen_slots = snapshot(model.generator), slots(model.generator)
    assert all(np.array_equal(a, b) for a, b in zip(snapshot(model.backbone), gen_at_switch))
    fit(3)  # stage 2
    assert all(np.array_equal(a, b) for a, b in zip(snapshot(model.generator), gen_at_switch))
    assert all(np.array_equal(a, b) for a, b in zip(slots(model.generator), gen_slots))
    assert not all(np.array_equal(a, b) for a, b in zip(snapshot(model.backbone), gen_at_switch))
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == 7
    if keras.config.backend() == "jax":  # Keras's own optimizers update every weight they were built for
        model.compile(optimizer=keras.optimizers.Adam(1e-2))
        with pytest.raises(ValueError, match="an optimizer that updates a part of the weights"):
            fit(1)
    with pytest.raises(ValueError, match="two-stage"):
        GeneratorDiscriminator(discriminator, generator_config(discriminator, 2.0), embedding_sharing="none",
                               two_stage_steps=2)


def test_discriminator_learns_to_spot_a_fixed_generators_replacements():
    """With the generator frozen at random init, replacements are random ids: the discriminator
    must learn to find them (its ranking, AUC, rises far above the 0.5 of guessing; about 0.87
    after 300 steps, recall 0.42 and precision 0.80 against a replaced rate of 0.16)."""
    model = _tiny_electra()
    model.set_stage(2)  # only the discriminator trains
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    model.optimizer.build(model.trainable_variables)  # the discriminator's slots; fit then traces once
    data = tf.data.Dataset.from_tensors(_masked_batch()).repeat().map(model.split_features)
    before = model.evaluate(data.take(4), return_dict=True, verbose=0)
    model.fit(data, epochs=1, steps_per_epoch=300, verbose=0)
    after = model.evaluate(data.take(4), return_dict=True, verbose=0)
    assert before["rtd_auc"] < 0.6 and after["rtd_auc"] > 0.75, (before, after)
    assert after["rtd_recall"] > after["rtd_replaced_rate"] and after["rtd_precision"] > after["rtd_replaced_rate"]
    # Flagging as many tokens as were replaced: guessing finds the rate, this discriminator far more.
    assert before["rtd_ranked_precision"] < 1.5 * before["rtd_replaced_rate"], before
    assert after["rtd_ranked_precision"] > 2 * after["rtd_replaced_rate"], after
    assert after["mlm_loss"] == pytest.approx(before["mlm_loss"], rel=0.05)  # the generator stayed as it was
