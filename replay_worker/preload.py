"""Imported once, by the fork server the replay processes are forked from, and by nothing
else: it loads what a replay needs and warms it up (``child.warm_up``: no network, no thread
left behind), so that each replay process starts in milliseconds with the Agents SDK loaded
and the openai client's schemas built, instead of spending seconds of CPU on its first job.

The cyclic GC is paused while the SDK loads (the collections an import of this size runs
cost about a third of it), and what is loaded is then frozen (``gc.freeze``, as Python's
documentation advises before forking): the replay processes' collections never walk those
objects again, nor write to the memory they share with the fork server.
"""

import gc

gc.disable()
try:
    from replay_worker.child import warm_up

    warm_up()
    gc.collect()  # the warm-up's and the imports' garbage, once, rather than frozen with them
    gc.freeze()
finally:
    gc.enable()
