"""Experiments: configuration, models, data and metrics behind scripts/train.py and
scripts/reproduce.py."""
