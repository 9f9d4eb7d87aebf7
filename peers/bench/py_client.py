"""Peer client for Tether's round-trip benchmark: the official Python SDK (mcp==2.3.0).

Usage: python py_client.py CALLS COMMAND [ARGS...]
Connects over stdio, warms up, then times CALLS sequential tools/call get-sum round trips.
Prints one JSON line: {"calls": N, "seconds": S}.
"""

import asyncio
import json
import os
import sys
import time

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


async def main() -> None:
    calls = int(sys.argv[1])
    params = StdioServerParameters(command=sys.argv[2], args=sys.argv[3:])
    with open(os.devnull, "w") as devnull:
        async with stdio_client(params, errlog=devnull) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                for i in range(50):
                    await session.call_tool("get-sum", {"a": i, "b": 1})
                start = time.perf_counter()
                for i in range(calls):
                    result = await session.call_tool("get-sum", {"a": i, "b": 1})
                    if result.is_error:
                        raise RuntimeError("tool failed")
                seconds = time.perf_counter() - start
    print(json.dumps({"calls": calls, "seconds": seconds}))


asyncio.run(main())
