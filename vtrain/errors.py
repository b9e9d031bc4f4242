"""Errors that reach the user as one line (field + rule), never as a traceback."""


class VtrainError(Exception):
    """Base class: the CLI prints ``str(err)`` on one line and exits non-zero."""


class ConfigError(VtrainError):
    """An input value breaks a rule; the message names the field and the rule."""


class ProfileError(VtrainError):
    """A profile file is missing, corrupt or does not match the request."""
