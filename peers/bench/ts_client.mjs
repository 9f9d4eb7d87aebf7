// Peer client for Tether's round-trip benchmark: the official TypeScript SDK.
// Usage: node ts_client.mjs CALLS CONCURRENCY TOOL COMMAND [ARGS...]
// Connects over stdio, warms up, then times CALLS tools/call TOOL {a, b} round trips made by
// CONCURRENCY workers in flight at once (1: sequential).
// Prints one JSON line: {"calls": N, "seconds": S}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [calls, concurrency, tool, command, ...args] = process.argv.slice(2);
const transport = new StdioClientTransport({ command, args, stderr: "ignore" });
const client = new Client({ name: "bench-ts", version: "1.0.0" });
await client.connect(transport);
for (let i = 0; i < 50; i++) await client.callTool({ name: tool, arguments: { a: i, b: 1 } });
let next = 0;
const total = Number(calls);
async function worker() {
  while (next < total) {
    const i = next++;
    const result = await client.callTool({ name: tool, arguments: { a: i, b: 1 } });
    if (result.isError) throw new Error("tool failed");
  }
}
const start = process.hrtime.bigint();
await Promise.all(Array.from({ length: Number(concurrency) }, worker));
const seconds = Number(process.hrtime.bigint() - start) / 1e9;
console.log(JSON.stringify({ calls: total, seconds }));
await client.close();
