/**
 * The docs site (VitePress): every Markdown file under docs/, a sidebar that lists every guide in
 * docs/guides/ by itself (a new guide needs no entry here), local search, and a dead-link check
 * at build time. `npm run docs:build` builds it into docs/.vitepress/dist and then checks every
 * internal link and anchor of the built pages (scripts/docs-links.ts). Why VitePress, and how it
 * would be hosted: docs/site.md.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { basename, join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { slug } from 'github-slugger';
import { type DefaultTheme, defineConfig } from 'vitepress';

const DOCS = fileURLToPath(new URL('..', import.meta.url));
const REPO = 'https://github.com/idem-js/idem';

/** The first `# ` heading of a Markdown file, else its name. */
function titleOf(file: string): string {
  const heading = /^# (.+)$/m.exec(readFileSync(file, 'utf8'));
  return heading?.[1]?.replace(/`/g, '').trim() ?? basename(file, '.md');
}

/**
 * Groups of the guides sidebar, in reading order. A guide named here lands in its group once its
 * file exists; a guide in docs/guides/ that no group names lands in "More guides", so every
 * docs/guides/*.md is in the sidebar without an edit of this file.
 */
const GROUPS: Array<[string, string[]]> = [
  ['Start', ['quickstart', 'install', 'runtimes', 'behaviour', 'options', 'wait-mode']],
  ['Frameworks', ['hono', 'express', 'fastify', 'koa', 'nestjs', 'next', 'lambda', 'fetch', 'adapters']],
  ['Stores', ['postgres', 'pglite', 'redis', 'valkey-glide', 'dynamodb', 'memory', 'mysql', 'sqlite', 'citus', 'durable-objects', 'd1']],
  ['Database clients', ['drizzle', 'kysely', 'prisma', 'postgresjs']],
  ['Queues and beyond HTTP', ['consumers', 'rabbitmq', 'nats', 'sqs', 'lambda-batches', 'webhooks', 'functions', 'mcp', 'ai-sdk']],
  ['Client', ['client', 'browser-forms']],
  ['Operations', ['operations', 'operators', 'completer', 'large-responses', 'payments-example', 'openapi']],
];

function guidesSidebar(): DefaultTheme.SidebarItem[] {
  const dir = join(DOCS, 'guides');
  const names = readdirSync(dir)
    .filter((f) => f.endsWith('.md'))
    .map((f) => f.slice(0, -3));
  const item = (name: string) => ({ text: titleOf(join(dir, `${name}.md`)), link: `/guides/${name}` });
  const placed = new Set(GROUPS.flatMap(([, members]) => members));
  const groups: DefaultTheme.SidebarItem[] = GROUPS.map(([text, members]) => ({
    text,
    collapsed: false,
    items: members.filter((name) => names.includes(name)).map(item),
  })).filter((group) => group.items.length > 0);
  const rest = names.filter((name) => !placed.has(name)).sort();
  if (rest.length > 0) groups.push({ text: 'More guides', collapsed: false, items: rest.map(item) });
  return groups;
}

const reference: DefaultTheme.SidebarItem[] = [
  {
    text: 'Reference',
    items: ['protocol', 'architecture', 'response-shapes', 'observability', 'dashboard', 'citus', 'connection-faults', 'connection-faults-redis', 'testing', 'site'].map(
      (name) => ({ text: titleOf(join(DOCS, `${name}.md`)), link: `/${name}` }),
    ),
  },
  {
    text: 'Measured',
    items: [
      { text: titleOf(join(DOCS, 'benchmarks.md')), link: '/benchmarks' },
      { text: titleOf(join(DOCS, 'reliability.md')), link: '/reliability' },
      { text: titleOf(join(DOCS, 'model/README.md')), link: '/model/README' },
    ],
  },
];

export default defineConfig({
  title: 'idem',
  description: 'Idempotency keys for Node.js: a retried request never runs twice.',
  // GitHub Pages serves a project site under /<repo>/ (.github/workflows/docs.yml sets DOCS_BASE).
  base: process.env.DOCS_BASE ?? '/',
  cleanUrls: false,
  lastUpdated: false,
  // A link to a page that does not exist fails the build; anchors are checked after it.
  ignoreDeadLinks: false,
  srcExclude: ['**/node_modules/**'],
  markdown: {
    theme: { light: 'github-light', dark: 'github-dark' },
    // GitHub's heading anchors, so a link such as docs/reliability.md#redis-failover works the
    // same on GitHub, on the registry page and on this site.
    anchor: { slugify: slug },
    // A relative link out of docs/ (../../src/x.ts, ../../examples/y/), which works on GitHub,
    // points at the file on GitHub here: the site only has the pages.
    config(md) {
      md.core.ruler.push('repo-links', (state) => {
        const page = posix.join('docs', String(state.env?.relativePath ?? ''));
        for (const token of state.tokens.flatMap((t) => [t, ...(t.children ?? [])])) {
          const href = token.type === 'link_open' ? token.attrGet('href') : null;
          if (!href || /^([a-z][a-z0-9+.-]*:|#|\/)/i.test(href)) continue;
          const [path = '', hash = ''] = href.split(/(?=#)/);
          const target = posix.normalize(posix.join(posix.dirname(page), path));
          if (!target.startsWith('docs/') && !target.startsWith('..')) token.attrSet('href', `${REPO}/blob/main/${target}${hash}`);
        }
      });
    },
  },
  themeConfig: {
    nav: [
      { text: 'Guides', link: '/guides/quickstart' },
      { text: 'Protocol', link: '/protocol' },
      { text: 'Benchmarks', link: '/benchmarks' },
      { text: 'Reliability', link: '/reliability' },
    ],
    sidebar: [...guidesSidebar(), ...reference],
    search: { provider: 'local' },
    outline: { level: [2, 3] },
    socialLinks: [{ icon: 'github', link: REPO }],
    editLink: { pattern: `${REPO}/edit/main/docs/:path` },
  },
});
