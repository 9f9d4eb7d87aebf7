// Peer client for Tether's round-trip benchmark: the official TypeScript SDK.
// Usage: node ts_client.mjs CALLS COMMAND [ARGS...]
// Connects over stdio, warms up, then times CALLS sequential tools/call get-sum round trips.
// Prints one JSON line: {"calls": N, "seconds": S}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [calls, command, ...args] = process.argv.slice(2);
const transport = new StdioClientTransport({ command, args, stderr: "ignore" });
const client = new Client({ name: "bench-ts", version: "1.0.0" });
await client.connect(transport);
for (let i = 0; i < 50; i++) await client.callTool({ name: "get-sum", arguments: { a: i, b: 1 } });
const start = process.hrtime.bigint();
for (let i = 0; i < Number(calls); i++) {
  const result = await client.callTool({ name: "get-sum", arguments: { a: i, b: 1 } });
  if (result.isError) throw new Error("tool failed");
}
const seconds = Number(process.hrtime.bigint() - start) / 1e9;
console.log(JSON.stringify({ calls: Number(calls), seconds }));
await client.close();
