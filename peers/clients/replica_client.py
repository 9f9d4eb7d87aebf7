"""Many calls through a load balancer in front of `tether serve` replicas (the official Python
SDK client), for the scale-out test.

Usage: replica_client.py MODE URL CALLS
  MODE  legacy (2025-11-25: one session, whose sealed id every replica can serve) or auto
        (2026-07-28: stateless requests)
Calls builtin__add(a=i, b=1) CALLS times, one after another, checking each answer. A call that
fails (its replica died under it) is tried again, up to five times, waiting 0.2 s, then twice as
long each time (6 s in all: the balancer's health check needs a moment to take the dead replica
out, longer on a busy machine). Prints "progress N" after
each answered call, so the test can kill a replica part-way, then one JSON line: answered,
retried, failed, the protocol version and the errors seen.
"""

import asyncio
import json
import sys

from mcp import Client


async def main() -> None:
    mode, url, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
    errors: list = []
    counts = {"answered": 0, "retried": 0, "failed": 0}
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
    answered = retried = failed = 0
    async with Client(url, mode=mode, read_timeout_seconds=30) as client:
        versions.append(client.protocol_version)
        for i in range(calls):
            for attempt in range(5):
                try:
                    result = await client.call_tool("builtin__add", {"a": i, "b": 1})
                    text = "".join(getattr(block, "text", "") for block in result.content)
                    if result.is_error or text.strip() != str(i + 1):
                        errors.append(f"call {i}: wrong answer {text!r}")
                        failed += 1
                    else:
                        answered += 1
                    break
                except Exception as error:  # noqa: BLE001 - a dead replica; try again
                    retried += 1
                    errors.append(f"call {i} attempt {attempt}: {type(error).__name__}: {error}")
                    await asyncio.sleep(0.2 * 2**attempt)
            else:
                failed += 1
            print(f"progress {i + 1}", flush=True)
            counts.update(answered=answered, retried=retried, failed=failed)


asyncio.run(main())
