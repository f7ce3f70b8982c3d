"""Errors a user can act on. The CLI prints them as one line; the server maps them to 4xx."""


class UserError(Exception):
    """A problem with the user's input or environment, explained in one line."""

    exit_code = 2


class CheckpointError(UserError):
    """A checkpoint that is unreadable, or whose tensors don't match the network."""


class VideoError(UserError):
    """A video or image folder that can't be read, or is too short to track."""


class BackendUnavailable(UserError):
    """A backend that can't run on this machine; the message says why."""
