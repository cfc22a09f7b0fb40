"""Layer 2: the timed protocol (baseline vs learner, chunk by chunk), the replay that proves the work, the accuracy gate."""
