/**
 * The history recorder and checker the chaos harnesses share (issue 44, item 1). A harness
 * records every client operation (invoke, then ok, a definite failure, or unknown) and the
 * effect ledgers it can count (business rows, PSP log, outbox), then checks the history as a
 * whole, as Jepsen does, rather than counting its own invariants one by one:
 *
 *   - `at-most-one-effect`: at most one effect per key, per ledger;
 *   - `identical-ok`: every ok answer for a key is byte-identical to every other ok answer for
 *     it, and to the stored response when the harness read it;
 *   - `ok-has-effect`: every key that got an ok has exactly one effect in every ledger
 *     (nothing acknowledged and lost);
 *   - `own-body`: an answer carries its own key's body (the id it embeds is the intent's, and no
 *     other key's ok answer has the same bytes);
 *   - `mismatch-no-replay`: a request that reuses a key with another body gets 422 and never
 *     a stored body (protocol.md K3, H11);
 *   - `liveness`: every operation reaches a final answer within the bound the run states.
 *
 * `npm exec tsx bench/chaos/history.ts -- --check <file.jsonl>` re-runs the checker on a history a
 * failed run saved.
 */
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Attempted } from './retry-client.js';

/** How an operation ended. */
export type Outcome =
  /** A final success (2xx, or a consumer's ack): `hash` of the exact response bytes. */
  | { type: 'ok'; status?: number; hash?: string; bodyId?: string }
  /** A final answer that is not a success (4xx, the K23 500, a dead-letter). */
  | { type: 'fail'; status?: number; hash?: string; bodyId?: string; reason?: string }
  /** No final answer (the horizon ran out). */
  | { type: 'unknown'; reason?: string };

/** One client operation: all the attempts of one send of one key. */
export interface Op {
  kind: 'op';
  key: string;
  /** The scope / principal the key lives in. */
  scope: string;
  /** Hash of the request (body bytes) sent. */
  requestHash: string;
  /** ms since the epoch. */
  invokeMs: number;
  /** ms since the epoch; absent when unknown. */
  completeMs?: number;
  outcome: Outcome;
  attempts: number;
  /** The id the answer must embed (the intent's); checked against `outcome.bodyId`. */
  expectId?: string;
  /** This request reused the key with a different body on purpose: it must get a 422. */
  mismatch?: boolean;
}

/** One ledger's effects for one key (rows counted at the end of the run). */
export interface Effect {
  kind: 'effect';
  ledger: string;
  key: string;
  count: number;
}

/** The response stored for a key (idem's finished row), as the harness read it. */
export interface Stored {
  kind: 'stored';
  key: string;
  hash: string;
}

/** What the run states: its name, the ledgers it counts, its liveness bound. */
export interface Meta {
  kind: 'meta';
  harness: string;
  ledgers: string[];
  livenessBoundMs: number;
}

export type Entry = Meta | Op | Effect | Stored;

export const INVARIANTS = ['at-most-one-effect', 'identical-ok', 'ok-has-effect', 'own-body', 'mismatch-no-replay', 'liveness'] as const;
export type Invariant = (typeof INVARIANTS)[number];

export interface Verdict {
  ok: boolean;
  ops: number;
  keys: number;
  /** Violations per invariant (0 for those that held). */
  counts: Record<Invariant, number>;
  /** A few examples per violated invariant, one line each, prefixed by the invariant's name. */
  violations: string[];
  /** Time from invoke to the final answer over the ops that got one, ms. */
  p50Ms: number;
  p99Ms: number;
}

/** Hex SHA-256 of bytes (request and response hashes). */
export function hashBytes(bytes: Uint8Array | string): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** Collects a run's history. */
export class History {
  readonly entries: Entry[] = [];
  constructor(meta: Omit<Meta, 'kind'>) {
    this.entries.push({ kind: 'meta', ...meta });
  }
  op(op: Omit<Op, 'kind'>): void {
    this.entries.push({ kind: 'op', ...op });
  }
  effect(ledger: string, key: string, count: number): void {
    this.entries.push({ kind: 'effect', ledger, key, count });
  }
  /** The response stored for `key` (its exact bytes). */
  stored(key: string, body: Uint8Array): void {
    this.entries.push({ kind: 'stored', key, hash: hashBytes(body) });
  }
  check(): Verdict {
    return check(this.entries);
  }
  /** Writes the history as JSONL; returns the path. */
  save(path = join(tmpdir(), `idem-history-${(this.entries[0] as Meta).harness}-${Date.now()}-${process.pid}.jsonl`)): string {
    writeFileSync(path, this.entries.map((e) => JSON.stringify(e)).join('\n') + '\n');
    return path;
  }
  /** Checks; prints the summary; on a failure saves the history and prints its path. */
  finish(log: (line: string) => void = console.log): Verdict {
    const verdict = this.check();
    for (const line of summaryLines(verdict)) log(line);
    if (!verdict.ok) log(`history: saved to ${this.save()} (replay: npx tsx bench/chaos/history.ts --check <file>)`);
    return verdict;
  }
}

/** The `customer` (the intent's id) a JSON answer embeds, if any. */
function embeddedId(body: Uint8Array): string | undefined {
  let parsed: { customer?: unknown } | null;
  try {
    parsed = JSON.parse(new TextDecoder().decode(body)) as { customer?: unknown } | null;
  } catch {
    return undefined; // not JSON: embeds no id
  }
  return typeof parsed?.customer === 'string' ? parsed.customer : undefined;
}

/**
 * Runs one HTTP send (all its attempts, bench/chaos/retry-client.ts) and records it: a 2xx
 * final answer is ok, any other final answer a definite failure, no final answer unknown.
 */
export async function recordSend(
  history: History,
  op: { key: string; scope: string; expectId: string; body: Uint8Array; mismatch?: boolean },
  send: () => Promise<Attempted>,
): Promise<Attempted> {
  const invokeMs = Date.now();
  const a = await send();
  const f = a.final;
  history.op({
    key: op.key,
    scope: op.scope,
    requestHash: hashBytes(op.body),
    invokeMs,
    attempts: a.attempts,
    expectId: op.expectId,
    ...(op.mismatch ? { mismatch: true } : {}),
    ...(f
      ? {
          completeMs: invokeMs + a.elapsedMs,
          outcome: { type: f.status >= 200 && f.status < 300 ? 'ok' : 'fail', status: f.status, hash: hashBytes(f.body), bodyId: embeddedId(f.body) },
        }
      : { outcome: { type: 'unknown', reason: a.history.slice(-3).join(' ') } }),
  });
  return a;
}

/** Records each ledger's effect count for `key`. */
export function recordEffects(history: History, key: string, counts: Record<string, number>): void {
  for (const [ledger, n] of Object.entries(counts)) history.effect(ledger, key, n);
}

/** Reads a JSONL history. */
export function loadHistory(path: string): Entry[] {
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Entry);
}

const EXAMPLES = 3;

/** The checker: every invariant over the whole history. */
export function check(entries: Entry[]): Verdict {
  const meta = entries.find((e): e is Meta => e.kind === 'meta');
  if (!meta) throw new Error('history: no meta entry (the run must state its ledgers and liveness bound)');
  const counts = Object.fromEntries(INVARIANTS.map((i) => [i, 0])) as Record<Invariant, number>;
  const examples = new Map<Invariant, string[]>();
  const violate = (inv: Invariant, line: string) => {
    counts[inv]++;
    const list = examples.get(inv) ?? [];
    if (list.length < EXAMPLES) list.push(line);
    examples.set(inv, list);
  };
  const ops = entries.filter((e): e is Op => e.kind === 'op');
  const byKey = new Map<string, Op[]>();
  for (const op of ops) byKey.set(op.key, [...(byKey.get(op.key) ?? []), op]);
  const effects = new Map<string, number>(); // `${ledger}\0${key}` → count
  for (const e of entries) if (e.kind === 'effect') effects.set(`${e.ledger}\0${e.key}`, (effects.get(`${e.ledger}\0${e.key}`) ?? 0) + e.count);
  const stored = new Map<string, string>();
  for (const e of entries) if (e.kind === 'stored') stored.set(e.key, e.hash);

  // at-most-one-effect
  for (const [k, n] of effects) {
    if (n > 1) {
      const [ledger, key] = k.split('\0');
      violate('at-most-one-effect', `${key}: ${n} effects in ${ledger}`);
    }
  }

  // Which key each ok body belongs to: the same bytes under two keys is a body crossing over.
  const okOwner = new Map<string, string>();
  for (const op of ops) if (op.outcome.type === 'ok' && op.outcome.hash && !op.mismatch && !okOwner.has(op.outcome.hash)) okOwner.set(op.outcome.hash, op.key);

  const elapsed: number[] = [];
  for (const [key, list] of byKey) {
    const oks = list.filter((op) => !op.mismatch && op.outcome.type === 'ok');
    // identical-ok
    const hashes = new Set(oks.map((op) => (op.outcome as { hash?: string }).hash).filter((h): h is string => h !== undefined));
    const storedHash = stored.get(key);
    if (hashes.size > 1) violate('identical-ok', `${key}: ${hashes.size} different ok answers`);
    else if (storedHash !== undefined && hashes.size === 1 && !hashes.has(storedHash))
      violate('identical-ok', `${key}: the ok answer differs from the stored response`);
    // ok-has-effect (exactly one: more than one is at-most-one-effect's)
    if (oks.length > 0) {
      for (const ledger of meta.ledgers) {
        const n = effects.get(`${ledger}\0${key}`) ?? 0;
        if (n === 0) violate('ok-has-effect', `${key}: acknowledged with ${n} effects in ${ledger}`);
      }
    }
    for (const op of list) {
      const o = op.outcome;
      // own-body
      if (o.type !== 'unknown') {
        if (op.expectId !== undefined && o.bodyId !== undefined && o.bodyId !== op.expectId)
          violate('own-body', `${key}: the answer embeds ${o.bodyId}, not ${op.expectId}`);
        const owner = o.hash !== undefined ? okOwner.get(o.hash) : undefined;
        if (owner !== undefined && owner !== key) violate('own-body', `${key}: the answer is ${owner}'s body`);
      }
      // mismatch-no-replay
      if (op.mismatch && o.type !== 'unknown') {
        const replays = o.hash !== undefined && (hashes.has(o.hash) || o.hash === storedHash);
        if (o.status !== 422 || replays)
          violate('mismatch-no-replay', `${key}: a mismatched request got ${o.status ?? o.type}${replays ? ' with the stored body' : ''}`);
      }
      // liveness
      if (o.type === 'unknown' || op.completeMs === undefined)
        violate('liveness', `${key}: no final answer after ${op.attempts} attempts${'reason' in o && o.reason ? ` (${o.reason})` : ''}`);
      else {
        const ms = op.completeMs - op.invokeMs;
        elapsed.push(ms);
        if (ms > meta.livenessBoundMs) violate('liveness', `${key}: final answer after ${ms} ms, bound ${meta.livenessBoundMs} ms`);
      }
    }
  }
  elapsed.sort((a, b) => a - b);
  const pct = (p: number) => (elapsed.length === 0 ? 0 : elapsed[Math.min(elapsed.length - 1, Math.floor(p * elapsed.length))]!);
  const violations = INVARIANTS.flatMap((inv) => (examples.get(inv) ?? []).map((line) => `${inv}: ${line}`));
  return { ok: violations.length === 0, ops: ops.length, keys: byKey.size, counts, violations, p50Ms: pct(0.5), p99Ms: pct(0.99) };
}

/** The verdict as printable lines. */
export function summaryLines(v: Verdict): string[] {
  return [
    `history: ${v.ops} operations on ${v.keys} keys; time to final answer p50 ${v.p50Ms} ms, p99 ${v.p99Ms} ms; ${v.ok ? 'every invariant held' : 'INVARIANTS VIOLATED'}`,
    `history: ${INVARIANTS.map((inv) => `${inv} ${v.counts[inv]}`).join(', ')} (violations)`,
    ...v.violations.map((line) => `history: VIOLATED ${line}`),
  ];
}

/** Violation lines for a harness's own list: one per violated invariant, with its count and examples. */
export function verdictViolations(v: Verdict): string[] {
  return INVARIANTS.filter((inv) => v.counts[inv] > 0).map(
    (inv) =>
      `history checker: ${inv} violated ${v.counts[inv]} times: ${v.violations
        .filter((l) => l.startsWith(`${inv}: `))
        .map((l) => l.slice(inv.length + 2))
        .join('; ')}`,
  );
}

// `tsx bench/chaos/history.ts --check <file.jsonl>`: the checker on a saved history.
if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const i = process.argv.indexOf('--check');
  const file = i >= 0 ? process.argv[i + 1] : undefined;
  if (!file) {
    console.error('Usage: npx tsx bench/chaos/history.ts --check <history.jsonl>');
    process.exit(2);
  }
  const verdict = check(loadHistory(file));
  for (const line of summaryLines(verdict)) console.log(line);
  process.exit(verdict.ok ? 0 : 1);
}
