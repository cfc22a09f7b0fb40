"""Layer 3: checks and scoring: cell checks run in the parent, quiz keys, speed targets, points from a measurement."""
