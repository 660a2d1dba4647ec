/**
 * The `idem dashboard` page: one self-contained HTML document (no external resource) that reads
 * `/api/overview` and `/api/inspect`. Its one script and one style are exported apart so the
 * server allows exactly them in its Content-Security-Policy (by hash); the markup has no inline
 * handler and no `style` attribute. The script is in `dashboard-script.ts`.
 */
import { DASHBOARD_SCRIPT } from './dashboard-script.js';

export { DASHBOARD_SCRIPT };

/** The page's only stylesheet (allowed by its SHA-256 in the CSP). */
export const DASHBOARD_STYLE = `
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{background:#1d2330;color:#fff;padding:12px 24px;display:flex;gap:16px;align-items:baseline;flex-wrap:wrap}
header h1{font-size:18px;margin:0} header span{opacity:.75}
main{padding:16px 24px;display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:16px}
section{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:12px 16px;min-width:0}
section.wide{grid-column:1/-1}
h2{font-size:15px;margin:0 0 8px} h2 small{font-weight:400;color:#5b6475}
.cards{display:flex;flex-wrap:wrap;gap:8px}
.card{border:1px solid #dde1e7;border-radius:6px;padding:6px 10px;min-width:90px}
.card b{display:block;font-size:20px}
.warn b{color:#b3261e}
.scroll{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:13px}
td,th{border-bottom:1px solid #eef0f3;padding:3px 6px;text-align:left;white-space:nowrap}
td.long{max-width:160px;overflow:hidden;text-overflow:ellipsis} section.wide td.long{max-width:360px}
td.n{font-variant-numeric:tabular-nums}
td.bad{color:#b3261e;font-weight:600}
th{color:#5b6475;font-weight:600}
tr.click{cursor:pointer} tr.click:hover,tr.click:focus{background:#eef3fd;outline:none}
.empty{color:#5b6475;font-style:italic}
.note{color:#5b6475;margin:6px 0}
form{display:flex;gap:6px;flex-wrap:wrap} input{padding:4px 6px;min-width:160px}
code,pre{font:12px/1.5 ui-monospace,monospace}
pre{background:#f6f7f9;border:1px solid #eef0f3;padding:8px;margin:6px 0;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
.why{border-left:3px solid #e0a100;padding:4px 12px;margin:10px 0;background:#fffaf0}
.why h3{font-size:14px;margin:4px 0}
button.act{background:#b3261e;color:#fff;border:0;border-radius:4px;padding:5px 12px;cursor:pointer}
.legend span{display:inline-block;width:10px;height:10px;margin:0 4px 0 10px}
.legend .done{background:#2f6fde} .legend .started{background:#e0a100}
`;

/** The page: the stylesheet and script inlined, byte for byte as hashed. */
export const DASHBOARD_PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>idem dashboard</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>${DASHBOARD_STYLE}</style></head>
<body>
<header><h1>idem dashboard</h1><span id="table">…</span><span id="updated"></span><span id="auth"></span></header>
<main>
<section><h2>Keys</h2><div class="cards" id="cards"></div></section>
<section><h2>Keys created in the last 24 h, by hour and state</h2><div id="chart"></div>
<div class="legend"><span class="done"></span>done<span class="started"></span>started</div></section>
<section class="wide"><h2>Stuck: in progress, lease expired <small>(click a row for why and what to run)</small></h2><div id="stuck"></div></section>
<section class="wide"><h2>Failing: failed attempts or a stored 5xx <small>(newest first)</small></h2><div id="failing"></div></section>
<section><h2>Oldest keys</h2><div id="oldest"></div></section>
<section><h2>Past retention, not yet swept</h2><div id="past"></div></section>
<section><h2>Partitions</h2><div id="partitions"></div></section>
<section class="wide" id="inspector"><h2>Inspect a key</h2>
<p class="note" id="actions"></p>
<form id="inspect"><input name="scope" placeholder="scope" required><input name="key" placeholder="key" required><button>Inspect</button></form>
<div id="inspection"></div></section>
</main>
<script>${DASHBOARD_SCRIPT}</script></body></html>
`;
