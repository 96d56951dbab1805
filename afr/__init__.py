"""afr, the Agent Flight Recorder: the composition root and the pieces shared by all parts."""

__version__ = "0.1.0"
