"""DeBERTa-v3: gradient-disentangled embedding sharing (what each loss's gradient reaches), the folded
discriminator that serves alone, the detection head against NumPy, the all-[MASK] masking rate, the
non-legacy DebertaV2ForMaskedLM head and spm.model tokenizers against transformers, and a run end to end
through its SavedModel and its Hugging Face export."""

import json
import math

import keras
import numpy as np
import tensorflow as tf
import torch
import transformers

from hf_reference import perturbed_hf_model
from keras_bertology.models.deberta import DebertaBackbone
from keras_bertology.models.deberta_v3.pretrainer import deberta_v3_pretrainer

TOLERANCE = 1e-5


def _discriminator(**changes):
    return DebertaBackbone(**{**dict(vocab_size=60, num_layers=2, num_heads=2, hidden_size=16, intermediate_size=32,
                                     position_buckets=8, max_relative_positions=16, dropout=0.0,
                                     attention_dropout=0.0), **changes})


def _batch(seed=0, batch=2, length=12, slots=3):
    rng = np.random.default_rng(seed)
    positions = np.stack([rng.choice(np.arange(1, length), slots, replace=False) for _ in range(batch)])
    return {"token_ids": rng.integers(5, 60, (batch, length)).astype("int32"),
            "padding_mask": np.ones((batch, length), "int32"), "mask_positions": positions.astype("int32"),
            "mask_ids": rng.integers(5, 60, (batch, slots)).astype("int32"),
            "mask_weights": np.ones((batch, slots), "float32")}


def _largest(gradient):
    return 0.0 if gradient is None else float(np.abs(np.asarray(tf.convert_to_tensor(gradient))).max())


def _gradients(model, batch, loss, variables):
    """d loss(model outputs) / d each of `variables`, on the backend that runs (None: not reached)."""
    if keras.config.backend() == "jax":
        import jax

        trainable, frozen = model.trainable_variables, [v.value for v in model.non_trainable_variables]

        def total(values):
            outputs, _ = model.stateless_call(values, frozen, batch, training=True)
            return keras.ops.sum(loss(outputs))

        gradients = jax.grad(total)([v.value for v in trainable])
        at = {id(v): i for i, v in enumerate(trainable)}
        return [gradients[at[id(v)]] for v in variables]
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(loss(model(batch, training=True)))
    return tape.gradient(total, variables)


def test_detection_trains_the_deltas_and_never_the_generators_embeddings():
    """The RTD loss reaches the discriminator's own (delta) table and not the generator's; the generator's
    MLM loss reaches the generator's table and not the delta. The deltas start at zero, so the
    discriminator starts reading the generator's table."""
    discriminator = _discriminator()
    model = deberta_v3_pretrainer(discriminator)
    delta, base = discriminator.token_embedding.embeddings, model.generator.token_embedding.embeddings
    assert not np.any(delta.numpy()) and np.abs(base.numpy()).max() > 0
    batch = _batch()

    def rtd(out):
        return keras.losses.binary_crossentropy(out["rtd_labels"], out["rtd"], from_logits=True)

    def mlm(out):
        return keras.losses.sparse_categorical_crossentropy(batch["mask_ids"], out["mlm"], from_logits=True)

    to_base, to_delta = map(_largest, _gradients(model, batch, rtd, [base, delta]))
    assert to_base == 0.0 and to_delta > 1e-4
    to_base, to_delta = map(_largest, _gradients(model, batch, mlm, [base, delta]))
    assert to_base > 1e-4 and to_delta == 0.0


def test_the_served_discriminator_folds_the_deltas():
    """After training has moved both tables, the discriminator served alone (its tables = deltas + the
    generator's) computes what it computes inside the pretrainer (once saved and loaded too: the family
    harness, tests/models/test_family_harness.py)."""
    discriminator = _discriminator()
    model = deberta_v3_pretrainer(discriminator)
    rng = np.random.default_rng(1)
    for table in (discriminator.token_embedding, model.generator.token_embedding):
        table.embeddings.assign(rng.normal(0, 1, table.embeddings.shape).astype("float32"))
    inputs = {key: value for key, value in _batch().items() if key in discriminator.input}
    inside = np.asarray(discriminator(inputs)["sequence_output"])
    served = model.served_backbone()
    np.testing.assert_allclose(served.token_embedding.embeddings.numpy(),
                               discriminator.token_embedding.embeddings.numpy()
                               + model.generator.token_embedding.embeddings.numpy())
    assert np.abs(np.asarray(served(inputs)["sequence_output"]) - inside).max() <= TOLERANCE


def test_the_detection_head_reads_each_state_beside_the_first():
    """DeBERTa-v3's head: LayerNorm(h + h_CLS) -> dense -> GELU -> one logit, against NumPy."""
    from keras_bertology.layers import ReplacedTokenHead

    rng = np.random.default_rng(2)
    hidden = rng.normal(0, 2, (2, 7, 16)).astype("float32")
    head = ReplacedTokenHead("gelu", 0.5, context_norm_epsilon=1e-7)
    head(hidden)
    norm = head.context_norm
    norm.gamma.assign(rng.normal(1, 0.3, 16).astype("float32"))
    norm.beta.assign(rng.normal(0, 0.3, 16).astype("float32"))
    summed = hidden + hidden[:, :1]
    normed = (summed - summed.mean(-1, keepdims=True)) / np.sqrt(summed.var(-1, keepdims=True) + 1e-7)
    normed = normed * norm.gamma.numpy() + norm.beta.numpy()
    inner = normed @ head.dense.kernel.numpy() + head.dense.bias.numpy()
    activated = 0.5 * inner * (1 + np.vectorize(math.erf)(inner / np.sqrt(2)))
    expected = activated @ head.prediction.kernel.numpy() + head.prediction.bias.numpy()
    assert np.abs(np.asarray(head(hidden)) - expected).max() <= TOLERANCE
    assert np.abs(expected).max() > 0.5


def test_every_selected_token_becomes_mask():
    """15% of the non-special tokens are selected (binomial: 40,000 tokens give a standard error of
    0.0018; 0.01 is over five of them) and each selected one is [MASK] in the input."""
    from keras_bertology.models import FAMILIES

    class Vocabulary:
        vocab_size, mask_id, pad_id, special_ids = 100, 4, 0, [0, 1, 2, 3, 4]
        word_start_table = None

    masker = FAMILIES["deberta-v3"].build_masker(Vocabulary(), max_predictions=40)
    ids = np.random.default_rng(3).integers(5, 100, (200, 200)).astype("int32")
    masked = masker({"token_ids": tf.constant(ids), "padding_mask": tf.ones_like(ids)})
    weights = masked["mask_weights"].numpy()
    assert abs(weights.sum() / ids.size - 0.15) < 0.01
    chosen = np.take_along_axis(masked["token_ids"].numpy(), masked["mask_positions"].numpy(), 1)[weights > 0]
    assert np.all(chosen == Vocabulary.mask_id)


def test_the_non_legacy_masked_lm_head_matches_transformers():
    """DebertaV2ForMaskedLM with legacy: false (`lm_predictions.lm_head`, the original's names) converted:
    the same logits, the decoder tied to the word embeddings."""
    from keras_bertology.models import get_family

    config = transformers.DebertaV2Config(
        vocab_size=90, hidden_size=48, num_hidden_layers=2, num_attention_heads=3, intermediate_size=80,
        max_position_embeddings=40, initializer_range=0.2, relative_attention=True, layer_norm_eps=1e-7,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, type_vocab_size=0, position_biased_input=False,
        pos_att_type="p2c|c2p", share_att_key=True, position_buckets=8, max_relative_positions=12,
        norm_rel_ebd="layer_norm", legacy=False)
    hf = perturbed_hf_model(transformers.DebertaV2ForMaskedLM, config)
    weights = {name: value.detach().numpy() for name, value in hf.state_dict().items()}
    assert "lm_predictions.lm_head.dense.weight" in weights
    _, pretrainer, heads, used, _ = get_family("deberta-v3").convert_hf(hf.config.to_dict(), weights)
    assert heads == ["mlm"] and "lm_predictions.lm_head.bias" in used
    rng = np.random.default_rng(4)
    ids = rng.integers(1, 90, (2, 19)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 11:] = 0
    with torch.no_grad():
        expected = hf(input_ids=torch.tensor(ids * mask, dtype=torch.long),
                      attention_mask=torch.tensor(mask)).logits.numpy()
    positions = np.tile(np.arange(19, dtype="int32"), (2, 1))
    logits = np.asarray(pretrainer({"token_ids": ids * mask, "padding_mask": mask, "mask_positions": positions})["mlm"])
    real = mask.astype(bool)
    assert np.abs(logits - expected)[real].max() <= TOLERANCE * max(1.0, np.abs(expected).max())
    assert np.abs(expected).max() > 1


TEXTS = ["Now is the winter of our discontent", "Made glorious summer by this sun of York;", "O Romeo, Romeo!"]


def test_a_released_spm_model_without_mask_gains_it_after_its_pieces(tmp_path):
    """The released models' spm.model has no [MASK] piece (DebertaV2Tokenizer adds it after the 128,000
    pieces): it joins as the last id, and text reads to DebertaV2Tokenizer's ids."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2

    from keras_bertology.convert.hf_tokenizer import load_hf_tokenizer
    from keras_bertology.models import FAMILIES

    trained = FAMILIES["deberta-v3"].train_tokenizer(TEXTS * 200, 40)
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(trained.model_proto)
    del model.pieces[4]  # [MASK], which our training places fifth
    (tmp_path / "spm.model").write_bytes(model.SerializeToString())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "DebertaV2Tokenizer",
                                                                "do_lower_case": False}))
    pieces = spm.SentencePieceProcessor(model_proto=model.SerializeToString()).get_piece_size()
    ours = load_hf_tokenizer(tmp_path, model_vocab_size=pieces + 1)
    assert ours.mask_id == pieces and ours.vocabulary[ours.cls_id] == "[CLS]" and ours.pad_id == 0
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert theirs.mask_token_id == ours.mask_id
    assert ours.tokenize(tf.constant(TEXTS)).to_list() == theirs(TEXTS, add_special_tokens=False)["input_ids"]


def test_pretraining_deberta_v3_runs_serves_and_exports_to_transformers(tmp_path, capsys):
    """Four steps from the CLI: both losses finite, the detection metrics with their guessing levels, a
    SavedModel serving raw strings; `export --format hf` gives DebertaV2Model (the generator and the head
    dropped, with a note) whose states are the served discriminator's, and spm.model that
    DebertaV2Tokenizer reads to our ids; that folder converts back to the same tokenizer."""
    from cli_runs import pretrain_two_plays
    from keras_bertology.cli import main
    from keras_bertology.convert.hf_checkpoint import convert_hf_checkpoint
    from keras_bertology.runs import load_run_model

    metrics, served = pretrain_two_plays(tmp_path, capsys, "deberta-v3", "deberta-v3-tiny", "--seq-len", "32",
                                         "--vocab-size", "400")
    assert metrics["steps"] == 4 and np.isfinite(metrics["history"][-1]["loss"])
    assert set(metrics["objectives"]) == {"mlm", "rtd"} and metrics["objectives"]["rtd"]["chance"]["auc"] == 0.5
    assert served.serve(tf.constant(["Now is the winter of our discontent.", ""]))["sequence_output"].shape[-1] == 128

    out = tmp_path / "hf"
    capsys.readouterr()
    assert main(["export", str(tmp_path / "run"), "--format", "hf", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"DebertaV2Model written to {out}") and "rtd_head" in printed and "generator" in printed
    run = load_run_model(tmp_path / "run")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    ours = run.tokenizer.tokenize(tf.constant(TEXTS)).to_list()
    assert type(tokenizer).__name__ == "DebertaV2Tokenizer"
    assert tokenizer(TEXTS, add_special_tokens=False)["input_ids"] == ours
    hf = transformers.AutoModel.from_pretrained(str(out)).eval()
    ids = np.array([ours[0]], dtype="int32")
    with torch.no_grad():
        expected = hf(input_ids=torch.tensor(ids, dtype=torch.long)).last_hidden_state.numpy()
    got = np.asarray(run.backbone({"token_ids": ids, "padding_mask": np.ones_like(ids)})["sequence_output"])
    assert np.abs(got - expected).max() <= TOLERANCE and np.abs(expected).max() > 1
    back, _ = convert_hf_checkpoint(out)
    assert back.family == "deberta-v3"
    assert back.tokenizer.tokenize(tf.constant(TEXTS)).to_list() == ours


def test_separate_tables_share_nothing():
    model = deberta_v3_pretrainer(_discriminator(), embedding_sharing="none")
    assert np.abs(model.backbone.token_embedding.embeddings.numpy()).max() > 0
    assert model.served_backbone() is model.backbone


def test_compiled_training_steps_run_and_change_both_tables():
    """`fit`'s compiled step (a tf.function; jit on JAX, which the JAX subset runs: the table's rows cut at
    a length known when the step is traced) trains the generator's table and the discriminator's delta
    (test_xla.py compiles it with XLA)."""
    discriminator = _discriminator()
    model = deberta_v3_pretrainer(discriminator)
    model.compile(optimizer=keras.optimizers.AdamW(1e-2), jit_compile=keras.config.backend() == "jax")
    x, y, weights = model.split_features(_batch())
    before = [discriminator.token_embedding.embeddings.numpy(), model.generator.token_embedding.embeddings.numpy()]
    losses = [model.train_on_batch(x, y, weights, return_dict=True)["loss"] for _ in range(2)]
    after = [discriminator.token_embedding.embeddings.numpy(), model.generator.token_embedding.embeddings.numpy()]
    assert np.all(np.isfinite(losses))
    assert all(np.abs(new - old).max() > 0 for new, old in zip(after, before))
