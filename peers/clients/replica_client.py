"""Many calls through a load balancer in front of `tether serve` replicas (the official Python
SDK client), for the scale-out test.

Usage: replica_client.py MODE URL CALLS
  MODE  legacy (2025-11-25: one session, whose sealed id every replica can serve) or auto
        (2026-07-28: stateless requests)
Calls builtin__add(a=i, b=1) CALLS times, one after another, checking each answer. A call that
fails (its replica died under it) is tried again, up to five times, waiting 0.2 s, then twice as
long each time (6 s in all: the balancer's health check needs a moment to take the dead replica
out, longer on a busy machine). When a connection drops under a request in flight, the SDK ends
the whole client (its transport's task group fails with "Server disconnected without sending a
response"), so the script opens a new client and goes on with that call, at most twice.
Prints "progress N" after each answered call, so the test can kill a replica part-way, then one
JSON line: answered, retried, reconnected, failed, the protocol version and the errors seen.
"""

import asyncio
import json
import sys

from mcp import Client

CLIENTS = 3


async def main() -> None:
    mode, url, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
    errors: list = []
    counts = {"answered": 0, "retried": 0, "reconnected": 0, "failed": 0}
    versions: list = []
    try:
        await run(mode, url, calls, errors, counts, versions)
    except Exception as error:  # noqa: BLE001 - reported, so the test says what went wrong
        errors.append(f"the client failed: {describe(error)}")
        counts["failed"] = calls - counts["answered"]
    print(json.dumps({**counts, "protocol_version": versions[0] if versions else None,
                      "errors": errors[:10]}), flush=True)


def describe(error: BaseException) -> str:
    """The error, and for an exception group the errors inside it (the SDK raises groups)."""
    inner = getattr(error, "exceptions", None)
    if inner:
        return f"{type(error).__name__}: " + "; ".join(describe(e) for e in inner)
    return f"{type(error).__name__}: {error}"


async def run(mode: str, url: str, calls: int, errors: list, counts: dict, versions: list) -> None:
    done = 0
    for client_number in range(CLIENTS):
        try:
            async with Client(url, mode=mode, read_timeout_seconds=30) as client:
                if not versions:
                    versions.append(client.protocol_version)
                while done < calls:
                    await call(client, done, errors, counts)
                    done += 1
                    print(f"progress {done}", flush=True)
            return
        except Exception as error:  # noqa: BLE001 - the connection dropped; a new client goes on
            if client_number == CLIENTS - 1:
                raise
            counts["reconnected"] += 1
            errors.append(f"call {done}: client {client_number} ended: {describe(error)}")


async def call(client: Client, i: int, errors: list, counts: dict) -> None:
    for attempt in range(5):
        try:
            result = await client.call_tool("builtin__add", {"a": i, "b": 1})
            text = "".join(getattr(block, "text", "") for block in result.content)
            if result.is_error or text.strip() != str(i + 1):
                errors.append(f"call {i}: wrong answer {text!r}")
                counts["failed"] += 1
            else:
                counts["answered"] += 1
            return
        except Exception as error:  # noqa: BLE001 - a dead replica; try again
            counts["retried"] += 1
            errors.append(f"call {i} attempt {attempt}: {type(error).__name__}: {error}")
            await asyncio.sleep(0.2 * 2**attempt)
    counts["failed"] += 1


asyncio.run(main())
