"""Replay buffers and offline datasets (storages, samplers, writers; D4RL and Minari)."""
