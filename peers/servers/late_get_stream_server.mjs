// A Streamable HTTP server on the official TypeScript SDK whose tool asks the client a form
// on the standalone GET stream (a server request with no related request, as the SDK sends
// it from outside a handler's `extra`), and which answers the client's GET only after
// GET_DELAY_MS (500 by default). The SDK drops a message meant for the GET stream while none
// is open, so a client that calls the tool before its GET stream is answered never sees the
// form: the call then reports "elicitation failed" after 5 s. Prints "LISTENING PORT".
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CallToolRequestSchema,
  ElicitResultSchema,
  ListToolsRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';

const delayMs = Number(process.env.GET_DELAY_MS ?? 500);
const transports = new Map();

function newServer() {
  const server = new Server({ name: 'late-get-stream', version: '1.0.0' }, { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: [{
      name: 'ask_name',
      description: 'Asks the user for a name, on the standalone stream',
      inputSchema: { type: 'object', properties: {} },
    }],
  }));
  server.setRequestHandler(CallToolRequestSchema, async () => {
    try {
      const answer = await server.request({
        method: 'elicitation/create',
        params: {
          message: 'Your name?',
          requestedSchema: { type: 'object', properties: { name: { type: 'string', default: 'Ada' } } },
        },
      }, ElicitResultSchema, { timeout: 5000 });
      return { content: [{ type: 'text', text: `answer: ${JSON.stringify(answer)}` }] };
    } catch (error) {
      return { content: [{ type: 'text', text: `elicitation failed: ${error.message}` }], isError: true };
    }
  });
  return server;
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString('utf8');
  return text ? JSON.parse(text) : undefined;
}

const httpServer = http.createServer(async (req, res) => {
  try {
    const body = req.method === 'POST' ? await readBody(req) : undefined;
    const sessionId = req.headers['mcp-session-id'];
    let transport = sessionId ? transports.get(sessionId) : undefined;
    if (!transport) {
      if (req.method !== 'POST' || body?.method !== 'initialize') {
        res.writeHead(400).end('unknown session');
        return;
      }
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: randomUUID,
        onsessioninitialized: (id) => transports.set(id, transport),
      });
      await newServer().connect(transport);
    }
    if (req.method === 'GET') await new Promise((resolve) => setTimeout(resolve, delayMs));
    await transport.handleRequest(req, res, body);
  } catch (error) {
    if (!res.headersSent) res.writeHead(500).end(String(error));
  }
});
httpServer.listen(0, '127.0.0.1', () => console.log(`LISTENING ${httpServer.address().port}`));
