"""The remover's pace: the pause after a batch follows the batch's time and NEXUS_RETENTION_DUTY, within bounds."""

from __future__ import annotations

import pytest

from nexus.errors import ConfigurationError
from nexus.retention.pacing import PAUSE_MAX_S, PAUSE_MIN_S, pause_after
from nexus.settings import Settings


@pytest.mark.parametrize(
    ("busy_s", "duty", "pause_s"),
    [(0.2, 0.2, 0.8), (0.4, 0.2, 1.6), (0.3, 0.5, 0.3), (1.0, 0.25, 3.0), (0.1, 0.1, 0.9)],
)
def test_the_pause_is_the_batch_time_times_one_minus_duty_over_duty(busy_s: float, duty: float, pause_s: float) -> None:
    """A batch of t seconds at duty d is followed by t*(1-d)/d: the remover works the share d of its time."""
    assert pause_after(busy_s, duty) == pytest.approx(pause_s)


def test_full_duty_never_pauses() -> None:
    """Duty 1 is the remover at full speed: no pause after any batch, however long."""
    assert pause_after(0.001, 1.0) == 0.0
    assert pause_after(30.0, 1.0) == 0.0


def test_the_pause_is_bounded_both_ways() -> None:
    """A tiny batch still pauses PAUSE_MIN_S (no spinning); a stalled one pauses at most PAUSE_MAX_S."""
    assert pause_after(0.0001, 0.5) == PAUSE_MIN_S
    assert pause_after(60.0, 0.2) == PAUSE_MAX_S


def test_the_duty_is_a_setting_between_0_and_1() -> None:
    """NEXUS_RETENTION_DUTY sets the duty (0.2 by default); 0 and above 1 are refused, naming the variable."""
    assert Settings().retention_duty == 0.2
    assert Settings.from_env({"NEXUS_RETENTION_DUTY": "0.5"}).retention_duty == 0.5
    for bad in ("0", "1.5"):
        with pytest.raises(ConfigurationError, match="NEXUS_RETENTION_DUTY"):
            Settings.from_env({"NEXUS_RETENTION_DUTY": bad})
