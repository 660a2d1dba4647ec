#!/usr/bin/env node
/** The `idem` executable (package.json `bin`): runs the CLI and exits with its code. */
import { run } from './program.js';

process.exitCode = await run(process.argv);
