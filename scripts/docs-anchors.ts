/**
 * Every `#anchor` of every internal link of the built docs site names an element of its target
 * page (`npm run docs:links`, after `vitepress build docs`). VitePress fails the build on a link
 * to a missing page and linkinator (`--check-fragments`) checks pages, assets and same-page
 * anchors, but linkinator validates a link's anchor only when the link is seen before its target
 * page is crawled: a link into a page crawled earlier goes unchecked. This pass checks them all.
 *
 * Usage: `tsx scripts/docs-anchors.ts [dist]` (default docs/.vitepress/dist); exit 1 on a dead anchor.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const dist = resolve(process.argv[2] ?? 'docs/.vitepress/dist');

function htmlFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'assets' ? [] : htmlFiles(path);
    return entry.name.endsWith('.html') ? [path] : [];
  });
}

const decode = (text: string) =>
  text
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&amp;/g, '&');

const pages = new Map<string, { ids: Set<string>; hrefs: string[] }>();
for (const file of htmlFiles(dist)) {
  const html = readFileSync(file, 'utf8');
  const ids = new Set([...html.matchAll(/\s(?:id|name)="([^"]*)"/g)].map((m) => decodeURIComponent(decode(m[1]!))));
  const hrefs = [...html.matchAll(/<a\s[^>]*?href="([^"]*)"/g)].map((m) => decode(m[1]!));
  pages.set(file, { ids, hrefs });
}

const dead: string[] = [];
let checked = 0;
for (const [file, { hrefs }] of pages) {
  for (const href of hrefs) {
    if (/^[a-z][a-z0-9+.-]*:/i.test(href) || href.startsWith('//')) continue; // external, mailto:
    const hash = href.indexOf('#');
    if (hash < 0) continue;
    const path = href.slice(0, hash).split('?')[0]!;
    const fragment = decodeURIComponent(href.slice(hash + 1));
    if (fragment === '') continue;
    let target = path === '' ? file : path.startsWith('/') ? join(dist, path) : resolve(dirname(file), path);
    if (target.endsWith('/')) target = join(target, 'index.html');
    else if (!target.endsWith('.html')) target = `${target}.html`;
    checked++;
    const page = pages.get(target);
    if (!page) dead.push(`${relative(dist, file)}: ${href} (no page ${relative(dist, target)})`);
    else if (!page.ids.has(fragment)) dead.push(`${relative(dist, file)}: ${href} (no #${fragment} on ${relative(dist, target)})`);
  }
}

if (dead.length > 0) {
  console.error(`docs-anchors: ${dead.length} dead anchor(s) of ${checked} checked:\n  ${dead.join('\n  ')}`);
  process.exit(1);
}
console.log(`docs-anchors: ${checked} anchors on ${pages.size} pages, every one found`);
