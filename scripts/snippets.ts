/**
 * Code blocks of the README and the guides, filled from complete files under examples/ so the
 * text and the code cannot drift. In README.md and docs/**\/*.md, a line
 *
 *   <!-- include: examples/<dir>/<file>.ts -->          the whole file
 *   <!-- include: examples/<dir>/<file>.ts#<region> --> the part between `// #region <region>`
 *                                                       and `// #endregion <region>`, dedented
 *
 * right before a fenced code block makes that block's content the file or the region, with the
 * `#region` / `#endregion` marker lines stripped (the fence line itself, e.g. ```ts, is kept).
 *
 * Usage: tsx scripts/snippets.ts          rewrite the blocks (npm run docs:snippets)
 *        tsx scripts/snippets.ts --check  fail, listing each block that differs (npm run docs:snippets:check, CI)
 * An unknown file or region, a marker not followed by a fence, or an unclosed region is an error.
 */
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const INCLUDE = /^(\s*)<!--\s*include:\s*(\S+?)\s*-->\s*$/;
const FENCE = /^(\s*)(`{3,}|~{3,})/;
const MARKER = /^\s*\/\/\s*#(region|endregion)\b\s*(\S*)/;

/** README.md and every .md under docs/ (not in dot-directories, node_modules or build output). */
export function markdownFiles(root = ROOT): string[] {
  const found: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (entry.name.startsWith('.') || entry.name === 'node_modules' || entry.name === 'dist') continue;
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (entry.name.endsWith('.md')) found.push(full);
    }
  };
  if (existsSync(path.join(root, 'docs'))) walk(path.join(root, 'docs'));
  return [path.join(root, 'README.md'), ...found.sort()].filter((file) => existsSync(file));
}

export class SnippetError extends Error {}

/** Strips the common leading whitespace of the non-blank lines, and blank lines at both ends. */
function dedent(lines: string[]): string[] {
  const body = [...lines];
  while (body.length && !body[0]!.trim()) body.shift();
  while (body.length && !body.at(-1)!.trim()) body.pop();
  const indents = body.filter((l) => l.trim()).map((l) => l.length - l.trimStart().length);
  const cut = indents.length ? Math.min(...indents) : 0;
  return body.map((l) => (l.trim() ? l.slice(cut) : ''));
}

/**
 * The lines a marker includes: the whole file, or one region, without marker lines.
 * @throws SnippetError for an unknown file or region, an unclosed or repeated region
 */
export function snippet(spec: string, root = ROOT): string[] {
  const [file = '', region] = spec.split('#');
  const full = path.resolve(root, file);
  if (!full.startsWith(path.join(root, 'examples') + path.sep)) throw new SnippetError(`${spec}: only files under examples/ can be included`);
  if (!existsSync(full) || !statSync(full).isFile()) throw new SnippetError(`${spec}: no such file ${file}`);
  const lines = readFileSync(full, 'utf8').replace(/\r\n/g, '\n').split('\n');
  const open = new Map<string, number>();
  const seen = new Set<string>();
  let start = -1;
  let end = -1;
  lines.forEach((line, i) => {
    const m = MARKER.exec(line);
    if (!m) return;
    const [, kind, name = ''] = m;
    if (kind === 'region') {
      if (open.has(name) || seen.has(name)) throw new SnippetError(`${file}:${i + 1}: region "${name}" opened twice`);
      open.set(name, i);
      seen.add(name);
      if (name === region) start = i;
    } else {
      if (!open.has(name)) throw new SnippetError(`${file}:${i + 1}: #endregion ${name} without its #region`);
      open.delete(name);
      if (name === region) end = i;
    }
  });
  if (open.size) throw new SnippetError(`${file}: region "${[...open.keys()][0]}" is never closed`);
  const kept = (from: number, to: number) => lines.slice(from, to).filter((l) => !MARKER.test(l));
  if (region === undefined) return dedent(kept(0, lines.length));
  if (start < 0) throw new SnippetError(`${spec}: no region "${region}" in ${file} (regions: ${[...seen].join(', ') || 'none'})`);
  return dedent(kept(start + 1, end));
}

/**
 * The Markdown text with every included block filled.
 * @returns the new text and the includes whose blocks changed, as `file:line spec`
 */
export function fill(text: string, where: string, root = ROOT): { text: string; changed: string[] } {
  const lines = text.split('\n');
  const out: string[] = [];
  const changed: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    out.push(line);
    const include = INCLUDE.exec(line);
    if (!include) continue;
    const spec = include[2]!;
    const fence = FENCE.exec(lines[i + 1] ?? '');
    if (!fence) throw new SnippetError(`${where}:${i + 1}: "${spec}" is not followed by a fenced code block`);
    const [fenceLine, indent = '', marks = '```'] = [lines[i + 1]!, fence[1], fence[2]];
    const closing = new RegExp(`^\\s*\\${marks[0]}{${marks.length},}\\s*$`);
    const close = lines.findIndex((l, j) => j > i + 1 && closing.test(l));
    if (close < 0) throw new SnippetError(`${where}:${i + 2}: the code block after "${spec}" is never closed`);
    let body: string[];
    try {
      body = snippet(spec, root).map((l) => (l ? indent + l : l));
    } catch (error) {
      if (error instanceof SnippetError) throw new SnippetError(`${where}:${i + 1}: ${error.message}`);
      throw error;
    }
    const old = lines.slice(i + 2, close);
    if (old.join('\n') !== body.join('\n')) changed.push(`${where}:${i + 1} ${spec}`);
    out.push(fenceLine, ...body, lines[close]!);
    i = close;
  }
  return { text: out.join('\n'), changed };
}

function main() {
  const check = process.argv.includes('--check');
  const drift: string[] = [];
  let blocks = 0;
  for (const file of markdownFiles()) {
    const where = path.relative(ROOT, file);
    const text = readFileSync(file, 'utf8');
    blocks += text.split('\n').filter((l) => INCLUDE.test(l)).length;
    const result = fill(text, where);
    if (!result.changed.length) continue;
    drift.push(...result.changed);
    if (!check) writeFileSync(file, result.text);
  }
  if (check && drift.length) {
    console.error(`snippets: ${drift.length} code block(s) differ from their example file (run npm run docs:snippets):`);
    for (const d of drift) console.error(`  ${d}`);
    process.exit(1);
  }
  console.log(`snippets: ${blocks} included block(s)${check ? ', all up to date' : `, ${drift.length} rewritten`}`);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    main();
  } catch (error) {
    if (!(error instanceof SnippetError)) throw error;
    console.error(`snippets: ${error.message}`);
    process.exit(1);
  }
}
