/**
 * The Redis server's clock as an upper bound (src/redis/server-clock.ts), the replay fast
 * path's judge of retention: the bound counts the whole round trip of its `TIME` sample, so it
 * is never below what the server's clock can read.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { ServerClock } from '../src/redis/server-clock.js';

describe('ServerClock', () => {
  it('bounds the server clock from above by the sample plus the time since it was SENT (a slow reply widens the bound)', async () => {
    const clock = new ServerClock();
    assert.equal(clock.latestNowMs(), Number.POSITIVE_INFINITY, 'no sample: nothing is judged fresh');
    assert.equal(clock.stale(), true);
    let answer!: (reply: [string, string]) => void;
    const sent = performance.now();
    const sampled = clock.sample(() => new Promise((resolve) => (answer = resolve)));
    assert.equal(clock.stale(), false, 'one sample at a time');
    // The server read its clock at some moment of the round trip: at worst right after the send.
    // The reply comes 30 ms later (a busy loop: this process's clock moves, no timer needed).
    while (performance.now() - sent < 30);
    const serverMs = 1_700_000_000_000;
    answer([String(serverMs / 1000), '0']);
    await sampled;
    const bound = clock.latestNowMs();
    assert.ok(bound >= serverMs + (performance.now() - sent) - 1, `bound ${bound - serverMs} ms past the sample covers the 30 ms round trip`);
    assert.equal(clock.stale(), false, 'fresh for a second');
  });

  it("keeps the sample's µs: right after a reply of x.999999 s the bound is not below it (no rounding down to the ms)", async () => {
    const clock = new ServerClock();
    await clock.sample(async () => ['1700000000', '999999']);
    const bound = clock.latestNowMs();
    assert.ok(bound >= 1_700_000_000_999.999, `bound ${bound} is at least the server's reading`);
  });

  it('judges nothing fresh by a sample over two seconds old (the fast path was off meanwhile; the server clock may have stepped): the claim script decides', async (t) => {
    const clock = new ServerClock();
    await clock.sample(async () => ['1700000000', '0']);
    assert.ok(Number.isFinite(clock.latestNowMs()));
    const now = performance.now.bind(performance);
    t.mock.method(performance, 'now', () => now() + 2100);
    assert.equal(clock.latestNowMs(), Number.POSITIVE_INFINITY, 'an old sample bounds nothing');
    assert.equal(clock.stale(), true, 'and a new one is due');
  });

  it('keeps the last good sample when a sample fails', async () => {
    const clock = new ServerClock();
    await clock.sample(async () => ['1700000000', '500000']);
    const before = clock.latestNowMs();
    await clock.sample(async () => {
      throw new Error('connection lost');
    });
    assert.ok(clock.latestNowMs() >= before);
    assert.ok(clock.latestNowMs() < before + 60_000);
  });
});
