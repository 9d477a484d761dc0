// The dashboard in headless Chromium (Debian's package), driven by playwright-core from
// queryd/dashboard/node_modules. tests/integration/test_dashboard.py starts tally-queryd
// on a seeded database and runs this script with a JSON spec file:
//
//   node tests/browser/dashboard.mjs SPEC.json
//
// SPEC: {"url", "token", "wrong_token", "filter_model", "filter_team", "filter_key" (whose
// top end users are read), "estimated_request_id" (a row
// with an estimate on the table's first page), "artifacts" (a directory)}.
// The script signs in, reads what the page shows and prints one JSON object on stdout
// (what it saw: headline figures, top lists, every table page, the filtered table, the
// detail drawers, live counters, keys and models, an export, the 7-day range, the
// console's errors) for
// the pytest test to compare with what it seeded. It stops at the first step that does
// not happen in time, printing {"error": ..., "step": ..., "seen": {...}} and exiting 1,
// with a screenshot of that moment in the artifacts directory.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const require = createRequire(path.join(ROOT, 'queryd', 'dashboard', 'package.json'));
const { chromium } = require('playwright-core');

const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const CHROMIUM = process.env.TALLY_CHROMIUM || '/usr/bin/chromium';
const TIMEOUT = Number(process.env.TALLY_BROWSER_TIMEOUT_MS || 20000);
fs.mkdirSync(spec.artifacts, { recursive: true });

const seen = { console_errors: [], page_errors: [], foreign_requests: [], api_statuses: {} };
let step = 'launch';
const origin = new URL(spec.url).origin;

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  headless: true,
  // CI runs as root: Chromium's sandbox needs an unprivileged user.
  args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
});
let page;
try {
  const context = await browser.newContext({
    viewport: { width: 1440, height: 900 },
    colorScheme: 'light',
    acceptDownloads: true,
    timezoneId: 'UTC',
  });
  context.setDefaultTimeout(TIMEOUT);
  page = await context.newPage();
  page.on('console', (m) => { if (m.type() === 'error') seen.console_errors.push(m.text()); });
  page.on('pageerror', (e) => seen.page_errors.push(String(e)));
  page.on('request', (r) => {
    const u = r.url();
    if (!u.startsWith(origin + '/') && !u.startsWith('blob:') && !u.startsWith('data:')) seen.foreign_requests.push(u);
  });
  page.on('response', (r) => {
    const p = new URL(r.url()).pathname;
    if (p.startsWith('/api/')) {
      const k = `${p.replace(/^\/api\/requests\/.+/, '/api/requests/{id}')} ${r.status()}`;
      seen.api_statuses[k] = (seen.api_statuses[k] || 0) + 1;
    }
  });

  const tid = (id) => page.getByTestId(id);
  const text = async (id) => (await tid(id).textContent()).trim();
  const value = async (id) => tid(id).getAttribute('data-value');
  const rowIds = () => page.$$eval('[data-testid=request-row]', (rs) => rs.map((r) => r.dataset.requestId));
  const waitRequests = (check) => page.waitForFunction((src) => {
    const s = document.querySelector('[data-testid=requests]');
    if (!s || s.dataset.state !== 'ready') return false;
    const c = JSON.parse(src);
    return Object.entries(c).every(([k, v]) => (k === 'query'
      ? new URLSearchParams(s.dataset.query || '').toString() === new URLSearchParams(v).toString()
      : s.dataset[k] === String(v)));
  }, JSON.stringify(check));
  const waitOverview = (range) => page.waitForFunction((r) => {
    const s = document.querySelector('[data-testid=overview]');
    return s && s.dataset.state === 'ready' && s.dataset.range === r;
  }, range);
  // the table's pages after the one shown (read already) into pages, by "Older"
  const olderPages = async (pages) => {
    for (let i = 1; i < 20 && !(await tid('page-older').isDisabled()); i++) {
      await tid('page-older').click();
      await waitRequests({ page: i });
      pages.push(await rowIds());
    }
  };
  // a field of the first row's drawer, the drawer closed again
  const drawerField = async (field) => {
    await page.locator('[data-testid=request-row]').first().click();
    await page.waitForSelector('[data-testid=drawer][data-state=ready]');
    const v = (await page.locator(`[data-testid=drawer] [data-field=${field}]`).textContent()).trim();
    await tid('drawer-close').click();
    await tid('drawer').waitFor({ state: 'hidden' });
    return v;
  };
  // the CSV export of the table's range and filters, saved as name: the download and its lines
  const exportCsv = async (name) => {
    const [download] = await Promise.all([page.waitForEvent('download'), tid('export-csv').click()]);
    const file = path.join(spec.artifacts, name);
    await download.saveAs(file);
    return { download, lines: fs.readFileSync(file, 'utf8').split(/\r?\n/).filter((l) => l !== '') };
  };

  // ---- 1. the login screen; a wrong token is refused with a message
  step = 'login screen';
  await page.goto(spec.url);
  await tid('login-screen').waitFor({ state: 'visible' });
  seen.login_visible = true;
  seen.app_visible_before_login = await tid('app').isVisible();
  await page.screenshot({ path: path.join(spec.artifacts, 'dashboard-login.png') });

  step = 'wrong token';
  await tid('login-token').fill(spec.wrong_token);
  await tid('login-submit').click();
  await tid('login-error').waitFor({ state: 'visible' });
  seen.wrong_token_error = await text('login-error');
  seen.app_visible_after_wrong_token = await tid('app').isVisible();

  // ---- 2. the right token: charts, headline figures, top lists
  step = 'sign in';
  await tid('login-token').fill(spec.token);
  await tid('login-submit').click();
  await tid('app').waitFor({ state: 'visible' });
  seen.login_visible_after_sign_in = await tid('login-screen').isVisible();

  step = 'overview (24h)';
  await waitOverview('24h');
  step = 'charts';
  seen.charts = {};
  for (const c of ['spend', 'tokens', 'requests', 'latency']) {
    await page.locator(`[data-testid=chart-${c}] canvas`).first().waitFor({ state: 'visible' });
    seen.charts[c] = {
      canvases: await page.locator(`[data-testid=chart-${c}] canvas`).count(),
      points: Number(await tid('chart-' + c).getAttribute('data-points')),
      width: (await tid('chart-' + c).boundingBox()).width,
    };
  }
  seen.latency_p95 = JSON.parse(await tid('chart-latency').getAttribute('data-p95'));
  step = 'headline figures';
  seen.kpi_24h = {
    requests_text: await text('kpi-requests'), requests: Number(await value('kpi-requests')),
    cost_text: await text('kpi-cost'), cost_micros: Number(await value('kpi-cost')),
    estimated_text: await text('kpi-cost-est'), estimated_micros: Number(await value('kpi-cost-est')),
    tokens: Number(await value('kpi-tokens')),
    error_rate_text: await text('kpi-error-rate'),
    errors: Number(await page.locator('#kpi-errors-sub').getAttribute('data-value')),
    p50_text: await text('kpi-latency-p50'), p95_text: await text('kpi-latency-p95'),
    p99_text: (await page.locator('#kpi-p99-sub').textContent()).trim(),
  };
  seen.top_keys = await page.$$eval('[data-testid=top-keys] [data-testid=top-item]', (l) => l.map((e) => e.dataset.name));
  seen.top_teams = await page.$$eval('[data-testid=top-teams] [data-testid=top-item]', (l) => l.map((e) => e.dataset.name));
  seen.top_team_labels = await page.$$eval('[data-testid=top-teams] [data-testid=top-item] .name', (l) => l.map((e) => e.textContent));
  seen.top_team_markup = await page.locator('[data-testid=top-teams] b').count();
  seen.top_models = await page.$$eval('[data-testid=top-models] [data-testid=top-item]', (l) => l.map((e) => e.dataset.name));
  seen.top_key_cost_text = (await page.locator('[data-testid=top-keys] [data-testid=top-item] .cost .rep').first().textContent()).trim();
  const topEst = page.locator('[data-testid=top-keys] [data-testid=top-item]').first().locator('.cost .est');
  seen.top_key_est_text = (await topEst.count()) ? (await topEst.textContent()).trim() : null;
  seen.top_key_estimated = await page.$$eval('[data-testid=top-keys] [data-testid=top-item]', (l) => l.map((e) => Number(e.dataset.estimated)));
  seen.top_model_estimated = await page.$$eval('[data-testid=top-models] [data-testid=top-item]', (l) => l.map((e) => Number(e.dataset.estimated)));
  seen.spend_legend = await page.$$eval('[data-testid=chart-spend] .u-legend .u-series th', (l) => l.map((e) => e.textContent.trim()));

  // ---- 3. the request table, newest first, every page once
  step = 'table page 1';
  await waitRequests({ page: 0, query: '' });
  seen.pages = [await rowIds()];
  seen.page_info = [await text('page-info')];
  seen.first_row_cells = await page.$$eval('[data-testid=request-row]:first-child td', (tds) => tds.map((t) => t.textContent.trim()));
  seen.newer_disabled_on_first = await tid('page-newer').isDisabled();
  for (let i = 1; i < 20 && !(await tid('page-older').isDisabled()); i++) {
    step = `table page ${i + 1}`;
    await tid('page-older').click();
    await waitRequests({ page: i });
    seen.pages.push(await rowIds());
    seen.page_info.push(await text('page-info'));
  }
  step = 'table back one page';
  if (seen.pages.length > 1) {
    await tid('page-newer').click();
    await waitRequests({ page: seen.pages.length - 2 });
    seen.page_back = await rowIds();
  }
  step = 'table latest';
  if (!(await tid('page-latest').isDisabled())) await tid('page-latest').click();
  await waitRequests({ page: 0 });
  seen.page_latest = await rowIds();

  // ---- 4. the detail drawer
  step = 'drawer';
  await page.locator('[data-testid=request-row]').first().click();
  await page.waitForSelector('[data-testid=drawer][data-state=ready]');
  seen.drawer = {};
  for (const f of ['request_id', 'key_name', 'model', 'provider', 'status', 'outcome', 'prompt_tokens', 'completion_tokens', 'cost_micros', 'duration_ms']) {
    const loc = page.locator(`[data-testid=drawer] [data-field=${f}]`);
    seen.drawer[f] = (await loc.count()) ? (await loc.textContent()).trim() : null;
  }
  await page.screenshot({ path: path.join(spec.artifacts, 'dashboard-drawer.png') });
  await tid('drawer-close').click();
  await tid('drawer').waitFor({ state: 'hidden' });

  step = 'drawer of an estimated row';
  const estRow = page.locator(`[data-testid=request-row][data-request-id="${spec.estimated_request_id}"]`);
  seen.estimated_row_cost_cell = (await estRow.locator('td').nth(11).textContent()).trim();
  seen.estimated_row_tokens_cell = (await estRow.locator('td').nth(10).textContent()).trim();
  await estRow.click();
  await page.waitForFunction((id) => {
    const d = document.querySelector('[data-testid=drawer]');
    return d && d.dataset.state === 'ready' && d.dataset.requestId === id;
  }, spec.estimated_request_id);
  seen.drawer_estimated = {};
  for (const f of ['request_id', 'estimated_tokens', 'estimated_cost_micros']) {
    const loc = page.locator(`[data-testid=drawer] [data-field=${f}]`);
    seen.drawer_estimated[f] = (await loc.count()) ? (await loc.textContent()).trim() : null;
  }
  seen.drawer_other = await page.$$eval('[data-testid=drawer] h3', (hs) => hs.map((e) => e.textContent).find((t) => t === 'Other') || null);
  await page.screenshot({ path: path.join(spec.artifacts, 'dashboard-drawer-estimated.png') });
  await tid('drawer-close').click();
  await tid('drawer').waitFor({ state: 'hidden' });

  // ---- 5. a filter narrows the table (typed, debounced)
  step = 'filter by model';
  await tid('filter-model').fill(spec.filter_model);
  await waitRequests({ page: 0, query: 'model=' + encodeURIComponent(spec.filter_model) });
  seen.filtered = { pages: [await rowIds()] };
  seen.filtered.models = await page.$$eval('[data-testid=request-row] td:nth-child(6)', (tds) => [...new Set(tds.map((t) => t.textContent.trim()))]);
  await olderPages(seen.filtered.pages);

  // ---- 6. export of the filtered rows (a Blob download where the browser has no
  // File System Access API; headless Chromium would open a picker otherwise)
  step = 'export csv';
  await page.evaluate(() => { window.showSaveFilePicker = undefined; });
  const { download, lines: csv } = await exportCsv('dashboard-export.csv');
  seen.export_csv = { filename: download.suggestedFilename(), lines: csv.length, header: csv[0] || '' };

  step = 'clear filters';
  await tid('filter-clear').click();
  await waitRequests({ page: 0, query: '' });
  seen.after_clear = await rowIds();

  // ---- 6b. the team filter: its rows on every page, a row's team in the drawer, its export
  step = 'filter by team';
  await tid('filter-team').fill(spec.filter_team);
  await waitRequests({ page: 0, query: 'team=' + encodeURIComponent(spec.filter_team) });
  seen.by_team = { pages: [await rowIds()] };
  seen.by_team.drawer_team = await drawerField('team_name');
  await olderPages(seen.by_team.pages);
  seen.by_team.export_lines = (await exportCsv('dashboard-export-team.csv')).lines.length;
  await tid('filter-clear').click();
  await waitRequests({ page: 0, query: '' });

  // ---- 6c. a key's top end users; one picked: its rows, a row's end user, its export
  step = 'top end users of a key';
  const keyQuery = 'key=' + encodeURIComponent(spec.filter_key);
  await tid('filter-key').fill(spec.filter_key);
  await waitRequests({ page: 0, query: keyQuery });
  await page.waitForFunction((k) => {
    const b = document.querySelector('[data-testid=end-users]');
    return b && b.dataset.state === 'ready' && b.dataset.key === k;
  }, spec.filter_key);
  const euItems = '[data-testid=top-end-users] [data-testid=top-item]';
  seen.end_users = {
    names: await page.$$eval(euItems, (l) => l.map((e) => e.dataset.name)),
    labels: await page.$$eval(euItems + ' .name', (l) => l.map((e) => e.textContent)),
    markup: await page.locator('[data-testid=top-end-users] b').count(),
    from: Number(await tid('end-users').getAttribute('data-from')),
    to: Number(await tid('end-users').getAttribute('data-to')),
    range_text: await text('end-users-range'),
  };
  step = 'filter by an end user';
  await page.locator(euItems).first().click();
  await waitRequests({ page: 0, query: keyQuery + '&end_user=' + encodeURIComponent(seen.end_users.names[0]) });
  seen.end_users.pages = [await rowIds()];
  await tid('requests').screenshot({ path: path.join(spec.artifacts, 'dashboard-end-users.png') });
  seen.end_users.first_cell = (await page.locator('[data-testid=request-row]').first().locator('td').nth(3).textContent()).trim();
  seen.end_users.drawer = await drawerField('end_user');
  await olderPages(seen.end_users.pages);
  seen.end_users.export_lines = (await exportCsv('dashboard-export-end-user.csv')).lines.length;
  await tid('filter-clear').click();
  await waitRequests({ page: 0, query: '' });
  seen.end_users.hidden_after_clear = await tid('end-users').isHidden();

  // ---- 6d. the top tags (every key's); one picked: its rows, a row's tags, its export
  step = 'top tags';
  await page.waitForFunction(() => {
    const b = document.querySelector('[data-testid=tags]');
    return b && b.dataset.state === 'ready' && b.dataset.key === '';
  });
  const tagItems = '[data-testid=top-tags] [data-testid=top-item]';
  seen.tags = {
    names: await page.$$eval(tagItems, (l) => l.map((e) => e.dataset.name)),
    labels: await page.$$eval(tagItems + ' .name', (l) => l.map((e) => e.textContent)),
    from: Number(await tid('tags').getAttribute('data-from')),
    to: Number(await tid('tags').getAttribute('data-to')),
    range_text: await text('tags-range'),
  };
  step = 'filter by a tag';
  await page.locator(tagItems).first().click();
  await waitRequests({ page: 0, query: 'tag=' + encodeURIComponent(seen.tags.names[0]) });
  seen.tags.pages = [await rowIds()];
  await tid('requests').screenshot({ path: path.join(spec.artifacts, 'dashboard-tags.png') });
  seen.tags.first_cell = (await page.locator('[data-testid=request-row]').first().locator('td').nth(4).textContent()).trim();
  seen.tags.drawer = await drawerField('tags');
  await olderPages(seen.tags.pages);
  seen.tags.export_lines = (await exportCsv('dashboard-export-tag.csv')).lines.length;
  await tid('filter-clear').click();
  await waitRequests({ page: 0, query: '' });

  // ---- 7. live accounting (no agent runs: queryd answers "down" with stored counters)
  step = 'live counters';
  await page.waitForFunction(() => ['up', 'down'].includes(document.querySelector('[data-testid=live]').dataset.state));
  seen.live = {
    agent: await text('live-agent'),
    received: Number(await value('live-received')),
    written: Number(await value('live-written')),
    dropped: Number(await value('live-dropped')),
    unauthenticated: Number(await value('live-unauthenticated')),
    pending_overflow: Number(await value('live-pending_overflow')),
    balance: await text('live-balance'),
    pill: await text('live-pill'),
  };

  // ---- 8. keys and models: reported and estimated spend apart
  step = 'keys and models';
  await page.waitForSelector('[data-testid=key-row]');
  seen.keys = Object.fromEntries(await page.$$eval('[data-testid=key-row]', (rs) => rs.map((r) => [r.dataset.name, {
    cost: Number(r.dataset.cost), estimated: Number(r.dataset.estimated), charged: Number(r.dataset.charged),
    spend_text: r.querySelector('[data-testid=key-spend]').textContent.trim(),
    budget_text: r.querySelector('.budget > .txt').textContent.trim(),
  }])));
  await page.waitForSelector('[data-testid=model-row]');
  seen.models = Object.fromEntries(await page.$$eval('[data-testid=model-row]', (rs) => rs.map((r) => [r.dataset.name,
    [r.querySelector('[data-field=cost]').textContent.trim(), r.querySelector('[data-field=estimated]').textContent.trim()]])));
  seen.model_cards = Object.fromEntries(await page.$$eval('[data-testid=model-row]', (rs) => rs.map((r) => [r.dataset.name, {
    input: r.children[3].textContent.trim(), output: r.children[4].textContent.trim(),
    web_search: r.querySelector('[data-field=web-search]').textContent.trim(),
    cards: [...r.querySelectorAll('[data-testid=model-card]')].map((c) => [c.dataset.tier, Number(c.dataset.above), c.textContent.trim()]),
  }])));

  // ---- 9. the range selector drives the figures and the table
  step = 'range 7d';
  await tid('range-7d').click();
  await waitOverview('7d');
  await waitRequests({ page: 0 });
  seen.kpi_7d = {
    requests: Number(await value('kpi-requests')), cost_micros: Number(await value('kpi-cost')),
    cost_text: await text('kpi-cost'), estimated_micros: Number(await value('kpi-cost-est')),
  };
  seen.chart_points_7d = Number(await tid('chart-spend').getAttribute('data-points'));

  step = 'range 24h again';
  await tid('range-24h').click();
  await waitOverview('24h');
  await waitRequests({ page: 0, query: '' });
  seen.kpi_24h_again = Number(await value('kpi-requests'));
  // two live polls at least, so the screenshot shows settled counters
  await page.waitForTimeout(500);

  step = 'screenshot';
  await tid('toast').waitFor({ state: 'hidden' });
  await page.evaluate(() => window.scrollTo({ top: 0, behavior: 'instant' }));
  const shot = path.join(spec.artifacts, 'dashboard.png');
  await page.screenshot({ path: shot, fullPage: true });
  seen.screenshot = shot;
  await tid('theme-toggle').click();
  await page.waitForTimeout(300);
  await page.evaluate(() => window.scrollTo({ top: 0, behavior: 'instant' }));
  await page.screenshot({ path: path.join(spec.artifacts, 'dashboard-dark.png'), fullPage: true });

  // ---- 10. a token that stops working sends the operator back to the login screen
  step = '401 signs out';
  await page.evaluate(() => sessionStorage.setItem('tally.operatorToken', 'no-longer-valid'));
  await page.reload();
  await tid('login-screen').waitFor({ state: 'visible' });
  await tid('login-error').waitFor({ state: 'visible' });
  seen.expired_message = await text('login-error');
  seen.token_kept_after_401 = await page.evaluate(() => sessionStorage.getItem('tally.operatorToken'));

  seen.ok = true;
  process.stdout.write(JSON.stringify(seen) + '\n');
} catch (e) {
  try {
    if (page) await page.screenshot({ path: path.join(spec.artifacts, 'dashboard-failure.png'), fullPage: true });
  } catch (_) { /* the page is gone */ }
  process.stdout.write(JSON.stringify({ error: String(e && e.message || e), step, seen }) + '\n');
  process.exitCode = 1;
} finally {
  await browser.close();
}
