// A real MCP client (the official TypeScript SDK, 2025-11-25) that exercises `tether serve`.
// Usage: node gateway_client.mjs SCENARIO TARGET [ARGS...]
//   SCENARIO all | search | meta (the gateway's --tools mode)
//   TARGET   a URL (Streamable HTTP) or a command (stdio), then its arguments.
// The gateway fronts server-everything ("everything") and mcp-server-time ("time"). Prints one
// JSON object with what the client saw; each step records its own error.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CreateMessageRequestSchema, ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const [scenario, target, ...args] = process.argv.slice(2);
const transport = target.startsWith("http")
  ? new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers: JSON.parse(process.env.GATEWAY_HEADERS || "{}") } })
  : new StdioClientTransport({ command: target, args, stderr: "ignore", env: process.env });
const client = new Client({ name: "gateway-test-ts", version: "1.0.0" }, { capabilities: { sampling: {} } });
const report = {};
let listChanged = 0;
client.setNotificationHandler(ToolListChangedNotificationSchema, () => { listChanged += 1; });
client.setRequestHandler(CreateMessageRequestSchema, async (request) => ({
  role: "assistant",
  content: { type: "text", text: "sampled by the TypeScript client" },
  model: "scripted",
}));

const text = (result) => (result.content || []).map((b) => b.text || "").join("\n");
async function step(name, action) {
  try { report[name] = await action(); } catch (error) { report[name] = { error: String(error.message || error) }; }
}
const call = async (name, args) => {
  const result = await client.callTool({ name, arguments: args });
  return { text: text(result), is_error: Boolean(result.isError) };
};
const names = async () => (await client.listTools()).tools.map((t) => t.name).sort();

await client.connect(transport);
report.server = client.getServerVersion()?.name;
await step("tools", names);
if (scenario === "all") {
  await step("sum", () => call("everything__get-sum", { a: 2, b: 3 }));
  await step("time", () => call("time__get_current_time", { timezone: "UTC" }));
  await step("progress", async () => {
    const seen = [];
    const result = await client.callTool({ name: "everything__trigger-long-running-operation", arguments: { duration: 1, steps: 4 } },
      undefined, { onprogress: (p) => seen.push(p.progress) });
    return { text: text(result), progress: seen };
  });
  await step("cancel", async () => {
    const controller = new AbortController();
    const started = Date.now();
    const pending = client.callTool({ name: "everything__trigger-long-running-operation", arguments: { duration: 30, steps: 3 } },
      undefined, { signal: controller.signal });
    setTimeout(() => controller.abort("the test gave up"), 500);
    try { await pending; return { aborted: false }; } catch (error) {
      const after = await call("everything__get-sum", { a: 1, b: 1 });
      return { aborted: true, seconds: (Date.now() - started) / 1000, after: after.text };
    }
  });
  await step("resources", async () => {
    const read = await client.readResource({ uri: "demo://resource/static/document/architecture.md" });
    return { count: (await client.listResources()).resources.length, read_chars: read.contents.map((c) => (c.text || "").length).reduce((a, b) => a + b, 0) };
  });
  await step("prompt", async () => {
    const got = await client.getPrompt({ name: "everything__args-prompt", arguments: { city: "Oslo" } });
    return got.messages.map((m) => m.content.text || "").join(" ");
  });
  await step("complete", async () => {
    const result = await client.complete({ ref: { type: "ref/prompt", name: "everything__completable-prompt" }, argument: { name: "department", value: "E" } });
    return result.completion.values;
  });
  await step("sampling", () => call("everything__trigger-sampling-request", { prompt: "Say hi", maxTokens: 20 }));
} else if (scenario === "search") {
  await step("search", () => call("search_tools", { query: "sum of two numbers" }));
  // The gateway announces the loaded tools; wait for the notice instead of sleeping blindly.
  for (let i = 0; i < 100 && listChanged === 0; i++) await new Promise((r) => setTimeout(r, 20));
  report.list_changed = listChanged;
  await step("tools_after", names);
  await step("sum", () => call("everything__get-sum", { a: 20, b: 22 }));
} else if (scenario === "meta") {
  await step("sum", () => call("mcp_query", { server: "everything", tool: "get-sum", params: { a: 4, b: 5 } }));
  await step("bad", () => call("mcp_query", { server: "everything", tool: "get-sum", params: { a: "four" } }));
}
console.log(JSON.stringify(report));
await client.close().catch(() => {});
