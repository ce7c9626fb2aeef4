"""The smallest gate suite: two PPO seeds on CartPole, 256 frames each (seconds)."""

GATE_SUITE = """\
algos: [ppo]
envs: [CartPole-v1]
seeds: 2
frames: 256
eval_every: 256
eval_episodes: 2
per_algo:
  ppo: {num_envs: 2, rollout_steps: 64, epochs: 1, minibatch_size: 64}
gate:
  alpha: 0.05
  delta:
    CartPole-v1: 50
"""
