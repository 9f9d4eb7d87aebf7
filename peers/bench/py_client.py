"""Peer client for Tether's round-trip benchmark: the official Python SDK (mcp==2.3.0).

Usage: python py_client.py CALLS CONCURRENCY TOOL COMMAND [ARGS...]
Connects over stdio, warms up, then times CALLS tools/call TOOL {a, b} round trips made by
CONCURRENCY workers in flight at once (1: sequential).
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
    calls, concurrency, tool = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    params = StdioServerParameters(command=sys.argv[4], args=sys.argv[5:])
    with open(os.devnull, "w") as devnull:
        async with stdio_client(params, errlog=devnull) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                for i in range(50):
                    await session.call_tool(tool, {"a": i, "b": 1})
                counter = iter(range(calls))

                async def worker() -> None:
                    for i in counter:
                        result = await session.call_tool(tool, {"a": i, "b": 1})
                        if result.is_error:
                            raise RuntimeError("tool failed")

                start = time.perf_counter()
                await asyncio.gather(*(worker() for _ in range(concurrency)))
                seconds = time.perf_counter() - start
    print(json.dumps({"calls": calls, "seconds": seconds}))


asyncio.run(main())
