/**
 * The `idem dashboard` page's only script (allowed by its SHA-256 in the CSP). Every value from
 * the table (keys, scopes, problem types) is written as text (`textContent`), never as HTML:
 * keys come from clients.
 *
 * The token: taken from `?token=` once, kept in sessionStorage (this tab, this origin), and the
 * URL replaced without it (`history.replaceState`), so it is not left in the address bar or the
 * history; every API call sends it as `Authorization: Bearer`. An action is a POST of JSON
 * (the browser adds `Origin`).
 */
export const DASHBOARD_SCRIPT = `
const params = new URLSearchParams(location.search);
if (params.has('token')) {
  sessionStorage.setItem('idem-dashboard-token', params.get('token'));
  params.delete('token');
  const rest = params.toString();
  history.replaceState(null, '', location.pathname + (rest ? '?' + rest : '') + location.hash);
}
const token = sessionStorage.getItem('idem-dashboard-token');
const auth = () => token ? { authorization: 'Bearer ' + token } : {};
const api = (path, init) => fetch(path, Object.assign({ headers: auth() }, init)).then(async (r) => ({ status: r.status, body: await r.json().catch(() => ({})) }));
const el = (tag, text, cls) => { const e = document.createElement(tag); if (text !== undefined && text !== null) e.textContent = String(text); if (cls) e.className = cls; return e; };
const when = (d) => d ? new Date(d).toISOString().replace('T', ' ').slice(0, 19) + 'Z' : '-';
const quote = (s) => /^[-A-Za-z0-9_.:/=@%+]+$/.test(s) ? s : "'" + s.split("'").join("'" + '"' + "'" + '"' + "'") + "'";
const problem = (t) => t ? t.replace('urn:idem:problem:', '') : '-';
let actionsEnabled = false;
const LONG = new Set(['scope', 'key', 'problem type']);
function table(target, rows, columns, onPick) {
  const box = document.getElementById(target); box.replaceChildren();
  if (!rows.length) { box.append(el('div', 'none', 'empty')); return; }
  const t = el('table'); const head = el('tr');
  for (const [name] of columns) head.append(el('th', name));
  t.append(head);
  for (const row of rows) {
    const tr = el('tr');
    for (const [name, get, cls] of columns) {
      const td = el('td', get(row), (LONG.has(name) ? 'long ' : '') + (typeof cls === 'function' ? cls(row) : cls || ''));
      td.title = td.textContent; tr.append(td);
    }
    if (onPick) { tr.className = 'click'; tr.tabIndex = 0; tr.onclick = () => onPick(row); tr.onkeydown = (e) => { if (e.key === 'Enter') onPick(row); }; }
    t.append(tr);
  }
  const wrap = el('div', undefined, 'scroll'); wrap.append(t); box.append(wrap);
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
function pick(row) {
  const f = document.getElementById('inspect'); f.scope.value = row.scope; f.key.value = row.key; f.requestSubmit();
  document.getElementById('inspector').scrollIntoView({ block: 'start' });
}
const attempts = (r) => r.failedAttempts, bad = (r) => 'n' + (r.failedAttempts > 0 ? ' bad' : '');
async function refresh() {
  const { status, body } = await api('/api/overview');
  if (status !== 200) {
    document.getElementById('updated').textContent = status === 401 ? 'token required: open the URL idem dashboard printed (it carries ?token=)' : 'error: ' + (body.error || status);
    return;
  }
  actionsEnabled = body.actions === true;
  document.getElementById('auth').textContent = actionsEnabled ? 'actions on (token)' : 'read-only';
  document.getElementById('actions').textContent = actionsEnabled ? '' : 'Actions (release a stuck key, forget a finished one) are disabled: start idem dashboard with --token <secret> (or IDEM_DASHBOARD_TOKEN) and open the URL it prints.';
  document.getElementById('table').textContent = body.table + ' (' + body.mode + ')';
  document.getElementById('updated').textContent = 'updated ' + when(new Date());
  const s = body.stats, cards = document.getElementById('cards'); cards.replaceChildren();
  for (const [label, value, warn] of [['total', s.total], ['done', s.done], ['started', s.started], ['live leases', s.liveLeases], ['stuck', s.abandoned, s.abandoned > 0], ['failing', body.failing.length, body.failing.length > 0], ['past retention', s.expiredUnswept, s.expiredUnswept > 0], ['oldest', when(s.oldest)]]) {
    const c = el('div', undefined, 'card' + (warn ? ' warn' : '')); c.dataset.stat = label; c.append(el('b', value), el('span', label)); cards.append(c);
  }
  chart(body.timeline);
  table('stuck', body.stuck, [['scope', (r) => r.scope], ['key', (r) => r.key], ['recovery point', (r) => r.recoveryPoint], ['failed attempts', attempts, bad],
    ['lease ended', (r) => r.lockedUntil ? when(r.lockedUntil) : 'released'], ['created', (r) => when(r.createdAt)], ['token', (r) => r.token, 'n'],
    ['next step', (r) => r.requestStored ? 'idem complete --app <module>' : 'a retry with the same key']], pick);
  table('failing', body.failing, [['scope', (r) => r.scope], ['key', (r) => r.key], ['state', (r) => r.state], ['failed attempts', attempts, bad],
    ['status', (r) => r.responseStatus ?? '-', 'n'], ['problem type', (r) => problem(r.problemType)], ['recovery point', (r) => r.recoveryPoint], ['created', (r) => when(r.createdAt)]], pick);
  table('oldest', body.oldest, [['scope', (r) => r.scope], ['key', (r) => r.key], ['state', (r) => r.state], ['failed', attempts, bad], ['created', (r) => when(r.createdAt)]], pick);
  table('past', body.pastRetention, [['scope', (r) => r.scope], ['key', (r) => r.key], ['state', (r) => r.state], ['created', (r) => when(r.createdAt)]], pick);
  table('partitions', s.partitions || [], [['partition', (r) => r.name], ['day', (r) => r.day], ['past retention', (r) => r.expired ? 'yes' : 'no']]);
  if (!s.partitions) document.getElementById('partitions').replaceChildren(el('div', 'plain table: no partitions', 'empty'));
  document.body.dataset.ready = 'true';
}
function why(body, out) {
  const box = el('div', undefined, 'why'); box.id = 'why';
  const stuck = body.state === 'started' && body.leaseExpired;
  const cmd = (text) => box.append(el('pre', text));
  if (stuck) {
    box.append(el('h3', 'Stuck: nobody is working on this key'));
    box.append(el('p', (body.failedAttempts > 0 ? body.failedAttempts + ' failed attempt(s) so far. ' : 'No failed attempt counted: the worker crashed or timed out. ') +
      'The next request with this key takes it over and resumes after "' + body.recoveryPoint + '".'));
    box.append(el('p', body.requestStored ? 'Its request is stored: a completer pass can finish it without the client:' : 'No request is stored, so only a retry by the client can finish it; with the completer on, a pass would:'));
    cmd('idem complete --app <your completer module>');
  } else if (body.state === 'started') {
    box.append(el('h3', 'In progress: a worker holds the lease'));
  } else {
    box.append(el('h3', body.problemType ? 'Finished with a problem: ' + problem(body.problemType) : 'Finished: replayed to every retry'));
  }
  box.append(el('p', 'Everything about it:')); cmd('idem inspect ' + quote(body.scope) + ' ' + quote(body.key));
  if (body.operatorNote) { box.append(el('p', 'Last operator action:')); cmd(body.operatorNote); }
  const act = (action, label) => {
    const b = el('button', label + ' (fenced by token ' + body.token + ')', 'act'); b.id = action;
    b.onclick = async () => {
      const r = await api('/api/' + action, { method: 'POST', headers: Object.assign({ 'content-type': 'application/json' }, auth()), body: JSON.stringify({ scope: body.scope, key: body.key, token: body.token }) });
      const note = el('p', r.status === 200 ? r.body.message : 'refused: ' + (r.body.error || r.status)); note.id = action === 'release' ? 'released' : 'forgotten'; box.append(note);
      refresh();
    };
    box.append(b);
  };
  if (stuck && actionsEnabled) act('release', 'Release: the lease ends now');
  if (body.state === 'done' && actionsEnabled) act('forget', 'Forget: the next request with this key runs again');
  out.append(box);
}
document.getElementById('inspect').addEventListener('submit', async (event) => {
  event.preventDefault();
  const f = event.target, q = new URLSearchParams({ scope: f.scope.value, key: f.key.value });
  const { status, body } = await api('/api/inspect?' + q);
  const out = document.getElementById('inspection'); out.replaceChildren();
  if (status !== 200) { out.append(el('div', body.error || ('HTTP ' + status), 'empty')); return; }
  why(body, out);
  const lease = body.lockedUntil ? (body.leaseExpired ? 'expired ' + when(body.lockedUntil) : 'held until ' + when(body.lockedUntil)) : 'none';
  const rows = [['state', body.state], ['recovery point', body.recoveryPoint], ['phases', body.phases.join(', ') || '-'], ['failed attempts', body.failedAttempts],
    ['problem type', body.problemType || '-'], ['request stored', body.requestStored ? 'yes (a completer can finish it)' : 'no'], ['lease', lease], ['token', body.token], ['claim id', body.claimId],
    ['created', when(body.createdAt)], ['finished', when(body.finishedAt)], ['past retention', body.retentionExpired ? 'yes' : 'no'],
    ['response', body.response ? body.response.status + ', ' + body.response.bytes + ' bytes ' + body.response.storage + (body.response.keyId ? ', sealed with ' + body.response.keyId : '') + '; headers: ' + body.response.headers.map((h) => h[0]).join(', ') : '-']];
  const t = el('table'); t.id = 'inspected';
  for (const [k, v] of rows) { const tr = el('tr'); tr.append(el('th', k), el('td', v)); t.append(tr); }
  out.append(t);
});
refresh(); setInterval(refresh, 10000);
`;
