/**
 * scripts/snippets.ts: a `<!-- include: examples/… -->` line fills the fenced block after it
 * with the file or one region (dedented, marker lines stripped); unknown files and regions are
 * errors; and the README and the guides are up to date with the examples (what CI checks).
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { fill, markdownFiles, SnippetError } from '../scripts/snippets.js';

const root = mkdtempSync(path.join(tmpdir(), 'idem-snippets-'));
after(() => rmSync(root, { recursive: true, force: true }));
mkdirSync(path.join(root, 'examples/x'), { recursive: true });
writeFileSync(
  path.join(root, 'examples/x/app.ts'),
  [
    '// #region setup',
    "import { a } from 'a';",
    '// #endregion setup',
    'export function f() {',
    '  // #region body',
    '  const x = a();',
    '  // #region inner',
    '  if (x) {',
    '    return x;',
    '  }',
    '  // #endregion inner',
    '  // #endregion body',
    '}',
    '',
  ].join('\n'),
);

const doc = (spec: string, body = 'stale', fence = '```ts', indent = '') =>
  [`${indent}<!-- include: ${spec} -->`, `${indent}${fence}`, `${indent}${body}`, `${indent}${fence.replace(/\w+$/, '')}`, 'after'].join('\n');

describe('scripts/snippets.ts', () => {
  it('fills a block with a region, dedented and without the inner markers, and reports it changed', () => {
    const { text, changed } = fill(doc('examples/x/app.ts#body'), 'README.md', root);
    assert.equal(text, ['<!-- include: examples/x/app.ts#body -->', '```ts', 'const x = a();', 'if (x) {', '  return x;', '}', '```', 'after'].join('\n'));
    assert.deepEqual(changed, ['README.md:1 examples/x/app.ts#body']);
    assert.deepEqual(fill(text, 'README.md', root).changed, [], 'filled once, it is up to date');
  });

  it('fills with the whole file without any marker line; keeps the fence and the indentation of a list item', () => {
    const { text } = fill(doc('examples/x/app.ts', 'old', '````ts', '   '), 'g.md', root);
    const lines = text.split('\n');
    assert.equal(lines[1], '   ````ts');
    assert.equal(lines[2], "   import { a } from 'a';");
    assert.ok(!text.includes('#region') && !text.includes('#endregion'));
    assert.equal(lines.at(-2), '   ````');
    assert.equal(lines.at(-1), 'after');
  });

  it('an unknown file or region, or a marker without a fence after it, is an error naming the line', () => {
    assert.throws(
      () => fill(doc('examples/x/nope.ts'), 'README.md', root),
      (e) => e instanceof SnippetError && /README\.md:1: .*no such file/.test(e.message),
    );
    assert.throws(
      () => fill(doc('examples/x/app.ts#missing'), 'docs/g.md', root),
      (e) => e instanceof SnippetError && /docs\/g\.md:1: .*no region "missing".*regions: setup, body, inner/.test(e.message),
    );
    assert.throws(
      () => fill('<!-- include: examples/x/app.ts -->\ntext', 'a.md', root),
      (e) => e instanceof SnippetError && /not followed by a fenced code block/.test(e.message),
    );
    assert.throws(
      () => fill(doc('../package.json'), 'a.md', root),
      (e) => e instanceof SnippetError && /only files under examples/.test(e.message),
    );
  });

  it('the README and docs/**/*.md are up to date with the examples (npm run docs:snippets:check)', () => {
    const files = markdownFiles();
    assert.ok(files.some((f) => f.endsWith('README.md')));
    for (const file of files) {
      const { changed } = fill(readFileSync(file, 'utf8'), path.relative(process.cwd(), file));
      assert.deepEqual(changed, [], `${file} differs from its examples: npm run docs:snippets`);
    }
  });
});
