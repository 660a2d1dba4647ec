/**
 * The model check of the key protocol (issue 19): runs `npm run model`'s checker
 * (scripts/model.sh), which verifies docs/model/idem.pml with spin (every property on the real
 * model in every fault configuration, a counterexample for every mutant). Skipped, with that
 * reason, where spin or gcc is not on PATH (`.ci/run` installs spin).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { fullMatrixOnly } from './helpers/services.js';

const script = fileURLToPath(new URL('../scripts/model.sh', import.meta.url));
const onPath = (tool: string) => spawnSync('sh', ['-c', `command -v ${tool}`]).status === 0;
const missing = ['spin', 'gcc'].filter((tool) => !onPath(tool));
const SKIP = missing.length > 0 ? `${missing.join(' and ')} not on PATH: the model check needs spin (apt-get install spin) and gcc` : false;

// Minutes of CPU: the full matrix only (npm run test:all), and `npm run model`.
describe('model check (spin)', { skip: fullMatrixOnly() || SKIP }, () => {
  it('verifies every property of docs/model/idem.pml and finds a counterexample for every mutant', { timeout: 900_000 }, async () => {
    const child = spawn('bash', [script], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    assert.equal(code, 0, `scripts/model.sh failed:\n${output}`);
    assert.match(output, /every property holds on the real model; every mutant has a counterexample/);
    // Every run reached a verdict: the real model's runs with 0 errors, each mutant with a trail.
    assert.equal((output.match(/ ok$/gm) ?? []).length, 12, output);
    assert.equal((output.match(/ok \(counterexample\)$/gm) ?? []).length, 12, output);
  });
});
