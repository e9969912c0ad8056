// fencegate's status page. Talks only to the gateway that served it, with the token the
// operator typed (kept in this tab's session storage, never in local storage or a cookie).
// Every value from the gateway reaches the page through textContent, never as HTML.
'use strict';

const REFRESH_MS = 2000;
const PAGE = 50;
const NAME = /^[A-Za-z0-9._:-]{0,200}$/;
const TOKEN_KEY = 'fencegate.token';

const $ = (id) => document.getElementById(id);
const state = {
  prefix: '',
  after: null,       // the page being shown starts after this name (null: the first page)
  next: null,        // the listing's "next", when there is a page after this one
  pageNo: 1,
  previous: null,    // the last /metrics sample: {at, series}
  releasing: null,   // the resource the dialog is about
  timer: null,
  needToken: false,
};

function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }

// fetch() against this gateway, with the token when one was given. Resolves to
// {status, body} (body parsed when JSON, text otherwise); a 401 asks for a token.
async function call(path, init) {
  const opts = Object.assign({ headers: {} }, init || {});
  if (token() !== '') opts.headers.Authorization = 'Bearer ' + token();
  const resp = await fetch(path, opts);
  const type = resp.headers.get('Content-Type') || '';
  const body = type.startsWith('application/json') ? await resp.json() : await resp.text();
  if (resp.status === 401) askToken(token() !== '' ? 'That token was refused.' : '');
  return { status: resp.status, body };
}

function askToken(why) {
  state.needToken = true;
  $('login').hidden = false;
  $('main').hidden = true;
  $('login-error').textContent = why;
  $('forget').hidden = true;
}

function problem(r) {
  if (r.body && typeof r.body === 'object') return r.body.message || r.body.error;
  return 'HTTP ' + r.status;
}

function setPill(el, label, ok) {
  el.dataset.state = ok === null ? 'unknown' : ok ? 'ok' : 'down';
  el.textContent = label + ': ' + (ok === null ? '?' : ok ? 'ok' : 'down');
}

function fillList(dl, rows) {
  dl.replaceChildren();
  for (const [k, v] of rows) {
    const dt = document.createElement('dt');
    const dd = document.createElement('dd');
    dt.textContent = k;
    dd.textContent = v;
    dl.append(dt, dd);
  }
}

async function refreshHealth() {
  const h = await fetch('/healthz').then((r) => r.ok, () => false);
  setPill($('health'), 'health', h);
  const r = await call('/readyz');
  if (r.status === 401) return;
  if (r.status === 403) {
    setPill($('ready'), 'ready', null);
    $('topology-note').textContent = 'This token may not read /readyz (it needs "metrics").';
    return;
  }
  const b = r.body || {};
  setPill($('ready'), 'ready', r.status === 200);
  const topo = b.topology || {};
  const rows = [['Redis', b.redis || '?'], ['Storage', b.storage || '?'],
    ['Store', b.store || '?'], ['Topology', topo.kind || '?'],
    ['Master', topo.master || '?'], ['Failovers', String(topo.failovers ?? '?')]];
  for (const n of topo.nodes || []) {
    rows.push(['Node ' + n.addr, n.held_out ? 'held out' : n.counts ? 'counts' : 'not counted']);
  }
  fillList($('topology'), rows);
  $('topology-note').textContent = '';
}

// Prometheus text format: {name: [{labels, value}]}. Comments and blank lines skipped.
function parseMetrics(text) {
  const out = {};
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const l of (m[3] || '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[l[1]] = l[2];
    }
    (out[m[1]] = out[m[1]] || []).push({ labels, value: Number(m[4]) });
  }
  return out;
}

// The sum of a metric's series whose labels match: each wanted label's value equals a
// string, or passes a test function.
function sum(series, name, match) {
  let total = 0;
  for (const s of series[name] || []) {
    const ok = Object.entries(match || {}).every(([k, v]) =>
      typeof v === 'function' ? v(s.labels[k] || '') : s.labels[k] === v);
    if (ok) total += s.value;
  }
  return total;
}

// The q-quantile of /lock's latency between two samples, from the histogram's cumulative
// buckets the way Prometheus's histogram_quantile interpolates inside a bucket.
function lockQuantile(now, before, q) {
  const pick = (series) => (series.fencegate_http_request_duration_seconds_bucket || [])
    .filter((s) => s.labels.route === '/lock')
    .map((s) => ({ le: s.labels.le === '+Inf' ? Infinity : Number(s.labels.le), v: s.value }))
    .sort((a, b) => a.le - b.le);
  const a = pick(now);
  const b = pick(before);
  if (a.length === 0 || a.length !== b.length) return null;
  const d = a.map((x, i) => ({ le: x.le, v: x.v - b[i].v }));
  const total = d[d.length - 1].v;
  if (total <= 0) return null;
  const rank = q * total;
  let lower = 0;
  let below = 0;
  for (const x of d) {
    if (x.v >= rank) {
      if (x.le === Infinity) return lower;
      return lower + (x.le - lower) * ((rank - below) / Math.max(x.v - below, 1));
    }
    lower = x.le;
    below = x.v;
  }
  return lower;
}

function ms(seconds) { return seconds === null ? '-' : (seconds * 1000).toFixed(1) + ' ms'; }

async function refreshTraffic() {
  const r = await call('/metrics');
  if (r.status === 401) return;
  if (r.status !== 200) {
    $('traffic-note').textContent = r.status === 403
      ? 'This token may not read /metrics (it needs "metrics").' : problem(r);
    return;
  }
  const now = { at: performance.now(), series: parseMetrics(r.body) };
  const prev = state.previous;
  state.previous = now;
  const rows = [['Locks held', String(sum(now.series, 'fencegate_locks_held'))],
    ['Waiters', String(sum(now.series, 'fencegate_waiters'))]];
  if (prev) {
    const secs = Math.max((now.at - prev.at) / 1000, 0.001);
    const rate = (name, match) => ((sum(now.series, name, match) -
      sum(prev.series, name, match)) / secs).toFixed(1) + '/s';
    rows.push(['Requests', rate('fencegate_http_request_duration_seconds_count')]);
    rows.push(['Locks granted', rate('fencegate_acquire_total', { outcome: 'acquired' })]);
    rows.push(['Refused (held)', rate('fencegate_acquire_total', { outcome: 'locked' })]);
    rows.push(['Stale writes refused', rate('fencegate_write_total', { outcome: 'stale' })]);
    rows.push(['5xx answers', rate('fencegate_http_responses_total',
      { code: (c) => c.startsWith('5') })]);
    rows.push(['/lock p50', ms(lockQuantile(now.series, prev.series, 0.5))]);
    rows.push(['/lock p99', ms(lockQuantile(now.series, prev.series, 0.99))]);
    $('traffic-note').textContent = '';
  } else {
    $('traffic-note').textContent = 'Rates appear after the next refresh.';
  }
  fillList($('traffic'), rows);
}

function cell(text, cls) {
  const td = document.createElement('td');
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

async function refreshLocks() {
  const q = new URLSearchParams({ limit: String(PAGE) });
  if (state.prefix !== '') q.set('prefix', state.prefix);
  if (state.after !== null) q.set('after', state.after);
  const r = await call('/locks?' + q.toString());
  if (r.status === 401) return;
  const tbody = $('locks').tBodies[0];
  if (r.status !== 200) {
    $('locks-error').textContent = problem(r);
    return;
  }
  $('locks-error').textContent = '';
  tbody.replaceChildren();
  for (const l of r.body.locks) {
    const tr = document.createElement('tr');
    tr.dataset.resource = l.resource;
    const btn = document.createElement('button');
    btn.type = 'button';
    btn.textContent = 'Force release';
    btn.className = 'release';
    btn.addEventListener('click', () => openRelease(l.resource));
    const act = document.createElement('td');
    act.append(btn);
    tr.append(cell(l.resource), cell(String(l.token), 'num'), cell(String(l.holds), 'num'),
      cell((l.ttl_ms / 1000).toFixed(1) + ' s', 'num'), cell(String(l.waiters), 'num'),
      cell(l.mode || 'exclusive'), act);
    tbody.append(tr);
  }
  state.next = r.body.next;
  $('locks-empty').hidden = r.body.locks.length > 0;
  $('next').disabled = state.next === null;
  $('first').disabled = state.after === null;
  $('page').textContent = 'page ' + state.pageNo;
}

async function refresh() {
  clearTimeout(state.timer);
  if (!state.needToken) {
    try {
      await refreshHealth();
      if (!state.needToken) await refreshLocks();
      if (!state.needToken) await refreshTraffic();
      $('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    } catch (e) {
      $('updated').textContent = 'gateway unreachable: ' + e.message;
      setPill($('health'), 'health', false);
    }
  }
  if (!state.needToken && !document.hidden) state.timer = setTimeout(refresh, REFRESH_MS);
}

function openRelease(resource) {
  state.releasing = resource;
  $('release-name').textContent = resource;
  $('release-reason').value = '';
  $('release-confirm').checked = false;
  $('release-dialog').showModal();
}

async function release() {
  const resource = state.releasing;
  const reason = $('release-reason').value.trim();
  const r = await call('/admin/release', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ resource, reason }),
  });
  const out = $('release-result');
  if (r.status === 200 && r.body.released) {
    out.textContent = 'Released ' + resource + '; tokens up to ' + r.body.fenced_token +
      ' can no longer write it.';
  } else if (r.status === 200) {
    out.textContent = resource + ' was not held; nothing to release.';
  } else if (r.status === 403) {
    out.textContent = 'This token may not force a release (it needs "admin").';
  } else if (r.status !== 401) {
    out.textContent = 'Release of ' + resource + ' failed: ' + problem(r);
  }
  refresh();
}

function start() {
  $('login').addEventListener('submit', (e) => {
    e.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $('token').value);
    $('token').value = '';
    state.needToken = false;
    $('login').hidden = true;
    $('main').hidden = false;
    $('forget').hidden = false;
    refresh();
  });
  $('forget').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    askToken('');
  });
  $('filter').addEventListener('submit', (e) => {
    e.preventDefault();
    const p = $('prefix').value.trim();
    if (!NAME.test(p)) {
      $('filter-error').textContent = 'A prefix uses only A-Z a-z 0-9 . _ : - (up to 200).';
      return;
    }
    $('filter-error').textContent = '';
    Object.assign(state, { prefix: p, after: null, pageNo: 1 });
    refresh();
  });
  $('next').addEventListener('click', () => {
    Object.assign(state, { after: state.next, pageNo: state.pageNo + 1 });
    refresh();
  });
  $('first').addEventListener('click', () => {
    Object.assign(state, { after: null, pageNo: 1 });
    refresh();
  });
  $('release-cancel').addEventListener('click', () => $('release-dialog').close());
  $('release-form').addEventListener('submit', (e) => {
    e.preventDefault();
    $('release-dialog').close();
    release();
  });
  document.addEventListener('visibilitychange', () => { if (!document.hidden) refresh(); });
  $('forget').hidden = token() === '';
  refresh();
}

start();
