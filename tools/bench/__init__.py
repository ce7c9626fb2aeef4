"""Speed beside peers and bounds of what this CPU can do."""
