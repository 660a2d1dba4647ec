/**
 * `idem/mcp`: MCP tools whose side effect runs once per key, for servers built with
 * `@modelcontextprotocol/sdk` (protocol.md K49). Register a tool through idem
 * ({@link idempotentTool}) or wrap its handler ({@link idempotentToolHandler}); a retried
 * `tools/call` replays the stored result. See docs/guides/mcp.md.
 */
export { idempotentTool, idempotentToolHandler, type IdempotentToolHandler, type IdempotentToolOptions, type ToolCallback } from './tool.js';
export { KEY_META, type ToolKeyOptions } from './key.js';
export { CODE_META, REPLAYED_META, RESULT_UNENCODABLE, RETRY_AFTER_META } from './results.js';
export type { CallToolResult, ToolAnnotations, ToolArgs, ToolAuthInfo, ToolConfig, ToolContent, ToolExtra, ToolServer } from './types.js';
export { FunctionContext } from '../function/context.js';
