"""Scheduling core: the staleness model, the load-scheduling policies and the simulator.

Policies are pure (no I/O, no wall clock): the simulator and the live service
drive the same objects, which is what makes simulated "what if" answers trustworthy.
"""
