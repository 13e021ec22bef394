// A host on the MCP TypeScript SDK (the handshake protocol most hosts use): connects to an MCP server
// over stdio, makes the tool calls given as JSON on the command line, and prints each result's text as a
// JSON array. Used by tests/session/test_stash_follows_agent.py (the SDK is installed by `make ts-sdk`).
//   node ts_sdk_client.mjs SDK_DIR '{"command": ..., "args": [...], "env": {...}}' '[["tool", {args}], ...]'
import { pathToFileURL } from "node:url";
import path from "node:path";

const [sdkDir, serverJson, callsJson] = process.argv.slice(2);
const sdk = (p) => pathToFileURL(path.join(sdkDir, "node_modules/@modelcontextprotocol/sdk/dist/esm", p)).href;
const { Client } = await import(sdk("client/index.js"));
const { StdioClientTransport } = await import(sdk("client/stdio.js"));

const server = JSON.parse(serverJson);
const transport = new StdioClientTransport({ command: server.command, args: server.args, env: server.env, stderr: "ignore" });
const client = new Client({ name: "ts-sdk-host", version: "1.0.0" });
await client.connect(transport);
const out = [];
for (const [name, args] of JSON.parse(callsJson)) {
  const r = await client.callTool({ name, arguments: args }, undefined, { timeout: 120000 });
  out.push({ isError: Boolean(r.isError), text: r.content.map((c) => c.text ?? "").join("") });
}
await client.close();
process.stdout.write(JSON.stringify(out));
