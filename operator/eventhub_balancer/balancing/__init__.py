"""balancing."""
