"""The one error an import raises for a checkpoint it cannot take."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be imported: the message names the file or setting."""
