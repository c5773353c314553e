"""lze-bench: benchmark online prompt selection for RL post-training with honest FLOP accounting."""

__version__ = "0.1.0"
