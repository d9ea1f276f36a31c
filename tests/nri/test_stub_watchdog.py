"""A runtime that accepts RegisterPlugin but never sends Configure must not leave the stub waiting forever."""

from __future__ import annotations

import asyncio

from nri_pinner.nri import codec
from nri_pinner.nri.stub import Stub


class Silent:
    """Handles CreateContainer; only there to have a plugin to register."""

    def create_container(self, req: object) -> None:
        return None


async def test_no_configure_after_registration_closes_and_reconnects(sock_path: str) -> None:
    registrations: list[float] = []

    async def mute_runtime(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = codec.Decoder()
        while data := await reader.read(65536):
            for message in decoder.feed(data):
                service, method, _payload, _timeout = codec.decode_request(message.payload)
                assert (service, method) == ("nri.pkg.api.v1alpha1.Runtime", "RegisterPlugin")
                registrations.append(asyncio.get_running_loop().time())
                writer.write(codec.encode_message(codec.RUNTIME_SERVICE_CONN, message.stream_id,
                                                  codec.MSG_RESPONSE, codec.encode_response(b"")))
                await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(mute_runtime, path=sock_path)
    stub = Stub(Silent(), name="wd", idx="10", socket_path=sock_path, registration_timeout=0.3,
                backoff_initial=0.1, backoff_max=0.1)
    task = asyncio.create_task(stub.run())
    try:
        for _ in range(100):
            if len(registrations) >= 2:
                break
            await asyncio.sleep(0.05)
    finally:
        await stub.stop()
        await asyncio.wait_for(task, 5)
        server.close()
    # registered, gave up after the registration timeout, and came back
    assert len(registrations) >= 2
    assert registrations[1] - registrations[0] >= 0.3
    assert stub.stats.as_dict()["connections"] >= 2
