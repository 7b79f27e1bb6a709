"""ALBERT: exact preset sizes, shared weights really shared, SOP pairs, and parity with transformers."""

import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers

from cli_runs import pretrain_two_plays
from hf_reference import perturbed_hf_model
from instance_corpus import CLS, PAD, SEP, Corpus, segments
from keras_bertology.convert.hf_checkpoint import convert_hf_checkpoint
from keras_bertology.data.instances import build_sop_instances
from keras_bertology.layers import SharedEncoderStack

TOLERANCE = 1e-5


def test_shared_block_has_one_set_of_weights_and_sums_gradients():
    """Six layers over one block: its gradient equals the sum of six unshared copies' gradients."""
    x = tf.random.stateless_normal((2, 5, 16), seed=(1, 2))
    shared = SharedEncoderStack(num_layers=6, num_heads=2, intermediate_size=24, activation="gelu_approximate")
    unshared = SharedEncoderStack(num_layers=6, num_heads=2, intermediate_size=24, num_groups=6,
                                  activation="gelu_approximate")
    shared(x), unshared(x)
    assert len(shared.weights) * 6 == len(unshared.weights)
    for block in unshared.blocks:
        for target, source in zip(block.weights, shared.blocks[0].weights):
            target.assign(source)
    np.testing.assert_allclose(shared(x).numpy(), unshared(x).numpy(), atol=1e-5)

    def gradients(stack):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(stack(x) * tf.range(16, dtype=tf.float32))
        return tape.gradient(loss, stack.trainable_weights)

    shared_grads = gradients(shared)
    per_layer = gradients(unshared)
    count = len(shared_grads)
    for index, grad in enumerate(shared_grads):
        total = sum(per_layer[layer * count + index] for layer in range(6))
        np.testing.assert_allclose(grad.numpy(), total.numpy(), rtol=1e-4, atol=1e-5)


def test_groups_assign_layers_as_albert_does():
    stack = SharedEncoderStack(num_layers=12, num_heads=2, intermediate_size=8, num_groups=3, inner_group_num=2)
    assert [stack.layer_group(i) for i in range(12)] == [0] * 4 + [1] * 4 + [2] * 4
    assert len(stack.blocks) == 6 and stack.group_blocks(1) == stack.blocks[2:4]


def test_sentence_order_pairs():
    """A and B are consecutive pieces of one document; label 1 exactly when B comes first.
    The swap rate is 1/2 within 5 binomial sigmas."""
    corpus = Corpus(np.random.default_rng(21), num_docs=300, sentences_per_doc=(1, 150), sentence_len=(3, 12))
    built = build_sop_instances(corpus.documents, 64, CLS, SEP, PAD, np.random.default_rng(22), dupe_factor=3)
    labels = built["sop_labels"]
    for row, label in zip(built["token_ids"], labels):
        tokens_a, tokens_b = segments(row)
        assert corpus.doc(tokens_a[0]) == corpus.doc(tokens_b[0])
        first, second = (tokens_b, tokens_a) if label else (tokens_a, tokens_b)
        assert first[-1] < second[0]
    n = len(labels)
    assert n > 5000 and abs(labels.mean() - 0.5) <= 5 * np.sqrt(0.25 / n)


def _albert(cls, groups, inner):
    config = transformers.AlbertConfig(vocab_size=97, embedding_size=24, hidden_size=64, num_hidden_layers=4,
                                       num_attention_heads=4, intermediate_size=96, num_hidden_groups=groups,
                                       inner_group_num=inner, max_position_embeddings=40, initializer_range=0.2)
    return perturbed_hf_model(cls, config)


@pytest.mark.parametrize("groups,inner", [(1, 1), (2, 1), (2, 2)])
def test_albert_model_matches_transformers(tmp_path, groups, inner):
    hf = _albert(transformers.AlbertModel, groups, inner)
    hf.save_pretrained(str(tmp_path))
    run, report = convert_hf_checkpoint(tmp_path)
    assert report.heads == ["pooler"] and report.skipped == []
    rng = np.random.default_rng(0)
    token_ids = rng.integers(5, 97, (3, 20)).astype("int32")
    padding_mask = (np.arange(20)[None] < np.array([[20], [13], [5]])).astype("int32")
    segment_ids = (np.arange(20)[None] >= 8).astype("int32").repeat(3, 0)
    with torch.no_grad():
        expected = hf(input_ids=torch.tensor(token_ids, dtype=torch.long),
                      attention_mask=torch.tensor(padding_mask), token_type_ids=torch.tensor(segment_ids))
    ours = run.backbone.predict({"token_ids": token_ids, "segment_ids": segment_ids,
                                 "padding_mask": padding_mask}, verbose=0)
    real = padding_mask.astype(bool)
    assert np.abs(ours["sequence_output"][real] - expected.last_hidden_state.numpy()[real]).max() <= TOLERANCE
    assert np.abs(ours["pooled_output"] - expected.pooler_output.numpy()).max() <= TOLERANCE


@pytest.mark.parametrize("groups,inner", [(1, 1), (2, 2)])
def test_albert_pretraining_heads_match_transformers(tmp_path, groups, inner):
    hf = _albert(transformers.AlbertForPreTraining, groups, inner)
    hf.save_pretrained(str(tmp_path))
    run, report = convert_hf_checkpoint(tmp_path)
    assert report.heads == ["pooler", "mlm", "sop"] and report.skipped == []
    token_ids = np.random.default_rng(1).integers(5, 97, (2, 16)).astype("int32")
    positions = np.array([[1, 4, 9], [0, 7, 15]], dtype="int32")
    with torch.no_grad():
        expected = hf(input_ids=torch.tensor(token_ids, dtype=torch.long))
    ours = run.pretrainer.predict({"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
                                   "padding_mask": np.ones_like(token_ids), "mask_positions": positions}, verbose=0)
    mlm = np.take_along_axis(expected.prediction_logits.numpy(), positions[..., None], axis=1)
    assert np.abs(ours["mlm"] - mlm).max() <= TOLERANCE
    assert np.abs(ours["sop"] - expected.sop_logits.numpy()).max() <= TOLERANCE


@pytest.mark.slow
@pytest.mark.parametrize("task", ["sop", "nsp"])
def test_pretrain_albert_from_the_command_line(tmp_path, capsys, task):
    metrics, served = pretrain_two_plays(tmp_path, capsys, "albert", "albert-tiny", "--seq-len", "48",
                                         "--vocab-size", "800", "--dupe-factor", "2", "--max-ngram", "2",
                                         "--sentence-task", task, export=task == "sop")
    assert set(metrics["objectives"]) == {"mlm", task}
    assert metrics["family_options"] == {"max_ngram": 2, "sentence_task": task, "loss_chunk_size": 0}
    assert metrics["instances"] == "sentence_pairs" and metrics["masking"] == "static"
    assert 0.4 < metrics["objectives"][task]["chance"]["accuracy"] < 0.6
    if task == "nsp":  # the sentence head is not part of the export: SOP's run serves it
        return
    out = served.mlm_logits(tf.constant(["To be, or not to [MASK]."]))
    assert out["logits"].shape[-1] == 800 and list(out["token_ids"].numpy()[0][:1]) == [2]  # [CLS]
    assert (out["token_ids"].numpy() == 4).sum() == 1  # [MASK]


@pytest.mark.parametrize("options,message", [
    ({"sentence_task": "xyz"}, "--sentence-task must be one of sop, nsp"),
    ({"max_ngram": 2.5}, "--max-ngram must be a whole number from 1 to 10"),
    ({"max_ngram": True}, "--max-ngram must be a whole number"),
    ({"span_p": 0.3}, "--span-p does not apply to --model albert"),
])
def test_family_options_are_checked_from_python_too(options, message):
    from keras_bertology.errors import ConfigError
    from keras_bertology.pretraining.options import PretrainOptions

    with pytest.raises(ConfigError, match=message):
        PretrainOptions(model="albert", preset="albert-tiny", family_options=options).validate()
