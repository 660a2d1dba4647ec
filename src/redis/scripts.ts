/**
 * Every Lua script idem's Redis store runs, named and commented. Nothing else in the code base
 * writes to a key's hash: every state change of an idempotency key is ONE of these scripts,
 * run atomically on the node that owns the key's slot (called by SHA with `EVALSHA`, sent in
 * full with `EVAL` on `NOSCRIPT`).
 *
 * Keys of one idempotency key (see `keys.ts`), all with the hash tag `{scope:key}` so that on
 * Redis Cluster every script touches one slot:
 * - the record hash `<prefix>:{scope:key}`;
 * - its token counter `<prefix>:{scope:key}:token`, a plain integer that outlives the hash.
 * On a single Redis the scripts also keep the in-flight index (a sorted set, see `store.ts`);
 * on Cluster that index lives in another slot and the store writes it with its own command,
 * so `KEYS[3]` is absent there.
 *
 * Hash fields: `fp` fingerprint (hex), `st` state (`started` | `done`), `rp` recovery point,
 * `p:<phase>` each committed phase's result (JSON text), `tok` fencing token, `cid` claim id,
 * `lu` lease end (server epoch ms; a release sets it to the server's now; `0` = finished, no lease), `ca` creation (server epoch ms),
 * `rt` retention ms, `rs` / `rh` / `rb` response status, headers (JSON), body (base64),
 * `rq` request snapshot (JSON), `na` failed attempts counted by takeovers
 * and thrown attempts (protocol.md K23; absent = 0), `rl` `1` while the key is released (absent: held or crashed),
 * `op` the last operator action's note (protocol.md K40).
 *
 * Time: every lease and retention comparison uses the Redis server's clock (`TIME` inside the
 * script), one clock for all app hosts. Scripts are replicated by their effects (Redis ≥ 5),
 * so reading `TIME` before writing is allowed and replicas apply the same values.
 *
 * Wait mode (protocol.md K17): `changed(h)` sends `SPUBLISH <hash key> 1` from the takeover,
 * finish, release, discard and adopt scripts, after their write, so the waiters of the key
 * (src/redis/subscriber.ts) hear of exactly the changes that happened. The channel is the hash's
 * own name, a shard channel in its slot (on Cluster it stays on the key's shard). `pcall`: on a
 * Redis without sharded pub/sub (before 7) the write stands and waiters end at their deadline.
 * Sent whether or not anyone waits (protocol.md K30): checking first (`PUBSUB SHARDNUMSUB`)
 * costs the server more than the `SPUBLISH` it would save.
 *
 * Fencing (protocol.md K8): every write after the claim first checks `tok == ARGV[1]` and
 * `st == started`; a mismatch changes nothing and returns `false` (nil), which the store
 * reports as `{ kind: 'fenced' }` or `{ kind: 'lost' }`.
 */

/**
 * Helpers put in front of the scripts that call them (each script is sent on its own, so each
 * carries its own; see `script`).
 *
 * `next_token`: the fencing token only ever grows, also across the hash's expiry (retention)
 * and a discard: the counter key outlives the hash by a whole retention period, and a new
 * counter starts at the server time in µs (`TIME`), above every token handed out before it
 * expired (tokens stay below 2^53 until the year 2255). A worker that froze before a
 * retention reset therefore never holds a token equal to the new claim's.
 *
 * `set_expiry`: retention by `PEXPIREAT` at creation + retention (protocol.md K6), pushed out
 * only while a lease is valid past it (the engine keeps retention longer than any lease, so
 * that is a safety net, never the rule). Replays never call it: they do not extend retention.
 */
const HELPERS: Array<[name: string, uses: string[], text: string]> = [
  [
    'now_ms',
    [],
    `local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end`,
  ],
  [
    'now_us',
    [],
    `local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end`,
  ],
  ['num', [], `local function num(n) return string.format('%.0f', n) end`],
  [
    'next_token',
    ['num', 'now_us'],
    `local function next_token(counter)
  local last = tonumber(redis.call('GET', counter) or '0')
  local token = math.max(last + 1, now_us())
  redis.call('SET', counter, num(token))
  return num(token)
end`,
  ],
  [
    'set_expiry',
    ['num'],
    `local function set_expiry(h, counter, ca, rt, lu)
  local at = math.max(ca + rt, lu)
  redis.call('PEXPIREAT', h, num(at))
  redis.call('PEXPIREAT', counter, num(at + rt))
end`,
  ],
  [
    'fields',
    [],
    `local function fields(h, with_body, with_request)
  local all = redis.call('HGETALL', h)
  local out = {}
  for i = 1, #all, 2 do
    local f = all[i]
    if (f ~= 'rb' or with_body) and (f ~= 'rq' or with_request) then
      out[#out + 1] = f
      out[#out + 1] = all[i + 1]
    end
  end
  return out
end`,
  ],
  [
    'changed',
    [],
    `local function changed(h)
  redis.pcall('SPUBLISH', h, '1')
end`,
  ],
  [
    'fenced',
    [],
    `local function fenced(h, token)
  local cur = redis.call('HMGET', h, 'tok', 'st')
  return cur[1] == token and cur[2] == 'started'
end`,
  ],
];

/**
 * A script with the helpers it calls (and theirs) in front: Redis runs the whole text on every
 * call, so a helper a script never calls would still cost a closure per call.
 */
function script(body: string): string {
  const wanted = new Set<string>();
  const want = (name: string) => {
    if (wanted.has(name)) return;
    wanted.add(name);
    for (const dep of HELPERS.find(([n]) => n === name)![1]) want(dep);
  };
  for (const [name] of HELPERS) if (new RegExp(`\\b${name}\\(`).test(body)) want(name);
  const helpers = HELPERS.filter(([name]) => wanted.has(name)).map(([, , text]) => text);
  return `${helpers.join('\n')}\n${body}`;
}

/**
 * Claim (protocol.md K3, Q1 + Q2 in one script): inserts the key as `started` with a lease, or
 * returns the existing record. A record past retention whose lease is over counts as absent
 * and is replaced with a new token and claim id (protocol.md K6); one whose lease is still
 * valid is reported as it is (its worker is alive).
 *
 * The decision order of the core (mismatch → replay → in progress → take over) starts here:
 * the fingerprint is compared first, and the stored body travels back only for a finished key
 * whose fingerprint matches (a replay); a mismatch or an in-progress key costs no body. The
 * takeover itself is {@link TAKE_OVER}, a compare-and-set on the token read here.
 *
 * KEYS[1] hash, KEYS[2] token counter, KEYS[3] in-flight index (single Redis only).
 * ARGV[1] fingerprint hex, ARGV[2] lease ms, ARGV[3] retention ms, ARGV[4] new claim id,
 * ARGV[5] index member, ARGV[6] the hash's time to live in ms (the larger of retention and
 * lease: it goes at creation + retention, or at the lease's end if that is later), ARGV[7] the
 * counter's (ARGV[6] + retention: it outlives the hash by a whole retention period).
 * Returns the new token (a bulk string: the claim id is ARGV[4], known to the caller) or
 * `{'exists', now, field, value, ...}`. A new key costs the server one `TIME` (the token's µs
 * and the clock's ms, both cut from its reply as text), no `DEL`, one `SET ... PX` for the
 * counter and two `string.format`s (the lease end, the hash's expiry): every `redis.call`, every
 * number formatted (a `sprintf`, about 0.5 µs) and every table handed back to Redis is a
 * measurable share of a script's cost (bench/redis-store.ts). The hash expires at exactly
 * creation + ARGV[6] by `TIME`'s clock (`PEXPIREAT`, protocol.md K6); the counter's expiry only
 * needs to come a retention later, so it is relative (`PX`), as text from the client.
 */
export const CLAIM = script(`
local h, counter = KEYS[1], KEYS[2]
local t = redis.call('TIME')
local us = t[2]
us = string.rep('0', 6 - #us) .. us
local now_text = t[1] .. string.sub(us, 1, 3)
local now = tonumber(now_text)
local cur = redis.call('HMGET', h, 'ca', 'lu', 'fp', 'st', 'rt')
if cur[1] then
  local retention_over = tonumber(cur[1]) <= now - tonumber(ARGV[3])
  local lease_over = tonumber(cur[2]) <= now
  if not (retention_over and lease_over) then
    return {'exists', now_text, fields(h, cur[3] == ARGV[1] and cur[4] == 'done', false)}
  end
  redis.call('DEL', h)
end
local token = t[1] .. us
local last = redis.call('GET', counter)
if last and tonumber(last) >= tonumber(token) then token = num(tonumber(last) + 1) end
redis.call('HSET', h, 'fp', ARGV[1], 'st', 'started', 'rp', 'start', 'tok', token, 'cid', ARGV[4],
  'lu', num(now + tonumber(ARGV[2])), 'ca', now_text, 'rt', ARGV[3])
redis.call('PEXPIREAT', h, num(now + tonumber(ARGV[6])))
redis.call('SET', counter, token, 'PX', ARGV[7])
if KEYS[3] then redis.call('ZADD', KEYS[3], now_text, ARGV[5]) end
return token
`);

/**
 * Takeover (protocol.md Q3): only if the token is still the one read, the key still
 * `started`, and its lease over (or released). Draws a new, higher token and a new lease;
 * keeps the claim id, recovery point and phase results (returned, so the new worker resumes).
 * A lease that ran out unreleased (`rl` absent: the worker crashed, hung or was killed) counts
 * as a failed attempt in `na`, in the same script, so `maxAttempts` ends a crash loop
 * (protocol.md K23); a released key is not counted again. The new holder is not released.
 *
 * KEYS[1] hash, KEYS[2] token counter. ARGV[1] token read, ARGV[2] lease ms.
 * Returns `{token, field, value, ...}` (with `na`) or nil (lost).
 */
export const TAKE_OVER = script(`
local h, counter = KEYS[1], KEYS[2]
local now = now_ms()
local cur = redis.call('HMGET', h, 'tok', 'st', 'lu', 'ca', 'rt', 'rl')
if cur[1] ~= ARGV[1] or cur[2] ~= 'started' or tonumber(cur[3]) > now then return false end
local token = next_token(counter)
local lu = now + tonumber(ARGV[2])
if cur[6] == '1' then redis.call('HDEL', h, 'rl') else redis.call('HINCRBY', h, 'na', 1) end
redis.call('HSET', h, 'tok', token, 'lu', num(lu))
set_expiry(h, counter, tonumber(cur[4]), tonumber(cur[5]), lu)
changed(h)
return {token, fields(h, false, false)}
`);

/**
 * Phase commit (protocol.md Q4), fenced: the recovery point and the phase's result, with the
 * lease renewed. On Redis this runs AFTER the phase's local effects, never with them: there
 * is no transaction spanning both (see `NoTransaction` in store.ts).
 *
 * KEYS[1] hash, KEYS[2] token counter. ARGV[1] token, ARGV[2] phase, ARGV[3] result JSON,
 * ARGV[4] lease ms. Returns 1, or nil (fenced).
 */
export const RECORD_PHASE = script(`
local h, counter = KEYS[1], KEYS[2]
if not fenced(h, ARGV[1]) then return false end
local now = now_ms()
local lu = now + tonumber(ARGV[4])
redis.call('HSET', h, 'rp', ARGV[2], 'p:' .. ARGV[2], ARGV[3], 'lu', num(lu))
local cur = redis.call('HMGET', h, 'ca', 'rt')
set_expiry(h, counter, tonumber(cur[1]), tonumber(cur[2]), lu)
return 1
`);

/**
 * Finish (protocol.md Q5, K5), fenced: state `done`, the response stored, the lease cleared,
 * the key dropped from the in-flight index. Retention is not extended (the expiry set at the
 * claim stays). No `TIME`: nothing reads a finish time, and every `redis.call` is a measurable
 * share of a script's cost (bench/redis-store.ts).
 *
 * KEYS[1] hash, KEYS[3] in-flight index (single Redis only). ARGV[1] token, ARGV[2] status,
 * ARGV[3] headers JSON, ARGV[4] body base64, ARGV[5] index member. Returns 1, or nil (fenced).
 */
export const FINISH = script(`
local h = KEYS[1]
if not fenced(h, ARGV[1]) then return false end
redis.call('HSET', h, 'st', 'done', 'rp', 'finished', 'rs', ARGV[2], 'rh', ARGV[3], 'rb', ARGV[4], 'lu', '0')
if KEYS[3] then redis.call('ZREM', KEYS[3], ARGV[5]) end
changed(h)
return 1
`);

/**
 * Heartbeat (protocol.md K7), fenced: the lease ends `ARGV[2]` ms from the server's now.
 * KEYS[1] hash, KEYS[2] token counter. ARGV[1] token, ARGV[2] lease ms. Returns 1 or nil.
 */
export const EXTEND_LEASE = script(`
local h, counter = KEYS[1], KEYS[2]
if not fenced(h, ARGV[1]) then return false end
local lu = now_ms() + tonumber(ARGV[2])
redis.call('HSET', h, 'lu', num(lu))
local cur = redis.call('HMGET', h, 'ca', 'rt')
set_expiry(h, counter, tonumber(cur[1]), tonumber(cur[2]), lu)
return 1
`);

/**
 * A thrown attempt counted (protocol.md K23, `maxAttempts`), fenced, the lease kept: `na` + 1.
 * KEYS[1] hash. ARGV[1] token. Returns the attempts failed so far, or nil (fenced).
 */
export const COUNT_FAILURE = script(`
local h = KEYS[1]
if not fenced(h, ARGV[1]) then return false end
return redis.call('HINCRBY', h, 'na', 1)
`);

/**
 * Release or discard (protocol.md K9), fenced. Release: the lease ends now (`lu` = the server's
 * now, not 0), the recovery point stays, so the next retry takes over at once and resumes
 * ({@link TAKE_OVER} needs `lu <= now`, and does not count a released key as a crash, K23); the completer's `listAbandoned` waits its `graceMs`
 * after that end, so the retry of the client that saw the throw comes first. Discard (ARGV[2]
 * = '1'): a key on which no phase committed is deleted (its token counter stays, so tokens
 * keep growing) and dropped from the index; a key with a committed phase is released instead.
 *
 * KEYS[1] hash, KEYS[3] in-flight index (single Redis only). ARGV[1] token, ARGV[2] discard
 * flag, ARGV[3] index member. Returns 'deleted', 'released', or nil (fenced).
 */
export const RELEASE = script(`
local h = KEYS[1]
if not fenced(h, ARGV[1]) then return false end
if ARGV[2] == '1' and redis.call('HGET', h, 'rp') == 'start' then
  redis.call('DEL', h)
  if KEYS[3] then redis.call('ZREM', KEYS[3], ARGV[3]) end
  changed(h)
  return 'deleted'
end
redis.call('HSET', h, 'lu', num(now_ms()), 'rl', '1')
changed(h)
return 'released'
`);

/**
 * Completer: the request snapshot of a key this worker holds, fenced (protocol.md K11).
 * KEYS[1] hash. ARGV[1] token, ARGV[2] snapshot JSON. Returns 1 or nil.
 */
export const SAVE_REQUEST = script(`
local h = KEYS[1]
if not fenced(h, ARGV[1]) then return false end
redis.call('HSET', h, 'rq', ARGV[2])
return 1
`);

/**
 * Read one key with the server's now (get, the completer's listing). No write.
 * KEYS[1] hash. ARGV[1] '1' to include the request snapshot.
 * Returns `{now, field, value, ...}`, or nil when absent.
 */
export const READ = script(`
local h = KEYS[1]
if redis.call('EXISTS', h) == 0 then return false end
return {num(now_ms()), fields(h, true, ARGV[1] == '1')}
`);

/**
 * Adopt (protocol.md K22), fenced: the key was claimed afresh, but the phase ledger holds the
 * progress of an earlier claim Redis forgot (a failover). The hash takes that claim's
 * fingerprint (ARGV[2], kept when empty), claim id, recovery point and phase results, and its
 * lease ends now, marked released (`rl`: idem ended it, no crash, so the takeover that follows
 * counts no failed attempt, K23): the engine then takes it over and resumes (or the finish is
 * copied next).
 *
 * KEYS[1] hash. ARGV[1] token, ARGV[2] fingerprint hex, ARGV[3] claim id, ARGV[4] recovery
 * point, then (phase, result JSON) pairs. Returns 1, or nil (fenced).
 */
export const ADOPT = script(`
local h = KEYS[1]
if not fenced(h, ARGV[1]) then return false end
if ARGV[2] ~= '' then redis.call('HSET', h, 'fp', ARGV[2]) end
redis.call('HSET', h, 'cid', ARGV[3], 'rp', ARGV[4], 'lu', num(now_ms()), 'rl', '1')
for i = 5, #ARGV - 1, 2 do redis.call('HSET', h, 'p:' .. ARGV[i], ARGV[i + 1]) end
changed(h)
return 1
`);

/**
 * An operator's release or forget (protocol.md K40-K42), fenced by the token read. Release: a
 * `started` key (with a valid lease only when forced) ends its lease now and is marked released
 * (K23); forget: a `done` key is rewritten as a released claim at `start`, nothing stored, a new
 * claim id, its fingerprint, creation and retention kept (and back in the in-flight index).
 * Both draw a new token and record the note (`op`).
 *
 * KEYS[1] hash, KEYS[2] token counter, KEYS[3] in-flight index (single Redis only). ARGV[1]
 * token read, ARGV[2] `release` | `forget`, ARGV[3] force `1`/`0`, ARGV[4] note, ARGV[5] index
 * member, ARGV[6] new claim id. Returns the new token, or nil (fenced).
 */
export const OPERATE = script(`
local h, counter = KEYS[1], KEYS[2]
local now = now_ms()
local cur = redis.call('HMGET', h, 'tok', 'st', 'lu', 'fp', 'ca', 'rt')
if cur[1] ~= ARGV[1] then return false end
if ARGV[2] == 'release' then
  if cur[2] ~= 'started' or (ARGV[3] ~= '1' and tonumber(cur[3]) > now) then return false end
else
  if cur[2] ~= 'done' then return false end
  redis.call('DEL', h)
  redis.call('HSET', h, 'fp', cur[4], 'st', 'started', 'rp', 'start', 'cid', ARGV[6], 'ca', cur[5], 'rt', cur[6])
  set_expiry(h, counter, tonumber(cur[5]), tonumber(cur[6]), now)
  if KEYS[3] then redis.call('ZADD', KEYS[3], num(now), ARGV[5]) end
end
local token = next_token(counter)
redis.call('HSET', h, 'tok', token, 'lu', num(now), 'rl', '1', 'op', ARGV[4])
return token
`);

/** The scripts by name, as the store loads them. */
export const SCRIPTS = {
  claim: CLAIM,
  takeOver: TAKE_OVER,
  recordPhase: RECORD_PHASE,
  finish: FINISH,
  extendLease: EXTEND_LEASE,
  countFailure: COUNT_FAILURE,
  release: RELEASE,
  saveRequest: SAVE_REQUEST,
  read: READ,
  adopt: ADOPT,
  operate: OPERATE,
} as const;

/** Name of a script in {@link SCRIPTS}. */
export type ScriptName = keyof typeof SCRIPTS;
