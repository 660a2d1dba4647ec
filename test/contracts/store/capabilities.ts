/**
 * The store contract, part six: what a store declares (protocol.md "Store capabilities"). Every
 * store has the core, `countFailure` included; each capability it declares comes with its
 * methods, and the guards read the declaration.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { hasBatch, hasCompletion, hasMaintenance, hasNotify, hasOperator } from '../../../src/store/capabilities.js';
import type { ContractContext } from './shared.js';

const CORE = ['claim', 'takeOver', 'commit', 'extendLease', 'release', 'discard', 'countFailure', 'get'] as const;
const METHODS = {
  completion: ['saveRequest', 'listAbandoned'],
  notify: ['subscribe'],
  batch: ['commitBatch'],
  operator: ['operate'],
  maintenance: ['migrate', 'sweep'],
} as const;

export function capabilitiesSuite(ctx: ContractContext): void {
  describe('declared capabilities', () => {
    it('has the core, countFailure included, and every method of each capability it declares', () => {
      const store = ctx.store() as unknown as Record<string, unknown> & { capabilities?: Record<string, unknown> };
      for (const name of CORE) assert.equal(typeof store[name], 'function', `core method ${name}`);
      const declared = Object.keys(store.capabilities ?? {});
      for (const name of declared) assert.ok(name in METHODS, `unknown capability ${name}`);
      for (const [capability, methods] of Object.entries(METHODS)) {
        if (store.capabilities?.[capability] !== true) continue;
        for (const method of methods) assert.equal(typeof store[method], 'function', `${capability} declares ${method}`);
      }
      const s = ctx.store();
      assert.deepEqual(
        [hasCompletion(s), hasNotify(s), hasBatch(s), hasOperator(s), hasMaintenance(s)],
        ['completion', 'notify', 'batch', 'operator', 'maintenance'].map((c) => declared.includes(c)),
      );
      assert.ok(hasOperator(s), 'every idem store declares operator (protocol.md K40)');
      // DurableObjectStore cannot list its objects, so it has no completer (its factory says so).
      if (ctx.caps.completion !== false) assert.ok(hasCompletion(s), 'every idem store declares completion');
    });
  });
}
