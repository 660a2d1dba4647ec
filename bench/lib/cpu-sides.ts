/**
 * Node CPU per operation of several sides (a raw side first, then idem trees), alternating
 * round by round in one process so that a loaded machine's drift hits all sides alike
 * (bench/replay-cpu.ts, bench/mysql-replay-cpu.ts). CPU time of the process
 * (`process.cpuUsage()`, user + system) divided by the operations of the round.
 */
import { FINGERPRINT, SCOPE } from './fixtures.js';
import { closedLoop } from './measure.js';

export interface CpuSide {
  name: string;
  op: (i: number) => Promise<unknown>;
  cpu: number[];
}

/** A tree's side: `engine.begin` of a finished key, which must replay. */
export function replaySide(
  name: string,
  engine: { begin(input: { scope: string; key: string; fingerprint: Uint8Array }): Promise<{ kind: string }> },
  key: (i: number) => string,
): CpuSide {
  return {
    name,
    op: async (i) => {
      const begun = await engine.begin({ scope: SCOPE, key: key(i), fingerprint: FINGERPRINT });
      if (begun.kind !== 'replay') throw new Error(`expected a replay, got ${begun.kind}`);
    },
    cpu: [],
  };
}

/** Warms each side up, then runs `rounds` alternating rounds of `ms` at `concurrency`. */
export async function alternateCpu(sides: CpuSide[], concurrency: number, ms: number, rounds: number): Promise<void> {
  for (const side of sides) await closedLoop(side.op, concurrency, 300); // warm-up
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 ? [...sides].reverse() : sides;
    for (const side of order) {
      const before = process.cpuUsage();
      const stats = await closedLoop(side.op, concurrency, ms);
      const used = process.cpuUsage(before);
      side.cpu.push((used.user + used.system) / stats.ops);
    }
  }
}

/** Median and range of each side, its ratio to the first (raw) and of each tree to the first tree. */
export function reportCpu(sides: CpuSide[]): void {
  const med = (v: number[]) => [...v].sort((a, b) => a - b)[v.length >> 1]!;
  const raw = sides[0]!;
  for (const side of sides) {
    const ratios = side.cpu.map((v, i) => v / raw.cpu[i]!);
    console.log(
      `${side.name.padEnd(28)} µs/op median ${med(side.cpu).toFixed(1)} (${Math.min(...side.cpu).toFixed(1)}–${Math.max(...side.cpu).toFixed(1)})` +
        `  / raw ${med(ratios).toFixed(2)} (${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)})`,
    );
  }
  // Each tree after the first against the first, round by round (e.g. this tree against main's).
  for (const side of sides.slice(2)) {
    const ratios = side.cpu.map((v, i) => v / sides[1]!.cpu[i]!);
    console.log(`${side.name} / ${sides[1]!.name}: ${med(ratios).toFixed(2)} (${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)})`);
  }
}
