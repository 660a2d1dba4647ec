/**
 * The store's runner over a resolved client: every script and command idem sends, each under
 * `storeTimeoutMs`, with NOSCRIPT answered by the full script and TRYAGAIN retried.
 */
import { createHash } from 'node:crypto';
import { withDeadline } from '../store/deadline.js';
import type { NodeRedisCommandOptions, RedisDriver } from './client.js';
import { glideScript, glideSend } from './glide.js';
import { SCRIPTS, type ScriptName } from './scripts.js';
import { resetOf, SilentLink } from './silent-link.js';

/** The store's view of a client: run a script or a command on the node owning `key`. */
export interface RedisRunner {
  /** True on Redis Cluster (node-redis cluster or ioredis Cluster). */
  readonly cluster: boolean;
  /** Runs a named script by SHA (EVALSHA), sending it in full (EVAL) on NOSCRIPT; on GLIDE by its `Script` (protocol.md K55). */
  script(name: ScriptName, keys: string[], args: string[]): Promise<unknown>;
  /** Runs a command on the node owning `key` (for a keyless command such as WAIT: the node of the key it follows). */
  command(key: string, args: string[]): Promise<unknown>;
}

const SHAS = Object.fromEntries(Object.entries(SCRIPTS).map(([name, text]) => [name, createHash('sha1').update(text).digest('hex')])) as Record<
  ScriptName,
  string
>;

/** The SHA1 of each script, as `EVALSHA` names it. */
export function scriptSha(name: ScriptName): string {
  return SHAS[name];
}

function isNoScript(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('NOSCRIPT');
}

/**
 * Redis Cluster answers TRYAGAIN when a multi-key script runs on a slot being migrated and
 * only some of its keys have moved yet. Nothing ran; the store retries it a few times with a
 * short backoff (the migration of one slot's keys takes milliseconds).
 */
const TRY_AGAIN_ATTEMPTS = 20;

function isTryAgain(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('TRYAGAIN');
}

async function retryingTryAgain<T>(run: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await run();
    } catch (error) {
      if (!isTryAgain(error) || attempt >= TRY_AGAIN_ATTEMPTS) throw error;
      await new Promise((resolve) => setTimeout(resolve, Math.min(200, 5 * attempt)));
    }
  }
}

/**
 * Wraps a client in a {@link RedisRunner}. Every command it sends (each EVALSHA, EVAL and plain
 * command, each TRYAGAIN attempt) runs under `timeoutMs` (`storeTimeoutMs`, protocol.md H17):
 * past it the call rejects with a `StoreTimeoutError`, which the engine answers with 503 and
 * `Retry-After`. `0`: no deadline. A `WAIT` gets its own server-side timeout on top.
 *
 * The connection is left alone while it answers: it is the application's, shared by every
 * caller, and Redis answers in order on it, so a late reply still reaches the command it
 * belongs to (unlike a pool connection, nothing is held that another request needs). Once one
 * of idem's commands has waited `silentLinkMs` with no reply (a black hole that accepts bytes
 * and never answers), the client is made to reconnect (src/redis/silent-link.ts, protocol.md H25).
 *
 * The command itself stays queued in the client and may still run after the deadline. Safe for
 * every script (protocol.md K-rules): a late `claim` creates a key with a lease and a token no
 * one holds; it answers the client's retries with 409 until that lease ends (leaseMs), then the
 * next retry takes it over (K9) and runs the request, and the completer discards it if no
 * retry comes (no request snapshot: the handler never ran, K12). A late `takeOver` is the same
 * case with the recovery point kept. A late phase record or `finish` is fenced by the token
 * (K8): it lands only while this attempt's claim is current, and then records exactly what
 * ran; the retry resumes from it or replays it. A late `extendLease` only lengthens a lease
 * that the next retry then waits out; a late `release` or `discard` frees the key sooner.
 */
export function toRunner(driver: RedisDriver, options: { timeoutMs?: number; silentLinkMs?: number } = {}): RedisRunner {
  const timeoutMs = options.timeoutMs ?? 0;
  // With idem's own deadline on every command (below), node-redis (v5+) need not arm its own
  // per-command timeout as well: that one is an `AbortSignal.timeout()` per command, measured
  // at about 20 µs of CPU each on Node 20, more than the rest of a command's cost in idem.
  // Without idem's deadline (storeTimeoutMs 0) the client's own setting applies.
  const ownDeadline: NodeRedisCommandOptions | undefined = timeoutMs > 0 && Number.isFinite(timeoutMs) ? { timeout: 0 } : undefined;
  let send: (key: string, args: string[]) => Promise<unknown>;
  // GLIDE runs a script by its own Script object (EVALSHA, and the script loaded on NOSCRIPT by
  // GLIDE itself, protocol.md K55); the other drivers by EVALSHA and EVAL below.
  let invoke: ((name: ScriptName, keys: string[], args: string[]) => Promise<unknown>) | undefined;
  if (driver.kind === 'glide') {
    send = glideSend(driver);
    invoke = glideScript(driver.client);
  } else if (driver.kind === 'ioredis') {
    const io = driver.client;
    send = (_key, args) => io.call(args[0]!, ...args.slice(1));
    if (driver.cluster) {
      // ioredis Cluster routes a keyless command (WAIT) to any node: send it to the key's master.
      const raw = send;
      send = (key, args) => (args[0] === 'WAIT' ? waitOnIoCluster(io, key, args) : raw(key, args));
    }
  } else if (driver.cluster) {
    const nc = driver.client;
    send = (key, args) => nc.sendCommand(key, false, args, ownDeadline);
  } else {
    const nr = driver.client;
    send = (_key, args) => nr.sendCommand(args, ownDeadline);
  }
  if (timeoutMs > 0 && Number.isFinite(timeoutMs)) {
    const untimed = send;
    const silentLinkMs = options.silentLinkMs ?? 0;
    const reset = silentLinkMs > 0 ? resetOf(driver) : undefined;
    const link = reset ? new SilentLink(silentLinkMs, reset) : undefined;
    send = (key, args) => {
      // WAIT blocks on the server for up to its own timeout (args[2], ms) before it answers.
      const ms = args[0] === 'WAIT' ? timeoutMs + Number(args[2]) : timeoutMs;
      const reply = untimed(key, args);
      const message = `idem/redis: ${args[0]} took longer than storeTimeoutMs (${ms} ms)`;
      return link ? withDeadline(link.sent(reply), ms, message, () => link.missed()) : withDeadline(reply, ms, message);
    };
    if (invoke) {
      const untimedScript = invoke;
      invoke = (name, keys, args) =>
        withDeadline(untimedScript(name, keys, args), timeoutMs, `idem/redis: script ${name} took longer than storeTimeoutMs (${timeoutMs} ms)`);
    }
  }
  const glideInvoke = invoke;
  return {
    cluster: driver.cluster,
    script(name, keys, args) {
      if (glideInvoke) return retryingTryAgain(() => glideInvoke(name, keys, args));
      return retryingTryAgain(async () => {
        try {
          return await send(keys[0]!, ['EVALSHA', SHAS[name], String(keys.length), ...keys, ...args]);
        } catch (error) {
          if (!isNoScript(error)) throw error;
          // First call on this node (or after SCRIPT FLUSH, a restart, a failover): EVAL sends
          // the script in full and caches it there, so the next EVALSHA finds it.
          return send(keys[0]!, ['EVAL', SCRIPTS[name], String(keys.length), ...keys, ...args]);
        }
      });
    },
    command: send,
  };
}

/** ioredis Cluster: WAIT on the master of `key`'s slot (ioredis would pick any node). */
async function waitOnIoCluster(client: unknown, key: string, args: string[]): Promise<unknown> {
  const cl = client as {
    nodes(role: 'master'): Array<{ call(command: string, ...args: string[]): Promise<unknown>; options: { host?: string; port?: number } }>;
    call(command: string, ...args: string[]): Promise<unknown>;
  };
  const slot = Number(await cl.call('CLUSTER', 'KEYSLOT', key));
  const slots = (await cl.call('CLUSTER', 'SLOTS')) as Array<[number, number, [string, number, ...unknown[]]]>;
  const owner = slots.find(([from, to]) => slot >= from && slot <= to)?.[2];
  const node = cl.nodes('master').find((n) => owner && n.options.port === Number(owner[1]));
  if (!node) throw new Error(`idem/redis: no master found for slot ${slot}`);
  return node.call(args[0]!, ...args.slice(1));
}
