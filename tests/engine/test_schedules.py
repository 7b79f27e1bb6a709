"""Learning-rate schedules: BERT's warmup then linear decay, ModernBERT's warmup-stable-decay."""

import keras
import numpy as np
import pytest

from keras_bertology.engine.optimization import WarmupLinearDecay, WarmupStableDecay, learning_rate_schedule


def _rates(schedule, steps):
    return np.array([float(schedule(step)) for step in range(steps + 1)])


def test_warmup_stable_decay_rises_holds_the_peak_and_falls_as_one_minus_a_square_root():
    rates = _rates(WarmupStableDecay(2e-3, warmup_steps=10, total_steps=100, decay_steps=20), 100)
    np.testing.assert_allclose(rates[:11], 2e-3 * np.arange(11) / 10, rtol=1e-6)
    assert (rates[10:81] == np.float32(2e-3)).all()  # the stable phase, exactly at the peak
    expected = 2e-3 * (1 - np.sqrt((np.arange(80, 101) - 80) / 20))
    np.testing.assert_allclose(rates[80:], expected, rtol=1e-5, atol=1e-9)
    assert rates[-1] == 0 and rates[90] == pytest.approx(2e-3 * (1 - np.sqrt(0.5)), rel=1e-5)


def test_a_schedule_is_chosen_by_name_and_survives_a_keras_round_trip():
    wsd = learning_rate_schedule("wsd", 1e-3, 1000, decay_share=0.25)
    assert isinstance(wsd, WarmupStableDecay) and (wsd.warmup_steps, wsd.decay_steps) == (100, 250)
    assert isinstance(learning_rate_schedule("linear", 1e-3, 1000), WarmupLinearDecay)
    rebuilt = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(wsd))
    assert rebuilt.get_config() == wsd.get_config()
    assert float(rebuilt(900)) == pytest.approx(float(wsd(900)))


def test_modernbert_trains_with_wsd_unless_told_otherwise():
    from keras_bertology.errors import ConfigError
    from keras_bertology.models import get_family
    from keras_bertology.pretraining.options import PretrainOptions

    modern = PretrainOptions(model="modernbert", preset="modernbert-tiny")
    assert modern.learning_rate_schedule(get_family("modernbert")) == "wsd"
    assert PretrainOptions(model="bert").learning_rate_schedule(get_family("bert")) == "linear"
    assert PretrainOptions(model="bert", schedule="wsd").learning_rate_schedule(get_family("bert")) == "wsd"
    with pytest.raises(ConfigError, match="schedule"):
        PretrainOptions(model="bert", schedule="exponential").validate()
    with pytest.raises(ConfigError, match="decay"):
        PretrainOptions(model="bert", decay_share=0.0).validate()
