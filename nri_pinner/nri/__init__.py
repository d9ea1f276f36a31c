"""NRI wire protocol: generated messages (``gen``), the sans-I/O mux + ttrpc codec
(``codec``) and the asyncio plugin stub (``stub``). Knows nothing about CPUs."""
