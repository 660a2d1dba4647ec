/**
 * Network partitions for tests (issue 44, item 2): a network namespace joined to the test's
 * own namespace by a veth pair, servers started inside it on its own address, and nftables
 * rules inside the namespace that drop the link's packets, one way or both, while every TCP
 * connection stays open (packets vanish; no socket is closed, no RST is sent). The rules live in
 * the namespace, so deleting the namespace removes them and both ends of the veth pair.
 *
 * {@link partitionSkip} says why a suite cannot run (not root, no `ip netns`, no `nft`, no
 * PostgreSQL binaries); a suite skips on it and never falls back to other addresses.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, appendFileSync, chownSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const run = (cmd: string, args: string[]): string => execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

function which(cmd: string): boolean {
  try {
    run('sh', ['-c', `command -v ${cmd}`]);
    return true;
  } catch {
    return false;
  }
}

/** The directory of PostgreSQL's server binaries (the newest under /usr/lib/postgresql), if any. */
export function postgresBin(): string | undefined {
  const base = '/usr/lib/postgresql';
  if (!existsSync(base)) return undefined;
  const versions = readdirSync(base)
    .filter((v) => existsSync(join(base, v, 'bin', 'postgres')))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] && join(base, versions[0], 'bin');
}

/** False when partitions can be made here; else one line saying what is missing. Probes `ip netns add` for real. */
export function partitionSkip(needs: { postgres?: boolean; redis?: boolean } = {}): string | false {
  if (process.platform !== 'linux') return 'network partitions need Linux network namespaces';
  if (process.getuid?.() !== 0) return 'network partitions need root (ip netns, nft)';
  if (!which('ip')) return 'network partitions need iproute2 (ip netns)';
  if (!which('nft')) return 'network partitions need nftables: apt-get install -y nftables';
  if (needs.postgres && !postgresBin()) return 'needs PostgreSQL server binaries under /usr/lib/postgresql/*/bin';
  if (needs.redis && !which('redis-server')) return 'needs redis-server';
  const probe = `idem-probe-${process.pid}`;
  try {
    run('ip', ['netns', 'add', probe]);
    run('ip', ['netns', 'del', probe]);
  } catch (error) {
    return `ip netns add does not work here (${(error as Error).message.split('\n')[0]})`;
  }
  return false;
}

/** Which packets a partition drops: toward the namespace, out of it, or both. */
export type Direction = 'both' | 'to-ns' | 'from-ns';

/** A namespace on one veth link: `hostAddress` in the test's namespace, `address` inside. */
export interface Netns {
  readonly name: string;
  readonly address: string;
  readonly hostAddress: string;
  /** Runs `cmd` inside the namespace (a long-running server: kill the child, or delete the namespace). */
  spawn(cmd: string, args: string[], options?: { user?: string }): ChildProcess;
  /**
   * Drops the link's packets in `direction` until {@link heal}: connections stay open. With
   * `clientPorts`, only the packets of the connections from those host-side ports (one app
   * instance's pool), both ways: the other instances on the host keep their link.
   */
  partition(direction: Direction, clientPorts?: number[]): void;
  heal(): void;
  /** Removes the rules, the namespace and the veth pair (idempotent). */
  destroy(): void;
}

let subnets = 0;

/** Names of everything this process made, removed on exit if a test forgot. */
const made = new Set<string>();
process.on('exit', () => {
  for (const name of made) removeNetns(name);
});

function removeNetns(name: string): void {
  try {
    run('ip', ['netns', 'del', name]);
  } catch {}
  try {
    run('ip', ['link', 'del', `${name}-h`]);
  } catch {}
  made.delete(name);
}

/** Removes namespaces left by an earlier run of this file that died before its cleanup. */
export function removeStale(prefix: string): void {
  for (const line of run('ip', ['netns', 'list']).split('\n')) {
    const name = line.split(' ')[0];
    if (name?.startsWith(prefix)) removeNetns(name);
  }
}

/**
 * A fresh namespace `prefix`-n with a veth pair on 10.250.<k>.0/30. Interface names are at most
 * 15 characters: keep `prefix` short.
 */
export function createNetns(prefix: string): Netns {
  const k = (process.pid % 200) + subnets++;
  const name = `${prefix}${subnets}`;
  const hostAddress = `10.250.${k}.1`;
  const address = `10.250.${k}.2`;
  removeNetns(name);
  made.add(name);
  const host = `${name}-h`;
  const inner = `${name}-n`;
  run('ip', ['netns', 'add', name]);
  run('ip', ['link', 'add', host, 'type', 'veth', 'peer', 'name', inner]);
  run('ip', ['link', 'set', inner, 'netns', name]);
  run('ip', ['addr', 'add', `${hostAddress}/30`, 'dev', host]);
  run('ip', ['link', 'set', host, 'up']);
  run('ip', ['netns', 'exec', name, 'ip', 'addr', 'add', `${address}/30`, 'dev', inner]);
  run('ip', ['netns', 'exec', name, 'ip', 'link', 'set', inner, 'up']);
  run('ip', ['netns', 'exec', name, 'ip', 'link', 'set', 'lo', 'up']);
  const nft = (script: string) => execFileSync('ip', ['netns', 'exec', name, 'nft', '-f', '-'], { input: script, stdio: ['pipe', 'pipe', 'pipe'] });
  let partitioned = false;
  return {
    name,
    address,
    hostAddress,
    spawn(cmd, args, options = {}) {
      const argv = options.user ? ['setpriv', `--reuid=${options.user}`, `--regid=${options.user}`, '--init-groups', cmd, ...args] : [cmd, ...args];
      return spawn('ip', ['netns', 'exec', name, ...argv], { stdio: ['ignore', 'pipe', 'pipe'] });
    },
    partition(direction, clientPorts) {
      const ports = clientPorts ? `{ ${clientPorts.join(', ')} }` : undefined;
      const inMatch = ports ? `tcp sport ${ports} ` : '';
      const outMatch = ports ? `tcp dport ${ports} ` : '';
      const rules: string[] = [];
      if (direction !== 'from-ns') rules.push(`chain in { type filter hook input priority 0; policy accept; iifname "${inner}" ${inMatch}drop; }`);
      if (direction !== 'to-ns') rules.push(`chain out { type filter hook output priority 0; policy accept; oifname "${inner}" ${outMatch}drop; }`);
      if (partitioned) this.heal();
      nft(`table inet idem_partition {\n${rules.join('\n')}\n}\n`);
      partitioned = true;
    },
    heal() {
      if (!partitioned) return;
      nft('delete table inet idem_partition\n');
      partitioned = false;
    },
    destroy() {
      removeNetns(name);
    },
  };
}

/** A PostgreSQL server of its own inside `ns`, on its address, with a temporary data directory (trust auth, no fsync). */
export interface NsPostgres {
  readonly url: string;
  stop(): Promise<void>;
}

export function startPostgres(ns: Netns, port = 5432): NsPostgres {
  const bin = postgresBin()!;
  const dir = mkdtempSync(join(tmpdir(), 'idem-partition-pg-'));
  const pwent = run('id', ['-u', 'postgres']).trim();
  const gid = Number(run('id', ['-g', 'postgres']).trim());
  chownSync(dir, Number(pwent), gid);
  const data = join(dir, 'data');
  run('setpriv', ['--reuid=postgres', '--regid=postgres', '--init-groups', join(bin, 'initdb'), '-D', data, '--auth=trust', '-U', 'postgres', '--no-sync']);
  appendFileSync(data + '/pg_hba.conf', `host all all ${ns.hostAddress}/32 trust\n`);
  const server = ns.spawn(
    join(bin, 'postgres'),
    ['-D', data, '-c', `listen_addresses=${ns.address}`, '-p', String(port), '-k', dir, '-c', 'fsync=off', '-c', 'max_connections=60'],
    { user: 'postgres' },
  );
  let output = '';
  server.stdout!.on('data', (d: Buffer) => (output += d));
  server.stderr!.on('data', (d: Buffer) => (output += d));
  return {
    url: `postgres://postgres@${ns.address}:${port}/postgres`,
    async stop() {
      if (server.exitCode === null && server.signalCode === null) {
        const gone = new Promise((resolve) => server.once('exit', resolve));
        server.kill('SIGQUIT'); // immediate shutdown: the data directory is thrown away
        await gone;
      }
      rmSync(dir, { recursive: true, force: true });
      void output;
    },
  };
}
