/** Types of worker-checks.mjs, for test/durable-object-store.test.ts. */
export declare function workerBuild(entry: string): Record<string, unknown> & { entryPoints: string[] };
export declare function checkWorker(mf: { dispatchFetch(url: string, init?: RequestInit): Promise<Response> }, path: string, effects: string): Promise<void>;
