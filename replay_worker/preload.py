"""Imported once, by the fork server the replay processes are forked from, and by nothing
else: it loads what a replay needs and warms it up (``child.warm_up``: no network, no thread
left behind), so that each replay process starts in milliseconds with the Agents SDK loaded
and the openai client's schemas built, instead of spending seconds of CPU on its first job.
"""

from replay_worker.child import warm_up

warm_up()
