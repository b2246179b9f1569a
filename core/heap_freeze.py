"""Imported last by the turn-worker template (`core/worker_fork.py`): every object the template's
imports made is moved out of the cyclic garbage collector's reach (`gc.freeze`) before any worker is
forked.

Why: a worker's collections would otherwise walk those objects and write to their headers, copying
every page they sit on — the workers would share almost nothing of the template's memory."""

import gc

gc.collect()  # the imports' garbage first: what is frozen is never collected
gc.freeze()
