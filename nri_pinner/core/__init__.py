"""The node core: the one owner of node state, sans-I/O (events in, a reply and effects out).

See node.py. Nothing here does I/O, takes a lock or starts a thread (a test enforces the imports);
the edge around it — edge/plugin.py and the threads it drives — carries out the effects.
"""
