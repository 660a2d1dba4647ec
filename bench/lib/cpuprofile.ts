/**
 * Reading a V8 `.cpuprofile` (what `node --cpu-prof` writes): self time per function and per
 * layer (idem's own code, the framework, the driver, Node's internals), and the folded stacks
 * a flame graph renderer takes (`flamegraph.pl`, speedscope, inferno).
 */

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

/** The parts of a `.cpuprofile` used here. */
export interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** Self time of one function, in ms and as a share of the busy (non-idle) time. */
export interface SelfTime {
  name: string;
  where: string;
  ms: number;
  share: number;
}

/** The layer a source URL belongs to, for the breakdown by layer. */
export function layer(url: string, functionName: string): string {
  if (url === '') {
    if (functionName === '(garbage collector)') return 'V8: garbage collector';
    if (functionName === '(program)') return 'V8/native (program)';
    return `V8: ${functionName || 'native'}`;
  }
  const src = /\/src\/([a-z-]+)\//.exec(url);
  if (src && !url.includes('node_modules')) return `idem src/${src[1]}`;
  if (url.includes('/bench/')) return 'bench harness';
  const mod = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url);
  if (mod) return `npm ${mod[1]}`;
  if (url.startsWith('node:')) {
    const m = /^node:internal\/([a-z_]+)/.exec(url);
    return `node: ${m ? m[1] : url.slice(5)}`;
  }
  return url;
}

function short(url: string): string {
  return url.replace(/^file:\/\/.*?\/(src|bench|node_modules)\//, '$1/');
}

/** Self time per function and per layer, idle time left out of the shares. */
export function summarize(profile: CpuProfile): { busyMs: number; byFunction: SelfTime[]; byLayer: SelfTime[] } {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  for (let i = 0; i < profile.samples.length; i++) {
    const id = profile.samples[i]!;
    self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
  }
  const fn = new Map<string, SelfTime>();
  const lay = new Map<string, SelfTime>();
  let busy = 0;
  for (const [id, us] of self) {
    const { functionName, url, lineNumber } = byId.get(id)!.callFrame;
    if (functionName === '(idle)') continue;
    busy += us;
    const name = functionName || '(anonymous)';
    const where = url ? `${short(url)}:${lineNumber + 1}` : '';
    const k = `${name}@${where}`;
    const f = fn.get(k) ?? { name, where, ms: 0, share: 0 };
    f.ms += us / 1000;
    fn.set(k, f);
    const l = layer(url, functionName);
    const e = lay.get(l) ?? { name: l, where: '', ms: 0, share: 0 };
    e.ms += us / 1000;
    lay.set(l, e);
  }
  const finish = (m: Map<string, SelfTime>) => [...m.values()].map((e) => ({ ...e, share: e.ms / (busy / 1000) })).sort((a, b) => b.ms - a.ms);
  return { busyMs: busy / 1000, byFunction: finish(fn), byLayer: finish(lay) };
}

/** Inclusive time of every function whose name matches, as a share of busy time (a function is counted once per sample even when recursive). */
export function inclusive(profile: CpuProfile, match: (name: string, url: string) => boolean): number {
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  let hit = 0;
  let busy = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    let id: number | undefined = profile.samples[i]!;
    if (byId.get(id)!.callFrame.functionName === '(idle)') continue;
    const dt = profile.timeDeltas[i] ?? 0;
    busy += dt;
    for (; id !== undefined; id = parent.get(id)) {
      const { functionName, url } = byId.get(id)!.callFrame;
      if (match(functionName, url)) {
        hit += dt;
        break;
      }
    }
  }
  return busy > 0 ? hit / busy : 0;
}

/** Folded stacks (`a;b;c <µs>` per line), the input of flame graph renderers. */
export function folded(profile: CpuProfile): string {
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const weight = new Map<number, number>();
  for (let i = 0; i < profile.samples.length; i++) weight.set(profile.samples[i]!, (weight.get(profile.samples[i]!) ?? 0) + (profile.timeDeltas[i] ?? 0));
  const lines: string[] = [];
  for (const [id, us] of weight) {
    const frames: string[] = [];
    for (let n: number | undefined = id; n !== undefined; n = parent.get(n)) {
      const { functionName, url, lineNumber } = byId.get(n)!.callFrame;
      if (functionName === '(root)') continue;
      frames.push(`${functionName || '(anonymous)'}${url ? ` ${short(url)}:${lineNumber + 1}` : ''}`.replaceAll(';', ','));
    }
    if (frames[0]?.startsWith('(idle)')) continue;
    lines.push(`${frames.reverse().join(';')} ${Math.round(us)}`);
  }
  return `${lines.join('\n')}\n`;
}
