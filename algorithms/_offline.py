"""What the offline recipes share: the dataset as a replay buffer, state normalisation from
the dataset, reward scaling, the evaluation env, the normalized score and the optimizer.

Every recipe follows CORL's gym-MuJoCo protocol (corl-team/CORL ``algorithms/offline/``):
observations are normalised by the dataset's mean and std (``std + 1e-3``), the same
statistics normalise the evaluation env's observations, and the policy is scored by the
mean return of ``spec.eval_episodes`` deterministic episodes in the dataset's eval env.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from torch import nn

from rlbench.data import OfflineDataset, ReplayBuffer, TensorStorage, load_dataset
from rlbench.data.offline_dataset import INDEX_KEY, STEP_KEYS
from rlbench.envs import EnvBase, TransformedEnv, make
from rlbench.envs.transforms import ObservationNorm
from rlbench.errors import ConfigError
from rlbench.recipe import RunSpec

STATE_STD_EPS = 1e-3  # CORL's compute_mean_std(eps=1e-3)


@dataclass
class OfflineData:
    """The run's dataset, ready to train on and to evaluate against."""

    dataset: OfflineDataset
    buffer: ReplayBuffer  # normalised transitions on the run's device, uniform sampling
    eval_env: EnvBase  # spec.eval_episodes sub-envs, normalising observations like the data
    normalization: nn.Module | None  # the eval env's ObservationNorm, saved with the policy
    score: Callable[[Sequence[float]], float] | None  # D4RL's normalized score, when known

    @property
    def obs_dim(self) -> int:
        return self.eval_env.observation_spec["observation"].shape[-1]

    @property
    def action_bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        spec = self.eval_env.action_spec
        return spec.low[0], spec.high[0]


def state_normalization(cfg: Any) -> ObservationNorm | None:
    """The state normalisation of a run (its statistics are the dataset's, loaded by
    ``rlbench.load_policy`` from the run's ``normalization.pt``)."""
    return ObservationNorm(keys=("observation",)) if cfg.normalize_states else None


def with_next_actions(transitions: TensorDict) -> TensorDict:
    """``transitions`` (with ``episode``, each episode's rows in order) with
    ``("next", "action")``, the dataset's action at the next step of the same episode: what
    ReBRAC's critic penalty compares the target action with. A terminal step gets zeros (its
    target never reads them); the last step of an episode cut by a time limit has no next
    action and is dropped. With files that store each step's next observation (Minari's,
    D4RL files with ``next_observations``) the rows kept are CORL's (``qlearning_dataset``
    drops the timeout step); with D4RL files without them the loader has already dropped
    the timeout step, whose action CORL reads as the next action of the step before it, so
    that step is dropped too: one more row per time-limited episode (0.1% on gym-MuJoCo)."""
    episode, action = transitions.get("episode"), transitions.get("action")
    same_episode = episode[1:] == episode[:-1]
    next_action = torch.zeros_like(action)
    next_action[:-1][same_episode] = action[1:][same_episode]
    has_next = torch.cat((same_episode, same_episode.new_zeros(min(len(episode), 1))))
    keep = has_next | transitions.get(("next", "terminated")).reshape(-1)
    transitions.set(("next", "action"), next_action)
    return transitions[keep]


def open_dataset(spec: RunSpec, cfg: Any, *, batch_size: int,
                 reward_scale: Callable[[OfflineDataset], float] | None = None,
                 next_actions: bool = False) -> OfflineData:
    """Load ``spec.dataset`` (refusing a file that changed since the sweep was planned),
    normalise its states as ``cfg.normalize_states`` says, multiply its rewards by
    ``reward_scale(dataset)`` when given, add the next actions (``with_next_actions``)
    when asked and put it on ``spec.device``; make the evaluation env."""
    dataset = load_dataset(spec.dataset, trusted_envs=(spec.env,))
    sha256 = dataset.provenance.get("sha256")
    if spec.dataset_sha256 is not None and sha256 != spec.dataset_sha256:
        raise ConfigError(f"{spec.dataset} changed since the sweep was planned (sha256 "
                          f"{sha256[:12]}, planned {spec.dataset_sha256[:12]}): plan it again")
    steps = dataset.steps.select(*STEP_KEYS, *(("episode",) if next_actions else ()))
    if next_actions:
        steps = with_next_actions(steps).exclude("episode")
    observations = dataset.observations
    normalization = None
    if cfg.normalize_states:  # the statistics of the observations the steps start from
        own = observations[steps.get(INDEX_KEY)].double()
        loc = own.mean(0)
        scale = own.std(0, unbiased=False) + STATE_STD_EPS
        del own
        observations = ((observations.double() - loc) / scale).float()
        normalization = ObservationNorm(loc.float(), scale.float(), keys=("observation",))
    if reward_scale is not None:
        reward = steps.get(("next", "reward"))
        steps.set(("next", "reward"), (reward.double() * reward_scale(dataset)).float())
    normalized = OfflineDataset(observations, steps, dataset.env_id, dataset.ref_min_score,
                                dataset.ref_max_score, dataset.provenance)
    buffer = normalized.replay_buffer(batch_size, storage=TensorStorage(
        max(len(normalized), 1), device=spec.device))
    eval_env = make(spec.env, num_envs=spec.eval_episodes, seed=spec.seeds.eval_env,
                    device=spec.device)
    if normalization is not None:
        eval_env = TransformedEnv(eval_env, normalization.to(spec.device))
        normalization = eval_env.transform  # saved as the env's transforms, as online
    score = None
    if dataset.ref_min_score is not None and dataset.ref_max_score is not None:
        def score(returns: Sequence[float]) -> float:
            return float(dataset.normalized_score(float(np.mean(returns))))
    return OfflineData(dataset, buffer, eval_env, normalization, score)


def adam(params: Iterable[torch.Tensor], lr: float) -> torch.optim.Adam:
    """Adam as every offline recipe steps it: PyTorch's fused kernel, one pass over each
    parameter, its gradient and both moments, where the multi-tensor step makes ten (an
    offline update on CPU is bound by memory traffic; README's speed section has the
    figures). Its rounding differs from the per-tensor step's by a few units in the last
    place; it is deterministic, so a run still reproduces bit for bit."""
    return torch.optim.Adam(params, lr=lr, fused=True)


def return_range_scale(dataset: OfflineDataset, max_episode_steps: int = 1000) -> float:
    """CORL's reward normalisation for gym-MuJoCo (IQL, from the IQL paper):
    ``max_episode_steps / (max return - min return)`` over the dataset's episodes, with
    gym-MuJoCo's 1000-step episode limit."""
    rewards = dataset.steps.get(("next", "reward")).reshape(-1).double()
    episodes = dataset.steps.get("episode").reshape(-1)
    _, index = torch.unique_consecutive(episodes, return_inverse=True)
    returns = torch.zeros(int(index.max()) + 1, dtype=torch.float64).index_add_(0, index, rewards)
    spread = float(returns.max() - returns.min())
    if spread <= 0:
        raise ConfigError(f"{dataset.provenance.get('source')}: every episode has the same "
                          "return, so rewards cannot be scaled by the return range: set "
                          "normalize_reward=false")
    return max_episode_steps / spread


OWN_HOPPER = {f"rlbench/hopper/{quality}-v0": f"hopper-{quality}-v2"
              for quality in ("medium", "medium-replay", "medium-expert")}


def corl_dataset_defaults(settings: Mapping[str, Any]) -> dict[str, dict]:
    """A recipe's ``ENV_DEFAULTS`` from CORL's per-D4RL-dataset ``settings``: each a
    dataclass instance whose fields are named as the recipe's ``Config`` fields. The
    Hopper-v5 datasets rlbench makes take the settings of the D4RL dataset of the same
    quality: a guess (their data differs from D4RL's; nobody tuned for them)."""
    defaults = {name: asdict(values) for name, values in settings.items()}
    defaults.update({own: defaults[d4rl] for own, d4rl in OWN_HOPPER.items() if d4rl in defaults})
    return defaults


def corl_sources(algo: str, defaults: dict[str, dict]) -> dict[str, str]:
    """The CORL file each entry of ``defaults`` (from ``corl_dataset_defaults``) was read
    from, as ``rlbench show`` names a value's source: ``hopper-medium-replay-v2`` ->
    ``CORL configs/offline/<algo>/hopper/medium_replay_v2.yaml``."""
    def config_file(d4rl: str) -> str:
        env, _, quality = d4rl.removesuffix("-v2").partition("-")
        return f"CORL configs/offline/{algo}/{env}/{quality.replace('-', '_')}_v2.yaml"

    sources = {name: config_file(name) for name in defaults if name not in OWN_HOPPER}
    sources.update({own: f"{config_file(d4rl)}, {d4rl}'s for rlbench's own dataset"
                    for own, d4rl in OWN_HOPPER.items() if own in defaults})
    return sources
