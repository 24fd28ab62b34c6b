"""Seed kernels of the built-in suite, one per problem file in ``evo/suite``."""
