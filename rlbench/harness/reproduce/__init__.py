"""``rlbench reproduce``: run a stored run again from its record and compare its metric
series bit for bit, or compare two stored runs."""
