"""afr, the Agent Flight Recorder: the composition root (the CLI), imported by nothing of the
server; what its parts share is in ``afr_common`` (docs/adr/0032-layers.md)."""

__version__ = "0.1.0"
