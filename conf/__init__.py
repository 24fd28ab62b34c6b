"""Hydra configs of the engine (``evo run`` composes ``config.yaml``)."""
