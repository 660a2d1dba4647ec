/**
 * The slice of `@modelcontextprotocol/sdk` (>= 1.20) that idem/mcp uses, declared here so the
 * package names no SDK import: an `McpServer` is passed in, and these shapes are what its
 * `registerTool` hands a tool's callback and takes back.
 */

/** A content block of a tool result (text, image, audio, a resource): kept as the SDK sent it. */
export type ToolContent = { type: string } & Record<string, unknown>;

/** A `tools/call` result (the SDK's `CallToolResult`). */
export interface CallToolResult {
  content: ToolContent[];
  structuredContent?: Record<string, unknown>;
  isError?: boolean;
  _meta?: Record<string, unknown>;
  [extra: string]: unknown;
}

/** The SDK's `AuthInfo`, as a transport's auth middleware sets it: the client it authenticated. */
export interface ToolAuthInfo {
  token?: string;
  clientId?: string;
  scopes?: string[];
  extra?: Record<string, unknown>;
}

/** What the SDK passes a tool callback beside its arguments (`RequestHandlerExtra`). */
export interface ToolExtra {
  signal?: AbortSignal;
  authInfo?: ToolAuthInfo;
  sessionId?: string;
  /** The request's `params._meta`. */
  _meta?: Record<string, unknown>;
  requestId?: string | number;
}

/** A tool's annotations (the SDK's `ToolAnnotations`). */
export interface ToolAnnotations {
  title?: string;
  readOnlyHint?: boolean;
  destructiveHint?: boolean;
  idempotentHint?: boolean;
  openWorldHint?: boolean;
  [extra: string]: unknown;
}

/** The config `McpServer.registerTool` takes. `inputSchema` is a Zod shape or schema. */
export interface ToolConfig<S = unknown> {
  title?: string;
  description?: string;
  inputSchema?: S;
  outputSchema?: unknown;
  annotations?: ToolAnnotations;
  _meta?: Record<string, unknown>;
}

/** An `McpServer` (or anything with its `registerTool`). `R` is its `RegisteredTool`. */
export interface ToolServer<R = unknown> {
  // biome-ignore lint/suspicious/noExplicitAny: the SDK's generic callback type is checked by the SDK at the call
  registerTool(name: string, config: any, cb: any): R;
}

/** The output type of one Zod schema: Zod 3's and Zod 4 classic's `_output`, Zod 4 core's `_zod.output`. */
type OutputOf<T> = T extends { _zod: { output: infer O } } ? O : T extends { _output: infer O } ? O : unknown;

/**
 * The arguments a tool with this `inputSchema` receives, as the SDK parses them: a Zod raw
 * shape (`{ orderId: z.string() }`), a Zod object schema, or none (`{}`).
 */
export type ToolArgs<S> = [S] extends [undefined]
  ? Record<string, never>
  : S extends { _zod: unknown } | { _output: unknown }
    ? OutputOf<S>
    : { [K in keyof S]: OutputOf<S[K]> };
