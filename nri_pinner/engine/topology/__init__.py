"""Machine topology: the model (sockets, dies, NUMA nodes, cores, caches), its discovery from sysfs
(the only I/O in the engine) and a text picture of it."""
