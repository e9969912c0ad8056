// The status page in a real browser: Debian's Chromium, headless, driven by puppeteer-core,
// against a real gateway and Redis that run-ui-test.sh started with a bearer token.
//
//   GATEWAY=http://127.0.0.1:PORT TOKEN=... SCREENSHOT=out.png node ui.test.js
//
// Checks, in order: the page asks for the token and loads nothing from elsewhere; the held
// locks appear; a bad prefix is refused on the page and a good one filters; a forced release
// from the page (reason, confirmation) fences the old holder (its write with its token is a
// 409 stale_token, its unlock a 409 not_owner) and wakes the parked waiter with a larger
// token; the traffic figures come from /metrics. Any script error or CSP violation in the
// page fails the test. Every wait is a condition with a deadline.
'use strict';

const puppeteer = require('puppeteer-core');

const base = process.env.GATEWAY;
const token = process.env.TOKEN;
const shot = process.env.SCREENSHOT;
const chromium = process.env.CHROMIUM || '/usr/bin/chromium';
const WAIT_MS = 15000;

function check(cond, what) {
  if (!cond) throw new Error('FAIL: ' + what);
  console.log('ok: ' + what);
}

async function api(method, path, body, headers) {
  const h = Object.assign({ Authorization: 'Bearer ' + token }, headers || {});
  if (body !== undefined) h['Content-Type'] = 'application/json';
  const r = await fetch(base + path, {
    method, headers: h, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) { json = null; }
  return { status: r.status, json, text };
}

async function lock(resource, owner, extra) {
  const r = await api('POST', '/lock', Object.assign({ resource, owner, ttl_ms: 60000 }, extra));
  if (r.status !== 200) throw new Error(`lock ${resource}: ${r.status} ${r.text}`);
  return r.json.token;
}

async function rows(page) {
  return page.$$eval('#locks tbody tr', (trs) => trs.map((tr) => tr.dataset.resource));
}

async function main() {
  const owner = 'ui-test-' + Math.random().toString(36).slice(2);
  const tokenA = await lock('billing:a', owner);
  await lock('billing:b', owner);
  await lock('ops:c', owner);

  const browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    // As root in a container Chromium's sandbox cannot start; the page is our own.
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run'],
  });
  const problems = [];
  const elsewhere = [];
  try {
    const page = await browser.newPage();
    await page.setViewport({ width: 1100, height: 800 });
    page.on('pageerror', (e) => problems.push('page error: ' + e.message));
    page.on('console', (m) => {
      // A 401 before the token is typed is expected; any other error is not.
      if (m.type() === 'error' && !/status of 401/.test(m.text())) {
        problems.push('console: ' + m.text());
      }
    });
    page.on('request', (req) => {
      if (!req.url().startsWith(base + '/')) elsewhere.push(req.url());
    });

    await page.goto(base + '/ui/', { waitUntil: 'load' });
    await page.waitForSelector('#login:not([hidden])', { timeout: WAIT_MS });
    check(true, 'the page asks for a token when the gateway needs one');

    await page.type('#token', token);
    await page.click('#login button[type=submit]');
    await page.waitForFunction(() => document.querySelectorAll('#locks tbody tr').length === 3,
      { timeout: WAIT_MS });
    const all = await rows(page);
    check(JSON.stringify(all) === JSON.stringify(['billing:a', 'billing:b', 'ops:c']),
      'the three held locks appear, sorted by name: ' + all.join(', '));
    const owners = await page.$eval('#locks', (t) => t.textContent);
    check(!owners.includes(owner), 'no owner id is shown');

    await page.type('#prefix', 'bad prefix!');
    await page.click('#filter button[type=submit]');
    await page.waitForFunction(() => document.getElementById('filter-error').textContent !== '',
      { timeout: WAIT_MS });
    check(true, 'a prefix that is no resource name is refused on the page');

    await page.$eval('#prefix', (el) => { el.value = ''; });
    await page.type('#prefix', 'billing:');
    await page.click('#filter button[type=submit]');
    await page.waitForFunction(() => {
      const r = [...document.querySelectorAll('#locks tbody tr')].map((t) => t.dataset.resource);
      return r.length === 2 && r.every((n) => n.startsWith('billing:'));
    }, { timeout: WAIT_MS });
    check(true, 'filtering by prefix billing: shows billing:a and billing:b only');

    // A waiter parked on billing:a, which the forced release must wake.
    const waiter = api('POST', '/lock', { resource: 'billing:a', owner: 'waiter', ttl_ms: 60000,
      wait_ms: WAIT_MS });
    await new Promise((resolve, reject) => {
      const until = Date.now() + WAIT_MS;
      const poll = async () => {
        const s = await api('GET', '/locks?prefix=billing:a&limit=1');
        if (s.status === 200 && s.json.locks.length === 1 && s.json.locks[0].waiters >= 1) {
          return resolve();
        }
        if (Date.now() > until) return reject(new Error('the waiter never showed as waiting'));
        setTimeout(poll, 50);
      };
      poll();
    });

    await page.click('#locks tbody tr[data-resource="billing:a"] button.release');
    await page.waitForSelector('#release-dialog[open]', { timeout: WAIT_MS });
    await page.type('#release-reason', 'ui test: holder stuck');
    await page.click('#release-confirm');
    await page.click('#release-go');
    await page.waitForFunction(
      () => document.getElementById('release-result').textContent.startsWith('Released billing:a'),
      { timeout: WAIT_MS });
    const said = await page.$eval('#release-result', (e) => e.textContent);
    check(true, 'the page reports the forced release: ' + said);

    const w = await waiter;
    check(w.status === 200 && w.json.token > tokenA,
      `the parked waiter was woken with a larger token (${w.json && w.json.token} > ${tokenA})`);
    const resp = await fetch(base + '/resources/billing:a', {
      method: 'PUT', body: 'late write',
      headers: { Authorization: 'Bearer ' + token, 'Fencing-Token': String(tokenA),
        'Content-Type': 'text/plain' },
    });
    const put = await resp.json();
    check(resp.status === 409 && put.error === 'stale_token' && put.superseded_by > tokenA,
      'the old holder\'s write is refused: ' + JSON.stringify(put));
    const un = await api('POST', '/unlock', { resource: 'billing:a', owner });
    check(un.status === 409 && un.json.error === 'not_owner',
      'the old holder\'s unlock is refused: ' + un.text);

    await page.waitForFunction(() => [...document.querySelectorAll('#traffic dt')]
      .some((dt) => dt.textContent === '/lock p99'), { timeout: WAIT_MS });
    check(true, 'the traffic figures are read from /metrics');

    await page.screenshot({ path: shot, fullPage: true });
    check(true, 'screenshot written to ' + shot);
  } finally {
    await browser.close();
  }
  check(elsewhere.length === 0, 'the page loaded nothing from elsewhere ' + elsewhere.join(' '));
  check(problems.length === 0, 'no script error or CSP violation ' + problems.join('; '));
}

main().catch((e) => {
  console.error(e.message);
  process.exit(1);
});
