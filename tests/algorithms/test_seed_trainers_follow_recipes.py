"""Each seed trainer builds and steps its seeds as its recipe's ``train`` does, from a copy
of that code: a hyperparameter ``train`` comes to read and the seed trainer does not is a
seed's run that silently differs from its run alone in the configs no test covers. So
every ``cfg.<name>`` the recipe's ``train`` reads, its seed trainer reads too."""

from __future__ import annotations

import inspect
import re

import pytest

from rlbench.harness.plan.algorithms import load_algorithm
from rlbench.harness.plan.seed_batches import SEED_TRAINERS, seed_trainer

# read by a recipe only under a config its seed trainer refuses
ONLY_WHERE_REFUSED = {"ppo": {"kl_target"}}  # objective=kl


def _read(source: str) -> set[str]:
    return set(re.findall(r"\bcfg\.(\w+)", source))


@pytest.mark.parametrize("algo", sorted(SEED_TRAINERS))
def test_the_seed_trainer_reads_every_hyperparameter_its_recipe_reads(algo: str) -> None:
    recipe = _read(inspect.getsource(load_algorithm(algo).train))
    trainer = _read(inspect.getsource(seed_trainer(algo)))
    assert recipe, "the recipe's train reads its hyperparameters as cfg.<name>"
    assert recipe - trainer == ONLY_WHERE_REFUSED.get(algo, set())
