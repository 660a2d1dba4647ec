/**
 * The `idem dashboard` page: one self-contained HTML document (no external resource) that reads
 * `/api/overview` and `/api/inspect`. Every value from the table (keys, scopes) is written as
 * text (`textContent`), never as HTML: keys come from clients.
 */
export const DASHBOARD_PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>idem dashboard</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{background:#1d2330;color:#fff;padding:12px 24px;display:flex;gap:16px;align-items:baseline}
header h1{font-size:18px;margin:0} header span{opacity:.75}
main{padding:16px 24px;display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:16px}
section{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:12px 16px}
h2{font-size:15px;margin:0 0 8px}
.cards{display:flex;flex-wrap:wrap;gap:8px}
.card{border:1px solid #dde1e7;border-radius:6px;padding:6px 10px;min-width:90px}
.card b{display:block;font-size:20px}
.warn b{color:#b3261e}
table{border-collapse:collapse;width:100%;font-size:13px}
td,th{border-bottom:1px solid #eef0f3;padding:3px 6px;text-align:left;white-space:nowrap;overflow:hidden;text-overflow:ellipsis;max-width:220px}
th{color:#5b6475;font-weight:600}
.empty{color:#5b6475;font-style:italic}
form{display:flex;gap:6px;flex-wrap:wrap} input{padding:4px 6px;min-width:160px}
pre{background:#f6f7f9;padding:8px;overflow:auto;max-height:320px}
.legend span{display:inline-block;width:10px;height:10px;margin:0 4px 0 10px}
</style></head>
<body>
<header><h1>idem dashboard</h1><span id="table">…</span><span id="updated"></span></header>
<main>
<section><h2>Keys</h2><div class="cards" id="cards"></div></section>
<section><h2>Keys created in the last 24 h, by hour and state</h2><div id="chart"></div>
<div class="legend"><span style="background:#2f6fde"></span>done<span style="background:#e0a100"></span>started</div></section>
<section><h2>Stuck: in progress, lease expired</h2><div id="stuck"></div></section>
<section><h2>Oldest keys</h2><div id="oldest"></div></section>
<section><h2>Past retention, not yet swept</h2><div id="past"></div></section>
<section><h2>Partitions</h2><div id="partitions"></div></section>
<section style="grid-column:1/-1"><h2>Inspect a key</h2>
<form id="inspect"><input name="scope" placeholder="scope" required><input name="key" placeholder="key" required><button>Inspect</button></form>
<div id="inspection"></div></section>
</main>
<script>
const token = new URLSearchParams(location.search).get('token');
const api = (path) => fetch(path, { headers: token ? { authorization: 'Bearer ' + token } : {} }).then(async (r) => ({ status: r.status, body: await r.json().catch(() => ({})) }));
const el = (tag, text, cls) => { const e = document.createElement(tag); if (text !== undefined) e.textContent = String(text); if (cls) e.className = cls; return e; };
const when = (d) => d ? new Date(d).toISOString().replace('T', ' ').slice(0, 19) + 'Z' : '-';
function table(target, rows, columns) {
  const box = document.getElementById(target); box.replaceChildren();
  if (!rows.length) { box.append(el('div', 'none', 'empty')); return; }
  const t = el('table'); const head = el('tr');
  for (const [name] of columns) head.append(el('th', name));
  t.append(head);
  for (const row of rows) { const tr = el('tr'); for (const [, get] of columns) { const td = el('td', get(row)); td.title = td.textContent; tr.append(td); } t.append(tr); }
  box.append(t);
}
function chart(timeline) {
  const hours = [...new Set(timeline.map((p) => p.hour))].sort();
  const box = document.getElementById('chart'); box.replaceChildren();
  if (!hours.length) { box.append(el('div', 'no keys in the last 24 h', 'empty')); return; }
  const ns = 'http://www.w3.org/2000/svg', w = 560, h = 140, bw = Math.max(4, Math.floor((w - 40) / Math.max(hours.length, 1)) - 2);
  const by = (hour, state) => (timeline.find((p) => p.hour === hour && p.state === state) || { count: 0 }).count;
  const max = Math.max(1, ...hours.map((hr) => by(hr, 'done') + by(hr, 'started')));
  const svg = document.createElementNS(ns, 'svg'); svg.setAttribute('width', w); svg.setAttribute('height', h + 20); svg.setAttribute('role', 'img');
  hours.forEach((hour, i) => {
    let y = h;
    for (const [state, color] of [['done', '#2f6fde'], ['started', '#e0a100']]) {
      const n = by(hour, state); if (!n) continue;
      const bh = Math.max(1, Math.round((n / max) * (h - 10))); y -= bh;
      const r = document.createElementNS(ns, 'rect');
      r.setAttribute('x', 30 + i * (bw + 2)); r.setAttribute('y', y); r.setAttribute('width', bw); r.setAttribute('height', bh); r.setAttribute('fill', color);
      const title = document.createElementNS(ns, 'title'); title.textContent = hour + ' ' + state + ': ' + n; r.append(title); svg.append(r);
    }
    if (i === 0 || i === hours.length - 1) { const t = document.createElementNS(ns, 'text'); t.setAttribute('x', 30 + i * (bw + 2)); t.setAttribute('y', h + 14); t.setAttribute('font-size', '10'); t.textContent = hour.slice(11, 16); svg.append(t); }
  });
  const top = document.createElementNS(ns, 'text'); top.setAttribute('x', 0); top.setAttribute('y', 10); top.setAttribute('font-size', '10'); top.textContent = String(max); svg.append(top);
  box.append(svg);
}
async function refresh() {
  const { status, body } = await api('/api/overview');
  if (status !== 200) { document.getElementById('updated').textContent = 'error: ' + (body.error || status); return; }
  document.getElementById('table').textContent = body.table + ' (' + body.mode + ')';
  document.getElementById('updated').textContent = 'updated ' + when(new Date());
  const s = body.stats, cards = document.getElementById('cards'); cards.replaceChildren();
  for (const [label, value, warn] of [['total', s.total], ['done', s.done], ['started', s.started], ['live leases', s.liveLeases], ['stuck', s.abandoned, s.abandoned > 0], ['past retention', s.expiredUnswept, s.expiredUnswept > 0], ['oldest', when(s.oldest)]]) {
    const c = el('div', undefined, 'card' + (warn ? ' warn' : '')); c.dataset.stat = label; c.append(el('b', value), el('span', label)); cards.append(c);
  }
  chart(body.timeline);
  const pick = (row) => { const f = document.getElementById('inspect'); f.scope.value = row.scope; f.key.value = row.key; f.requestSubmit(); };
  table('stuck', body.stuck, [['scope', (r) => r.scope], ['key', (r) => r.key], ['recovery point', (r) => r.recoveryPoint], ['token', (r) => r.token], ['lease ended', (r) => r.lockedUntil ? when(r.lockedUntil) : 'released'], ['created', (r) => when(r.createdAt)]]);
  table('oldest', body.oldest, [['scope', (r) => r.scope], ['key', (r) => r.key], ['state', (r) => r.state], ['created', (r) => when(r.createdAt)]]);
  table('past', body.pastRetention, [['scope', (r) => r.scope], ['key', (r) => r.key], ['state', (r) => r.state], ['created', (r) => when(r.createdAt)]]);
  table('partitions', s.partitions || [], [['partition', (r) => r.name], ['day', (r) => r.day], ['past retention', (r) => r.expired ? 'yes' : 'no']]);
  if (!s.partitions) document.getElementById('partitions').replaceChildren(el('div', 'plain table: no partitions', 'empty'));
  for (const id of ['stuck', 'oldest', 'past']) document.querySelectorAll('#' + id + ' tr').forEach((tr, i) => { if (i > 0) { tr.style.cursor = 'pointer'; tr.onclick = () => pick(body[id === 'past' ? 'pastRetention' : id][i - 1]); } });
  document.body.dataset.ready = 'true';
}
document.getElementById('inspect').addEventListener('submit', async (event) => {
  event.preventDefault();
  const f = event.target, q = new URLSearchParams({ scope: f.scope.value, key: f.key.value });
  const { status, body } = await api('/api/inspect?' + q);
  const out = document.getElementById('inspection'); out.replaceChildren();
  if (status !== 200) { out.append(el('div', body.error || ('HTTP ' + status), 'empty')); return; }
  const lease = body.lockedUntil ? (body.leaseExpired ? 'expired ' + when(body.lockedUntil) : 'held until ' + when(body.lockedUntil)) : 'none';
  const rows = [['state', body.state], ['recovery point', body.recoveryPoint], ['phases', body.phases.join(', ') || '-'], ['lease', lease], ['token', body.token], ['claim id', body.claimId],
    ['created', when(body.createdAt)], ['finished', when(body.finishedAt)], ['past retention', body.retentionExpired ? 'yes' : 'no'],
    ['response', body.response ? body.response.status + ', ' + body.response.bytes + ' bytes ' + body.response.storage + (body.response.keyId ? ', sealed with ' + body.response.keyId : '') + '; headers: ' + body.response.headers.map((h) => h[0]).join(', ') : '-']];
  const t = el('table'); t.id = 'inspected';
  for (const [k, v] of rows) { const tr = el('tr'); tr.append(el('th', k), el('td', v)); t.append(tr); }
  out.append(t);
});
refresh(); setInterval(refresh, 10000);
</script></body></html>
`;
