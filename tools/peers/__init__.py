"""Peer libraries trained under the harness: Stable-Baselines3 online, d3rlpy offline."""
