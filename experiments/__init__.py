"""Experiment configs: `--config experiments/NAME.py:ARG` (installed with nplace as nplace.experiments)."""
