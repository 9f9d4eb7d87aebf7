// An editor, played by the official ACP TypeScript SDK (@agentclientprotocol/sdk, ClientApp),
// driving `tether acp` for crates/tether/tests/acp.rs. The same scenario and report as
// acp_client.py:
//
//   node acp_client.mjs TETHER WORKDIR EVERYTHING_CMD TIME_CMD [MODEL_FLAGS...]
//
// Every wait is bounded.

import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { ClientApp, ndJsonStream } from "@agentclientprotocol/sdk";

const [tether, workdir, everything, timeCmd, ...model] = process.argv.slice(2);

function within(promise, seconds, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer in ${seconds} s`)), seconds * 1000);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function server(name, command) {
  const [cmd, ...args] = command.split(" ");
  return { name, command: cmd, args, env: [] };
}

// One agent process for the length of `op(agent, editor)`.
async function withAgent(op) {
  const child = spawn(tether, ["acp", ...model], { cwd: workdir, stdio: ["pipe", "pipe", "inherit"] });
  const editor = { updates: [], asked: [], answers: [] };
  const app = new ClientApp()
    .onRequest("session/request_permission", async ({ params, agent }) => {
      editor.asked.push({
        toolCallId: params.toolCall.toolCallId,
        kind: params.toolCall.kind,
        options: params.options.map((o) => o.optionId),
        optionKinds: params.options.map((o) => o.kind),
      });
      const answer = editor.answers.shift();
      if (answer === "cancel") {
        await agent.notify("session/cancel", { sessionId: params.sessionId });
        return { outcome: { outcome: "cancelled" } };
      }
      return { outcome: { outcome: "selected", optionId: answer } };
    })
    .onNotification("session/update", ({ params }) => {
      editor.updates.push(params.update);
    });
  const stream = ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const connection = app.connect(stream);
  try {
    return await op(connection.agent, editor);
  } finally {
    connection.close();
    child.stdin.end();
    await within(new Promise((resolve) => child.once("exit", resolve)), 30, "agent exit").catch(() => child.kill());
  }
}

const report = {};
await withAgent(async (agent, editor) => {
  const init = await within(agent.request("initialize", { protocolVersion: 1, clientCapabilities: {} }), 60, "initialize");
  report.initialize = init;
  const created = await within(
    agent.request("session/new", {
      cwd: workdir,
      mcpServers: [server("everything", everything), server("time", timeCmd), server("broken", "/nonexistent/mcp-server")],
    }),
    120,
    "session/new",
  );
  report.session = created.sessionId;
  report.modes = created.modes;
  report.turns = [];
  for (const [answer, text] of [
    ["allow_once", "toggle logging"],
    ["reject_once", "toggle it again"],
    ["cancel", "and once more"],
  ]) {
    editor.answers.push(answer);
    const before = editor.updates.length;
    const response = await within(
      agent.request("session/prompt", { sessionId: created.sessionId, prompt: [{ type: "text", text }] }),
      120,
      "session/prompt",
    );
    report.turns.push({ stopReason: response.stopReason, updates: editor.updates.slice(before) });
  }
  report.asked = editor.asked;
  report.updates = editor.updates;
});
await withAgent(async (agent, editor) => {
  await within(agent.request("initialize", { protocolVersion: 1, clientCapabilities: {} }), 60, "initialize");
  const loaded = await within(
    agent.request("session/load", {
      cwd: workdir,
      sessionId: report.session,
      mcpServers: [server("everything", everything), server("time", timeCmd)],
    }),
    120,
    "session/load",
  );
  report.replayed = editor.updates.slice();
  report.configOptions = loaded.configOptions;
  // Slash commands the editor was offered, typed as prompts.
  report.commands = [];
  for (const text of ["/tools time", "/usage", "/clear", "/usage"]) {
    const before = editor.updates.length;
    const response = await within(
      agent.request("session/prompt", { sessionId: report.session, prompt: [{ type: "text", text }] }),
      120,
      "session/prompt",
    );
    report.commands.push({ stopReason: response.stopReason, updates: editor.updates.slice(before) });
  }
  const switched = await within(
    agent.request("session/set_config_option", { sessionId: report.session, configId: "model", value: "openai:other-model" }),
    60,
    "session/set_config_option",
  );
  report.switched = switched.configOptions;
  report.loadedUpdates = editor.updates;
});
process.stdout.write(JSON.stringify(report) + "\n");
process.exit(0);
