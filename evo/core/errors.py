"""Errors the engine reports to users as one clear message and a non-zero exit."""


class EvoError(Exception):
    """A problem the user can fix: the CLI prints the message, no traceback."""


class TaskError(EvoError):
    """A problem file (or its seed) is missing, malformed or its reference fails."""


class ConfigError(EvoError):
    """A configuration value is invalid."""


class RunDirError(EvoError):
    """The run directory cannot be used (unwritable, or holds a different run)."""


class LLMError(EvoError):
    """The configured LLM endpoint cannot be used."""


class RunError(EvoError):
    """A run ended without doing what it was started for (every task set aside, nothing evaluated)."""
