#!/usr/bin/env node
/** The `idem` executable (package.json `bin`): runs the CLI and exits with its code. */
import { run } from './program.js';

// Output piped into a reader that went away (`idem stats | head -1`) is not an error.
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code === 'EPIPE') process.exit(process.exitCode ?? 0);
    throw error;
  });
}

process.exitCode = await run(process.argv);
