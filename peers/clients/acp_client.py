"""An editor, played by the official ACP Python SDK (agent-client-protocol), driving
`tether acp` for crates/tether/tests/acp.rs.

usage: acp_client.py TETHER WORKDIR EVERYTHING_CMD TIME_CMD [MODEL_FLAGS...]

It starts `tether acp MODEL_FLAGS...`, opens a session with server-everything, mcp-server-time
and a broken server, sends three prompts whose tool call needs permission (answered
allow_once, then reject_once, then cancelled by a session/cancel while it is pending), then
starts a second agent process, loads the session, types the slash commands the agent offers
and switches the model through its config option. It prints one JSON report on stdout;
the test asserts on it. Every wait is bounded.
"""

import asyncio
import json
import os
import sys

import acp
from acp.schema import AllowedOutcome, DeniedOutcome, McpServerStdio

# The SDK starts the agent with a trimmed environment (HOME, PATH, …); the test's own data
# directory and isolation (TETHER_DATA_DIR, XDG_*) reach Tether only when passed on.
AGENT_ENV = dict(os.environ)


class Editor(acp.Client):
    def __init__(self):
        self.updates = []
        self.asked = []
        self.answers = []
        self.conn = None
        self.session_id = None

    def on_connect(self, conn):
        self.conn = conn

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.asked.append(
            {
                "toolCallId": tool_call.tool_call_id,
                "kind": tool_call.kind,
                "options": [o.option_id for o in options],
                "optionKinds": [o.kind for o in options],
            }
        )
        answer = self.answers.pop(0)
        if answer == "cancel":
            # The person walks away: the editor cancels the turn, then answers what is pending
            # "cancelled", as the protocol asks.
            await self.conn.cancel(session_id=session_id)
            return acp.RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return acp.RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=answer)
        )

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append(update.model_dump(mode="json", by_alias=True, exclude_none=True))


def server(name, command):
    parts = command.split()
    return McpServerStdio(name=name, command=parts[0], args=parts[1:], env=[])


async def main():
    tether, workdir, everything, time_cmd = sys.argv[1:5]
    model = sys.argv[5:]
    report = {}
    editor = Editor()
    async with acp.spawn_agent_process(editor, tether, "acp", *model, cwd=workdir, env=AGENT_ENV) as (conn, _):
        init = await asyncio.wait_for(conn.initialize(protocol_version=1), 60)
        report["initialize"] = init.model_dump(mode="json", by_alias=True, exclude_none=True)
        new = await asyncio.wait_for(
            conn.new_session(
                cwd=workdir,
                mcp_servers=[
                    server("everything", everything),
                    server("time", time_cmd),
                    server("broken", "/nonexistent/mcp-server"),
                ],
            ),
            120,
        )
        session = new.session_id
        report["session"] = session
        report["modes"] = new.modes.model_dump(mode="json", by_alias=True) if new.modes else None
        report["turns"] = []
        for answer, text in [
            ("allow_once", "toggle logging"),
            ("reject_once", "toggle it again"),
            ("cancel", "and once more"),
        ]:
            editor.answers.append(answer)
            before = len(editor.updates)
            response = await asyncio.wait_for(
                conn.prompt(session_id=session, prompt=[acp.text_block(text)]), 120
            )
            # Updates sent before the answer are in; give the reader a beat for ordering only.
            await asyncio.sleep(0)
            report["turns"].append(
                {"stopReason": response.stop_reason, "updates": editor.updates[before:]}
            )
        report["asked"] = editor.asked
        report["updates"] = editor.updates

    replayed = Editor()
    async with acp.spawn_agent_process(replayed, tether, "acp", *model, cwd=workdir, env=AGENT_ENV) as (conn, _):
        await asyncio.wait_for(conn.initialize(protocol_version=1), 60)
        loaded = await asyncio.wait_for(
            conn.load_session(
                cwd=workdir,
                session_id=session,
                mcp_servers=[server("everything", everything), server("time", time_cmd)],
            ),
            120,
        )
        report["replayed"] = list(replayed.updates)
        report["configOptions"] = [
            o.model_dump(mode="json", by_alias=True, exclude_none=True)
            for o in (loaded.config_options or [])
        ]
        # Slash commands the editor was offered, typed as prompts.
        report["commands"] = []
        for text in ["/tools time", "/usage", "/clear", "/usage"]:
            before = len(replayed.updates)
            response = await asyncio.wait_for(
                conn.prompt(session_id=session, prompt=[acp.text_block(text)]), 120
            )
            report["commands"].append(
                {"stopReason": response.stop_reason, "updates": replayed.updates[before:]}
            )
        switched = await asyncio.wait_for(
            conn.set_config_option(config_id="model", session_id=session, value="openai:other-model"),
            60,
        )
        report["switched"] = [
            o.model_dump(mode="json", by_alias=True, exclude_none=True)
            for o in switched.config_options
        ]
        report["loadedUpdates"] = replayed.updates
    print(json.dumps(report))


asyncio.run(main())
