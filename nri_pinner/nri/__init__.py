"""NRI wire protocol: generated messages (``gen``), the sans-I/O mux + ttrpc codec (``codec``), the
handler interface a plugin implements (``handlers``: a Protocol per event, typed and parked replies)
and the asyncio plugin stub (``stub``). Knows nothing about CPUs."""
