"""``afr runs``: the read API in a terminal, I/O kept apart from the pure renderers.

Lowest first: ``text`` (untrusted text made safe), ``widths`` (cells in a terminal),
``times``, ``terminal`` (width, colour), ``client`` (the read API over HTTP), ``render``
(pure: summaries and spans to lines), ``tail`` (the live loop, clock and sleep passed in),
``parser`` (argparse, cheap to import: every ``afr`` command builds it), ``cli`` (the
commands). Nothing here imports ``httpx`` until a command runs.
"""
