"""The ``afr`` command groups, one module each: its ``add_<group>_parser`` beside the code
that runs it. Each imports only the standard library at module level, so building the
whole parser (every command does) stays cheap; a command loads what it needs when it runs.
"""
