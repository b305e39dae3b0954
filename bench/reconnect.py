"""How soon a restarted server is reachable through a channel that saw it die
(``python -m bench reconnect``).

Per setting (gRPC's own reconnect backoff, and bespokv's: ``Tuning.reconnect_backoff_ms`` /
``max_reconnect_backoff_ms``): a ``grpc.aio`` channel calls the health service of a port
where nothing listens, every 10 ms, for ``--down`` seconds (the channel backs off its
connection attempts meanwhile); then a server starts on that port, and the time from the
server listening to the first successful call is the *reconnect delay*. Reported per
repetition, and the median ratio of gRPC's to bespokv's.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

__all__ = ["reconnect_delay", "main_args"]


async def reconnect_delay(options: list[tuple[str, Any]], down: float) -> float:
    """Seconds from the server listening to the first successful call (see above)."""
    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    from bespokv.testing import free_port

    port = free_port()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options)
    stub = health_pb2_grpc.HealthStub(channel)

    async def call() -> bool:
        try:
            await stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
            return True
        except grpc.aio.AioRpcError:
            return False

    end = time.monotonic() + down
    while time.monotonic() < end:
        await call()
        await asyncio.sleep(0.01)
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    if server.add_insecure_port(f"127.0.0.1:{port}") == 0:
        raise RuntimeError(f"port {port} was taken meanwhile; run again")
    await server.start()
    up = time.monotonic()
    try:
        while not await call():
            if time.monotonic() - up > 300:
                raise TimeoutError("no successful call within 300 s of the restart")
            await asyncio.sleep(0.01)
        return time.monotonic() - up
    finally:
        await channel.close()
        await server.stop(0)


def main_args(down: float, repeat: int, command: str) -> int:
    from bespokv.security import channel_options

    settings = {"grpc-defaults": [], "bespokv": [o for o in channel_options() if "reconnect" in o[0]]}
    results: dict[str, list[float]] = {k: [] for k in settings}
    for rep in range(repeat):
        for name, opts in settings.items():
            d = asyncio.run(reconnect_delay(opts, down))
            results[name].append(d)
            print(f"{name:14} rep {rep + 1}: reachable {d:.3f} s after the restart (down {down:g} s)", flush=True)
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"\n# reconnect ({command})")
    print(f"bespokv options: {settings['bespokv']}")
    for k, v in results.items():
        print(f"{k:14} median {med[k]:.3f} s  ({', '.join(f'{x:.3f}' for x in v)})")
    print(f"ratio grpc-defaults / bespokv (medians): {med['grpc-defaults'] / max(med['bespokv'], 1e-6):.1f}x")
    return 0
