/** The `idem` CLI as a child process (`node --import tsx src/cli/main.ts`), for the CLI's tests. */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const CLI = join(ROOT, 'src/cli/main.ts');

/** A finished run: exit code and output. */
export interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `idem ...args` with DATABASE_URL and IDEM_DATA_DIR taken only from `env`. */
export function idem(args: string[], env: Record<string, string> = {}): Promise<Result> {
  const base = { ...process.env };
  delete base.DATABASE_URL;
  delete base.IDEM_DATA_DIR;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CLI, ...args], { cwd: ROOT, env: { ...base, ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}
