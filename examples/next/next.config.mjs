// The idem example on Next.js (App Router). Built and started by test/next.test.ts.
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** @type {import('next').NextConfig} */
const config = {
  // PGlite loads its WebAssembly and data files next to its module, and pg has native
  // fallbacks: both must stay plain Node packages, not bundled.
  serverExternalPackages: ['@electric-sql/pglite', 'pg'],
  // The app imports idem by name (`idem/next`, `idem/postgres`) as users do; tsconfig.json's
  // `paths` map those to the repository's src/ (outside this folder), written as NodeNext ESM:
  // `./x.js` means `./x.ts`. Built with webpack (`next build --webpack`).
  outputFileTracingRoot: root,
  webpack(webpackConfig) {
    webpackConfig.resolve.extensionAlias = { '.js': ['.ts', '.js'] };
    return webpackConfig;
  },
  // The repository's `npm run typecheck` checks these files; skip Next's second pass.
  typescript: { ignoreBuildErrors: true },
};

export default config;
