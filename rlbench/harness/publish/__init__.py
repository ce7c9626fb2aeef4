"""``rlbench publish``: a static leaderboard site from the store, readable from disk."""
