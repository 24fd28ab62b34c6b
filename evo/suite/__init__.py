"""The built-in task suite: KernelBench-style problem files with seed kernels.

Each ``<name>.py`` here is a problem file (``Model``, ``get_inputs``,
``get_init_inputs``, plus the optional extensions documented in
``evo/core/task.py``); ``seeds/<name>.py`` is its deliberately simple seed Triton
kernel (``ModelNew``).  The files are loaded by path, never imported as part
of the engine.
"""
