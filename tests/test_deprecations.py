"""Names that moved in the core redesign (issue 29) still resolve, to the same objects,
with a `DeprecationWarning` that names the new home."""

from __future__ import annotations

import pytest

from jaxrl import objectives
from jaxrl.algorithms import grpo, lm_rollout, ppo_lm


@pytest.mark.parametrize(
    "old, new, message",
    [
        (lambda: grpo.losses.grpo_advantages, objectives.grpo_advantages, "jaxrl.objectives"),
        (lambda: grpo.losses.masked_gae, objectives.masked_gae, "jaxrl.objectives"),
        (lambda: grpo.select_groups, lm_rollout.select_groups, "lm_rollout"),
        (lambda: ppo_lm.gae_advantages, objectives.gae_advantages, "jaxrl.objectives"),
        (lambda: ppo_lm.explained_variance, objectives.explained_variance, "jaxrl.objectives"),
    ],
)
def test_a_moved_name_warns_and_is_the_same_object(old, new, message):
    with pytest.warns(DeprecationWarning, match=message):
        assert old() is new


def test_names_that_never_existed_still_fail():
    with pytest.raises(AttributeError):
        grpo.losses.no_such_loss  # noqa: B018
    with pytest.raises(AttributeError):
        ppo_lm.no_such_name  # noqa: B018
