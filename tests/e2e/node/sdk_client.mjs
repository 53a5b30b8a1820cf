// End-to-end test of codespace-mcp with the official MCP TypeScript SDK client
// (@modelcontextprotocol/sdk), over stdio (StdioClientTransport spawning the binary) and over
// Streamable HTTP (StreamableHTTPClientTransport against a server spawned with --http --port 0,
// the port read from its "listening" log line).
//
// The SDK's Client validates structuredContent against each tool's outputSchema once it has
// listed the tools (Client.callTool throws on a mismatch); the script checks that those
// validators exist and really reject a bad object before relying on them.
//
// Run: CODESPACE_MCP_BIN=/path/to/codespace-mcp node sdk_client.mjs   (or ../run_node.sh)
// Exit status 0 when every check passed, 1 otherwise; the last line is "N passed, M failed".
import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LoggingMessageNotificationSchema, McpError } from '@modelcontextprotocol/sdk/types.js';

const TOOLS = ['workspace_info', 'read', 'find', 'apply_patch', 'operation_status', 'exec_command',
  'write_stdin', 'read_process', 'process_status', 'process_resize', 'terminate_process'];
const REQUEST_TIMEOUT_MS = 15000;
const OVERALL_TIMEOUT_MS = 120000;

const BIN = process.env.CODESPACE_MCP_BIN;
if (!BIN) {
  console.error('sdk_client: CODESPACE_MCP_BIN is not set (path of the built codespace-mcp)');
  process.exit(1);
}

let passed = 0;
let failed = 0;
const results = { stdio: [0, 0], http: [0, 0] };

function check(transport, name, cond, detail) {
  if (cond) {
    passed++;
    results[transport][0]++;
  } else {
    failed++;
    results[transport][1]++;
    console.log(`FAIL [${transport}] ${name}${detail === undefined ? '' : ': ' + detail}`);
  }
}

async function step(transport, name, fn) {
  try {
    await fn();
  } catch (err) {
    check(transport, name, false, err && err.stack ? err.stack : String(err));
  }
}

function workspace() {
  const base = mkdtempSync(join(tmpdir(), 'cs-e2e-node-'));
  const root = join(base, 'root');
  mkdirSync(root);
  writeFileSync(join(root, 'hello.txt'), 'hello\n');
  const state = join(base, 'state');
  mkdirSync(state);
  return { base, root, canonical: realpathSync(root), state };
}

function serverEnv(ws) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith('CODESPACE_')) env[k] = v;
  }
  env.XDG_STATE_HOME = ws.state;
  return env;
}

// The checks both transports share. client is connected.
async function exercise(t, client, ws) {
  const opts = { timeout: REQUEST_TIMEOUT_MS };

  const info = client.getServerVersion();
  check(t, 'serverInfo.name is codespace', info && info.name === 'codespace', JSON.stringify(info));
  check(t, 'serverInfo.version is a string', info && typeof info.version === 'string' &&
    info.version.length > 0);
  const caps = client.getServerCapabilities() || {};
  check(t, 'capabilities: tools and logging, no resources or prompts',
    caps.tools && caps.logging && !caps.resources && !caps.prompts, JSON.stringify(caps));
  check(t, 'instructions are given', typeof client.getInstructions() === 'string' &&
    client.getInstructions().includes('workspace_info'));

  await step(t, 'ping', async () => {
    const r = await client.ping(opts);
    check(t, 'ping answers {}', r && Object.keys(r).length === 0, JSON.stringify(r));
  });
  await step(t, 'logging/setLevel', async () => {
    await client.setLoggingLevel('warning', opts);
    check(t, 'logging/setLevel accepted', true);
  });

  let tools = [];
  await step(t, 'tools/list', async () => {
    tools = (await client.listTools(undefined, opts)).tools;
    check(t, 'tools/list has the 11 tools in contract order',
      JSON.stringify(tools.map((x) => x.name)) === JSON.stringify(TOOLS),
      JSON.stringify(tools.map((x) => x.name)));
  });
  for (const tool of tools) {
    check(t, `${tool.name} has title, outputSchema and annotations`,
      typeof tool.title === 'string' && tool.outputSchema && tool.outputSchema.type === 'object' &&
      tool.annotations && typeof tool.annotations.readOnlyHint === 'boolean');
    // Output validation must be on: the Client compiled a validator from the outputSchema when
    // it listed the tools, and that validator rejects an object missing every required field.
    const v = client.getToolOutputValidator(tool.name);
    check(t, `${tool.name}: the SDK validates structuredContent`, typeof v === 'function' &&
      v({}).valid === false && v({ unexpected: 1 }).valid === false);
  }

  await step(t, 'workspace_info without workspace_id', async () => {
    const r = await client.callTool({ name: 'workspace_info', arguments: {} }, undefined, opts);
    const s = r.structuredContent;
    check(t, 'workspace_info {}: success with structuredContent', !r.isError && s &&
      s.server === 'codespace' && s.workspace_id === null && !('execution' in s),
      JSON.stringify(r).slice(0, 300));
    check(t, 'workspace_info {}: text item holds the same JSON', r.content.length === 1 &&
      r.content[0].type === 'text' &&
      JSON.stringify(JSON.parse(r.content[0].text)) === JSON.stringify(s));
    check(t, 'workspace_info {}: tools_exposed in order',
      s && JSON.stringify(s.tools_exposed) === JSON.stringify(TOOLS));
  });
  await step(t, 'workspace_info default', async () => {
    const r = await client.callTool({ name: 'workspace_info', arguments: { workspace_id: 'default' } },
      undefined, opts);
    const s = r.structuredContent || {};
    check(t, 'workspace_info default: success', !r.isError && s.workspace_id === 'default',
      JSON.stringify(r).slice(0, 300));
    check(t, 'workspace_info default: profile workspace-write', s.profile === 'workspace-write');
    check(t, 'workspace_info default: root is the canonical path', s.root === ws.canonical,
      `${s.root} != ${ws.canonical}`);
    const ex = s.execution || {};
    check(t, 'workspace_info default: execution fields', ['environment', 'permissions', 'files',
      'process', 'serialization', 'isolation', 'network'].every((k) => k in ex), Object.keys(ex));
    check(t, 'workspace_info default: no environment_id anywhere',
      !JSON.stringify(r).includes('"environment_id"'));
  });
  await step(t, 'workspace_info unknown id', async () => {
    const r = await client.callTool({ name: 'workspace_info', arguments: { workspace_id: 'nope' } },
      undefined, opts);
    let body = {};
    try { body = JSON.parse(r.content[0].text); } catch { /* checked below */ }
    check(t, 'workspace_info nope: isError true, WORKSPACE_NOT_FOUND, no structuredContent',
      r.isError === true && body.code === 'WORKSPACE_NOT_FOUND' && !('structuredContent' in r),
      JSON.stringify(r));
  });
  await step(t, 'INVALID_ARGUMENTS', async () => {
    const r = await client.callTool({ name: 'exec_command',
      arguments: { workspace_id: 'default', command: [1] } }, undefined, opts);
    let body = {};
    try { body = JSON.parse(r.content[0].text); } catch { /* checked below */ }
    check(t, 'exec_command [1]: INVALID_ARGUMENTS /command/0: expected string',
      r.isError === true && body.code === 'INVALID_ARGUMENTS' &&
      body.message === '/command/0: expected string', JSON.stringify(r));
  });
  // A process exit is one info notifications/message (docs/protocol.md "Logging"), parsed by the
  // SDK's own LoggingMessageNotificationSchema. Over HTTP it rides the call's SSE stream, which
  // the SDK opens when it asks for progress (onprogress), so both transports ask for it.
  await step(t, 'notifications/message on a process exit', async () => {
    const logs = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => { logs.push(n); });
    await client.setLoggingLevel('info', opts);
    const r = await client.callTool({ name: 'exec_command', arguments: { workspace_id: 'default',
      command: ['sh', '-c', 'exit 3'], yield_ms: 10000 } }, undefined,
    { ...opts, onprogress: () => {} });
    const s = r.structuredContent || {};
    check(t, 'exec_command exit 3: exited 3', !r.isError && s.exit_code === 3, JSON.stringify(r));
    for (let i = 0; i < 20 && logs.length === 0; i++) await new Promise((ok) => setTimeout(ok, 50));
    const mine = logs.filter((n) => n.params.data && n.params.data.process_id === s.process_id);
    check(t, 'one info message from logger codespace names the process, exit 3, exited',
      mine.length === 1 && mine[0].params.level === 'info' && mine[0].params.logger === 'codespace' &&
      mine[0].params.data.event === 'process_exited' && mine[0].params.data.exit_code === 3 &&
      mine[0].params.data.termination === 'exited' && mine[0].params.data.workspace_id === 'default',
      JSON.stringify(logs));
    await client.setLoggingLevel('warning', opts);
    const q = await client.callTool({ name: 'exec_command', arguments: { workspace_id: 'default',
      command: ['true'], yield_ms: 10000 } }, undefined, { ...opts, onprogress: () => {} });
    await new Promise((ok) => setTimeout(ok, 300));
    const pid = (q.structuredContent || {}).process_id;
    check(t, 'logging/setLevel warning: no message for an exit',
      pid && !logs.some((n) => n.params.data && n.params.data.process_id === pid), JSON.stringify(logs));
  });
  await step(t, 'unknown tool', async () => {
    let err = null;
    try {
      await client.callTool({ name: 'no_such_tool', arguments: {} }, undefined, opts);
    } catch (e) {
      err = e;
    }
    check(t, 'unknown tool: JSON-RPC error -32602', err instanceof McpError && err.code === -32602,
      String(err));
  });
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([promise, new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  })]).finally(() => clearTimeout(timer));
}

async function overStdio(ws) {
  const transport = new StdioClientTransport({
    command: BIN,
    args: ['--workspace', ws.root],
    env: serverEnv(ws),
    stderr: 'pipe',
  });
  const stderr = [];
  transport.stderr.on('data', (d) => stderr.push(d.toString()));
  const client = new Client({ name: 'codespace-e2e-node', version: '1.0.0' });
  try {
    await withTimeout(client.connect(transport), REQUEST_TIMEOUT_MS, 'stdio connect');
    check('stdio', 'connect (initialize) over stdio', true);
    await exercise('stdio', client, ws);
  } catch (err) {
    check('stdio', 'stdio session', false, err && err.stack ? err.stack : String(err));
  } finally {
    await client.close().catch(() => {});
  }
  if (results.stdio[1]) console.log(`stdio server stderr:\n${stderr.join('').slice(-2000)}`);
}

function startHttpServer(ws) {
  return new Promise((resolve, reject) => {
    const child = spawn(BIN, ['--http', '--port', '0', '--workspace', ws.root],
      { env: serverEnv(ws), stdio: ['ignore', 'ignore', 'pipe'] });
    const lines = [];
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`no listening line within ${REQUEST_TIMEOUT_MS} ms:\n${lines.join('\n')}`));
    }, REQUEST_TIMEOUT_MS);
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`HTTP server exited (${code}) before listening:\n${lines.join('\n')}`));
    });
    createInterface({ input: child.stderr }).on('line', (line) => {
      lines.push(line);
      let rec = null;
      try { rec = JSON.parse(line); } catch { return; }
      if (rec && rec.msg === 'listening' && Number.isInteger(rec.port) && rec.port > 0) {
        clearTimeout(timer);
        resolve({ child, port: rec.port, lines });
      }
    });
  });
}

async function overHttp(ws) {
  let server;
  try {
    server = await startHttpServer(ws);
  } catch (err) {
    check('http', 'start the HTTP server', false, err.message);
    return;
  }
  check('http', 'start the HTTP server (--http --port 0)', true);
  const url = new URL(`http://127.0.0.1:${server.port}/mcp`);
  const transport = new StreamableHTTPClientTransport(url);
  const client = new Client({ name: 'codespace-e2e-node', version: '1.0.0' });
  try {
    await withTimeout(client.connect(transport), REQUEST_TIMEOUT_MS, 'http connect');
    check('http', 'connect (initialize) over Streamable HTTP', true);
    check('http', 'a session id was issued', typeof transport.sessionId === 'string' &&
      transport.sessionId.length > 0);
    await exercise('http', client, ws);
    await step('http', 'DELETE ends the session', async () => {
      await transport.terminateSession();
      check('http', 'DELETE ends the session', transport.sessionId === undefined);
    });
  } catch (err) {
    check('http', 'http session', false, err && err.stack ? err.stack : String(err));
  } finally {
    await client.close().catch(() => {});
  }
  const exited = new Promise((resolve) => server.child.on('exit', (code, sig) => resolve([code, sig])));
  server.child.kill('SIGTERM');
  const [code, sig] = await withTimeout(exited, 5000, 'HTTP server exit after SIGTERM')
    .catch((err) => { server.child.kill('SIGKILL'); return [null, err.message]; });
  check('http', 'HTTP server exits 0 on SIGTERM', code === 0, `code ${code} signal ${sig}`);
  if (results.http[1]) console.log(`HTTP server stderr:\n${server.lines.join('\n').slice(-2000)}`);
}

async function main() {
  const watchdog = setTimeout(() => {
    console.log(`sdk_client: gave up after ${OVERALL_TIMEOUT_MS} ms`);
    console.log(`${passed} passed, ${failed + 1} failed`);
    process.exit(1);
  }, OVERALL_TIMEOUT_MS);
  const ws = workspace();
  try {
    await overStdio(ws);
    await overHttp(ws);
  } finally {
    rmSync(ws.base, { recursive: true, force: true });
    clearTimeout(watchdog);
  }
  let sdk = '?';
  try {
    sdk = JSON.parse(readFileSync(new URL('./node_modules/@modelcontextprotocol/sdk/package.json',
      import.meta.url), 'utf8')).version;
  } catch { /* only for the summary */ }
  console.log(`sdk_client (@modelcontextprotocol/sdk ${sdk}, node ${process.version}): ` +
    `stdio ${results.stdio[0]} passed ${results.stdio[1]} failed; ` +
    `http ${results.http[0]} passed ${results.http[1]} failed`);
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed === 0 && passed > 0 ? 0 : 1);
}

main().catch((err) => {
  console.log(`sdk_client: ${err && err.stack ? err.stack : err}`);
  console.log(`${passed} passed, ${failed + 1} failed`);
  process.exit(1);
});
