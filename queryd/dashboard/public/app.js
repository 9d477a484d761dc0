/* tally dashboard. Plain browser JavaScript, no build step; uPlot (vendor/) draws the
 * charts. Everything comes from tally-queryd's JSON API (docs/api.md):
 *   charts, headline figures, top lists   /api/summary (rollups only, never raw rows;
 *                                          top teams by group=team)
 *   request table                          /api/requests (keyset pages, `next` cursor)
 *   top end users of the filtered key      /api/summary?group=end_user&key= (whole days)
 *   top tags (of the filtered key)         /api/summary?group=tag[&key=] (whole days)
 *   detail drawer                          /api/requests/{id}
 *   live accounting (every 2 s)            /api/live
 *   keys and models; team filter names     /api/keys, /api/models; /api/teams
 *   downloads                              /api/export
 * The operator token lives in this tab's sessionStorage and goes out as
 * `Authorization: Bearer ...` on every /api/ call; a 401 signs out. */
(function () {
  'use strict';

  const TOKEN_KEY = 'tally.operatorToken';
  const HOUR = 3600;
  const DAY = 86400;
  const RANGES = { '1h': HOUR, '24h': DAY, '7d': 7 * DAY, '30d': 30 * DAY };
  const LIVE_MS = 2000;          // live counters poll
  const OVERVIEW_MS = 60000;     // rollups refresh (cheap: hourly/daily tables)
  const DEBOUNCE_MS = 350;       // filter inputs
  const CHART_H = 240;
  const TOP_N = 8;

  const $ = (id) => document.getElementById(id);
  const state = {
    token: null,
    session: null,               // AbortController of the signed-in session
    range: RANGES[localStorage.getItem('tally.range')] ? localStorage.getItem('tally.range') : '24h',
    from: 0,
    to: 0,
    group: 'hour',
    filters: { team: '', key: '', end_user: '', tag: '', model: '', status: '', outcome: '', stream: '' },
    pageSize: 50,
    cursors: [null],             // cursors[i]: the `before` of page i (null: newest)
    page: 0,
    lastOverview: 0,
    series: null,                // last /api/summary time series answer (theme redraws)
  };

  // ------------------------------------------------------------------ formatting
  const nf = new Intl.NumberFormat('en-US');
  const cf = new Intl.NumberFormat('en-US', { notation: 'compact', maximumFractionDigits: 2 });
  const pad = (n, w = 2) => String(n).padStart(w, '0');

  function fmtInt(n) { return n == null ? '–' : nf.format(n); }
  function fmtCompact(n) { return n == null ? '–' : Math.abs(n) < 10000 ? nf.format(n) : cf.format(n); }

  /* Integer micro-dollars to "$12.34": cents from $1 up, four decimals from $0.01
   * ("$0.7357"), below that every micro-dollar ("$0.00504"); never fewer than two. */
  function fmtUSD(micros) {
    if (micros == null) return '–';
    const sign = micros < 0 ? '-' : '';
    const m = Math.abs(micros);
    if (m >= 1000000) {
      const cents = Math.round(m / 10000);
      return sign + '$' + nf.format(Math.floor(cents / 100)) + '.' + pad(cents % 100);
    }
    let frac = m >= 10000 ? pad(Math.round(m / 100), 4) : pad(m, 6);
    if (frac === '10000') return sign + '$1.00';
    frac = frac.replace(/0+$/, '');
    if (frac.length < 2) frac = frac.padEnd(2, '0');
    return sign + '$0.' + frac;
  }
  /* Reported and estimated spend side by side, never merged into one figure. */
  function spendText(reported, estimated) {
    return `${fmtUSD(reported ?? 0)} reported · ${fmtUSD(estimated ?? 0)} estimated`;
  }
  /* Axis labels: dollars, short. */
  function fmtUSDAxis(d) {
    if (d === 0) return '$0';
    if (Math.abs(d) >= 1000) return '$' + cf.format(d);
    if (Math.abs(d) >= 1) return '$' + +d.toFixed(2);
    return '$' + +d.toPrecision(2);
  }
  function fmtPct(rate) {
    if (rate == null) return '–';
    const p = rate * 100;
    return (p === 0 ? '0' : p < 0.1 ? p.toFixed(3) : p.toFixed(2)) + '%';
  }
  function fmtMs(ms) {
    if (ms == null) return '–';
    if (ms < 1000) return Math.round(ms) + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(2) + ' s';
    return (ms / 60000).toFixed(1) + ' min';
  }
  /* A latency bucket [over, at most] (null: past the last bound), all the rollups can
   * say of a percentile: "≤ 25 ms", "1.00 s–1.50 s", "> 1.0 min". */
  function fmtBucket(b) {
    if (!b) return '–';
    if (b[1] == null) return '> ' + fmtMs(b[0]);
    if (!b[0]) return '≤ ' + fmtMs(b[1]);
    return fmtMs(b[0]) + '–' + fmtMs(b[1]);
  }
  /* What a chart can plot of a bucket: its bound "at most" (past the last bound, the
   * last one); the legend shows the whole bucket. */
  function bucketTop(b) {
    return b ? (b[1] ?? b[0]) : null;
  }
  function fmtStamp(sec, withSeconds) {
    const d = new Date(sec * 1000);
    const s = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
    return withSeconds ? s + ':' + pad(d.getSeconds()) : s;
  }
  function fmtTimeMs(ms) {
    if (ms == null) return '–';
    const d = new Date(ms);
    return `${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
  }
  function fmtBytes(n) {
    if (n == null) return '–';
    if (n < 1024) return n + ' B';
    if (n < 1048576) return (n / 1024).toFixed(1) + ' KiB';
    return (n / 1048576).toFixed(1) + ' MiB';
  }

  // ------------------------------------------------------------------ DOM helpers
  /* h('td', {class: 'r', title: 'x'}, 'text', node...) */
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v == null || v === false) continue;
        if (k === 'class') el.className = v;
        else if (k === 'text') el.textContent = v;
        else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
        else el.setAttribute(k, v === true ? '' : v);
      }
    }
    for (const kid of kids) {
      if (kid == null || kid === false) continue;
      el.append(kid instanceof Node ? kid : String(kid));
    }
    return el;
  }
  /* Writes only what changed: the live poll touches a handful of text nodes. */
  function setText(el, text) {
    if (typeof el === 'string') el = $(el);
    if (el && el.textContent !== text) el.textContent = text;
  }
  function setTitle(el, title) {
    if (el.title !== title) el.title = title;
  }
  function setData(el, name, value) {
    if (typeof el === 'string') el = $(el);
    const v = value == null ? '' : String(value);
    if (el && el.dataset[name] !== v) el.dataset[name] = v;
  }
  function debounce(fn, ms) {
    let t = null;
    return (...a) => { clearTimeout(t); t = setTimeout(() => fn(...a), ms); };
  }
  function qs(params) {
    const u = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) {
      if (v == null || v === '') continue;
      u.set(k, v);
    }
    const s = u.toString();
    return s ? '?' + s : '';
  }
  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }
  function alpha(color, a) {
    const m = /^#([0-9a-f]{6})$/i.exec(color);
    if (!m) return color;
    const n = parseInt(m[1], 16);
    return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, ${a})`;
  }

  // ------------------------------------------------------------------ API
  class ApiError extends Error {
    constructor(status, message, param) { super(message); this.status = status; this.param = param; }
  }
  const isAbort = (e) => e && (e.name === 'AbortError' || (e instanceof ApiError && e.status === 401));

  function authHeaders(token) {
    return { Authorization: 'Bearer ' + (token || state.token), Accept: 'application/json' };
  }

  async function api(path, params, signal) {
    if (!state.token) throw new ApiError(401, 'signed out');
    const session = state.session;
    let res;
    try {
      res = await fetch(path + qs(params), { headers: authHeaders(), signal, cache: 'no-store' });
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new ApiError(0, 'Cannot reach tally-queryd (' + e.message + ')');
    }
    if (res.status === 401) {
      if (state.session === session) signOut('The operator token was refused (401). Sign in again.');
      throw new ApiError(401, 'unauthorized');
    }
    let body = null;
    try { body = await res.json(); } catch (_) { /* not JSON */ }
    if (!res.ok) {
      throw new ApiError(res.status, (body && body.error) || `HTTP ${res.status}`, body && body.param);
    }
    return body;
  }

  // ------------------------------------------------------------------ banner
  function showBanner(msg, kind) {
    const b = $('banner');
    b.className = 'banner' + (kind ? ' ' + kind : '');
    b.textContent = msg;
    b.hidden = false;
  }
  function hideBanner() { $('banner').hidden = true; }

  // ------------------------------------------------------------------ login
  function showLogin(message) {
    document.body.dataset.view = 'login';
    $('app').hidden = true;
    $('login').hidden = false;
    const err = $('login-error');
    err.textContent = message || '';
    err.hidden = !message;
    $('login-token').value = '';
    $('login-token').focus();
  }

  async function onLogin(ev) {
    ev.preventDefault();
    const token = $('login-token').value.trim();
    const err = $('login-error');
    const fail = (msg) => { err.textContent = msg; err.hidden = false; $('login-token').select(); };
    if (!token) return fail('Enter the operator token.');
    const btn = $('login-submit');
    btn.disabled = true;
    btn.textContent = 'Signing in…';
    err.hidden = true;
    try {
      const res = await fetch('/api/keys', { headers: authHeaders(token), cache: 'no-store' });
      let body = null;
      try { body = await res.json(); } catch (_) { /* not JSON */ }
      if (res.status === 401) return fail('That token was not accepted.');
      if (!res.ok) return fail((body && body.error) || `tally-queryd answered ${res.status}.`);
      sessionStorage.setItem(TOKEN_KEY, token);
      startApp(token, body);
    } catch (e) {
      fail('Cannot reach tally-queryd.');
    } finally {
      btn.disabled = false;
      btn.textContent = 'Sign in';
    }
  }

  async function checkHealth() {
    try {
      const res = await fetch('/api/health', { cache: 'no-store' });
      const b = await res.json();
      if (b.data === false) {
        setText('login-health', 'tally-queryd runs without TALLY_OPERATOR_TOKEN: it serves no data.');
      } else {
        setText('login-health', `tally-queryd · schema v${b.schema_version ?? '?'}`);
      }
    } catch (_) {
      setText('login-health', 'tally-queryd does not answer.');
    }
  }

  function signOut(message) {
    state.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    if (state.session) state.session.abort();
    state.session = null;
    clearTimeout(timers.live);
    clearTimeout(timers.overview);
    closeDrawer();
    $('requests-body').replaceChildren();
    $('top-end-users').replaceChildren();
    $('top-tags').replaceChildren();
    $('keys-body').replaceChildren();
    $('models-body').replaceChildren();
    showLogin(message);
  }

  // ------------------------------------------------------------------ app start
  const timers = { live: null, overview: null };

  function startApp(token, keysAnswer) {
    state.token = token;
    state.session = new AbortController();
    document.body.dataset.view = 'app';
    $('login').hidden = true;
    $('login-token').value = '';
    $('app').hidden = false;
    hideBanner();
    markRange();
    computeRange();
    resetPaging();
    loadOverview();
    loadRequests();
    loadEndUsers();
    loadTags();
    if (keysAnswer) renderKeys(keysAnswer.keys || []); else loadKeys();
    loadTeams();
    loadModels();
    pollLive();
  }

  function refreshAll() {
    computeRange();
    loadOverview();
    loadRequests();
    loadEndUsers();
    loadTags();
    loadKeys();
    loadTeams();
    loadModels();
  }

  // ------------------------------------------------------------------ range
  function computeRange() {
    const span = RANGES[state.range];
    const now = Math.floor(Date.now() / 1000);
    // Rollups are hourly: the range is whole hours, up to the end of the current one,
    // and the table and exports use the same range as the figures.
    state.to = Math.floor(now / HOUR) * HOUR + HOUR;
    state.from = Math.floor((now - span) / HOUR) * HOUR;
    state.group = span <= 2 * DAY ? 'hour' : 'day';
    setText('range-label', `${fmtStamp(state.from)} → ${fmtStamp(state.to)} · ${state.group === 'hour' ? 'hourly' : 'daily'}`);
    setText('bucket-1', state.group === 'hour' ? 'per hour' : 'per day');
    setText('bucket-2', state.group === 'hour' ? 'per hour' : 'per day');
  }
  function markRange() {
    for (const b of $('range').querySelectorAll('button')) {
      b.setAttribute('aria-pressed', String(b.dataset.range === state.range));
    }
  }
  function setRange(r) {
    if (!RANGES[r]) return;
    state.range = r;
    localStorage.setItem('tally.range', r);
    markRange();
    computeRange();
    resetPaging();
    loadOverview();
    loadRequests();
    loadEndUsers();
    loadTags();
  }

  // ------------------------------------------------------------------ overview
  let overviewCtl = null;

  async function loadOverview() {
    if (overviewCtl) overviewCtl.abort();
    const ctl = overviewCtl = new AbortController();
    const signal = anySignal(ctl.signal);
    const sec = $('overview');
    sec.dataset.state = 'loading';
    clearTimeout(timers.overview);
    const base = { from: state.from, to: state.to };
    try {
      const [series, byTeam, byKey, byModel] = await Promise.all([
        api('/api/summary', { ...base, group: state.group }, signal),
        api('/api/summary', { ...base, group: 'team', limit: TOP_N }, signal),
        api('/api/summary', { ...base, group: 'key', limit: TOP_N }, signal),
        api('/api/summary', { ...base, group: 'model', limit: TOP_N }, signal),
      ]);
      if (ctl !== overviewCtl) return;
      state.series = series;
      renderKpis(series.totals || {});
      renderCharts(series);
      renderTop($('top-teams'), byTeam.rows || [], 'team');
      renderTop($('top-keys'), byKey.rows || [], 'key');
      renderTop($('top-models'), byModel.rows || [], 'model');
      addOptions($('dl-models'), (byModel.rows || []).map((r) => r.group).filter(Boolean));
      state.lastOverview = Date.now();
      setText('refreshed', 'Updated ' + fmtStamp(Date.now() / 1000, true));
      sec.dataset.range = state.range;
      sec.dataset.from = String(series.from);
      sec.dataset.to = String(series.to);
      sec.dataset.state = 'ready';
      hideBanner();
    } catch (e) {
      if (isAbort(e)) return;
      sec.dataset.state = 'error';
      showBanner('Could not load the overview: ' + e.message, 'error');
    } finally {
      if (ctl === overviewCtl && state.token) {
        timers.overview = setTimeout(() => { computeRange(); loadOverview(); }, OVERVIEW_MS);
      }
    }
  }

  /* A request's signal that also fires when the session ends. */
  function anySignal(signal) {
    const s = state.session && state.session.signal;
    if (!s) return signal;
    if (AbortSignal.any) return AbortSignal.any([signal, s]);
    return signal;
  }

  function renderKpis(t) {
    const kpi = (id, text, value, title) => {
      const el = $(id);
      setText(el, text);
      setData(el, 'value', value);
      el.title = title || '';
    };
    const cost = t.cost_micros ?? 0;
    const est = t.estimated_cost_micros ?? 0;
    kpi('kpi-cost', fmtUSD(cost), cost, `${fmtInt(cost)} micro-dollars reported`);
    const estEl = $('kpi-cost-est');
    setText(estEl, `reported · ${fmtUSD(est)} estimated`);   // below the reported figure
    setTitle(estEl, `${spendText(cost, est)}: ${fmtUSD(cost + est)} charged to budgets`);
    setData(estEl, 'value', est);
    const sub = $('kpi-cost-sub');
    const n = (v, what) => `${fmtInt(v)} ${what}`;
    setText(sub, t.estimated && t.unpriced ? `${n(t.estimated, 'estimated')} · ${n(t.unpriced, 'unpriced')}`
      : t.estimated ? n(t.estimated, 'requests estimated')
        : t.unpriced ? n(t.unpriced, 'unpriced requests') : 'all requests priced');
    setTitle(sub, t.estimated ? `${fmtInt(t.estimated_tokens ?? 0)} tokens estimated in ${fmtInt(t.estimated)} requests` : '');
    kpi('kpi-requests', fmtInt(t.requests ?? 0), t.requests ?? 0);
    setText('kpi-requests-sub', `${fmtInt(t.streams ?? 0)} streamed`);
    kpi('kpi-tokens', fmtCompact(t.total_tokens ?? 0), t.total_tokens ?? 0, `${fmtInt(t.total_tokens ?? 0)} tokens`);
    const audio = (t.audio_input_tokens ?? 0) + (t.audio_output_tokens ?? 0);
    const tokSub = $('kpi-tokens-sub');
    setText(tokSub, `${fmtCompact(t.prompt_tokens ?? 0)} in · ${fmtCompact(t.completion_tokens ?? 0)} out` +
      (t.cached_tokens ? ` · ${fmtCompact(t.cached_tokens)} cached` : '') +
      (audio ? ` · ${fmtCompact(audio)} audio` : '') +
      (t.web_search_calls ? ` · ${fmtCompact(t.web_search_calls)} web searches` : ''));
    setTitle(tokSub, audio ? `audio: ${fmtInt(t.audio_input_tokens ?? 0)} in, ${fmtInt(t.audio_output_tokens ?? 0)} out` : '');
    kpi('kpi-error-rate', t.requests ? fmtPct(t.error_rate ?? 0) : '–', t.error_rate ?? 0);
    const errSub = $('kpi-errors-sub');
    setText(errSub, `${fmtInt(t.errors ?? 0)} errors`);
    setData(errSub, 'value', t.errors ?? 0);
    const lat = t.latency_ms || {};
    // the buckets' range: an interpolated figure inside a bucket claims what they cannot
    const interp = (p) => (p != null ? `estimated ${fmtMs(p)} by interpolation inside the bucket` : '');
    kpi('kpi-p50', fmtBucket(lat.p50_bucket), lat.p50, interp(lat.p50));
    kpi('kpi-p95', fmtBucket(lat.p95_bucket), lat.p95, interp(lat.p95));
    setText('kpi-avg-sub', lat.avg != null ? `avg ${fmtMs(lat.avg)}` : '');
    setText('kpi-p99-sub', lat.p99_bucket ? `p99 ${fmtBucket(lat.p99_bucket)}` : '');
  }

  // ------------------------------------------------------------------ charts
  const charts = {};            // name -> uPlot
  let latencyBuckets = [[], [], []];   // the latency chart's buckets (p50, p95, p99)
  let chartStep = HOUR;

  function seriesData(resp) {
    const step = resp.group === 'day' ? DAY : HOUR;
    const start = Math.floor(resp.from / step) * step;
    const byT = new Map((resp.rows || []).map((r) => [r.group, r]));
    const cols = { x: [], cost: [], charged: [], prompt: [], completion: [], requests: [], errRate: [],
      p50: [], p95: [], p99: [], p50b: [], p95b: [], p99b: [] };
    for (let t = start; t < resp.to; t += step) {
      const r = byT.get(t);
      const lat = (r && r.latency_ms) || {};
      cols.x.push(t);
      cols.cost.push(r ? r.cost_micros / 1e6 : 0);
      cols.charged.push(r ? (r.cost_micros + (r.estimated_cost_micros || 0)) / 1e6 : 0);
      cols.prompt.push(r ? r.prompt_tokens : 0);
      cols.completion.push(r ? r.completion_tokens : 0);
      cols.requests.push(r ? r.requests : 0);
      cols.errRate.push(r && r.requests ? (r.errors / r.requests) * 100 : null);
      for (const q of ['p50', 'p95', 'p99']) {
        cols[q].push(bucketTop(lat[q + '_bucket']));
        cols[q + 'b'].push(lat[q + '_bucket'] ?? null);
      }
    }
    return { step, cols, empty: !(resp.rows && resp.rows.length) };
  }

  function chartOpts(el, series, axes) {
    const muted = cssVar('--muted');
    const grid = cssVar('--grid');
    const font = '11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
    const axis = (extra) => ({
      stroke: muted, font, gap: 4, size: 52,
      grid: { stroke: grid, width: 1 },
      ticks: { stroke: grid, width: 1, size: 4 },
      ...extra,
    });
    return {
      width: Math.max(el.clientWidth, 200),
      height: CHART_H,
      padding: [10, 6, 0, 2],
      cursor: { points: { size: 7 }, drag: { x: true, y: false } },
      legend: { live: true },
      scales: {
        x: { time: true, range: (u, min, max) => [min - chartStep / 2, max + chartStep / 2] },
        ...axes.scales,
      },
      axes: [axis({ size: 42, space: 70 }), ...axes.y.map(axis)],
      series: [{ label: 'Time', value: (u, v) => (v == null ? '–' : fmtStamp(v)) }, ...series],
    };
  }

  function chartDefs() {
    const c1 = cssVar('--c1'), c2 = cssVar('--c2'), c3 = cssVar('--c3'), c4 = cssVar('--c4');
    const bars = uPlot.paths.bars({ size: [0.7, 48], gap: 1 });
    const num = (u, v) => (v == null ? '–' : fmtCompact(v));
    const steps = uPlot.paths.stepped({ align: 1 });
    const bucketValue = (u, v, s, i) => (i == null || v == null ? '–' : fmtBucket(latencyBuckets[s - 1][i]));
    return {
      // The estimate sits on top of the reported bar: the charged total is drawn first,
      // lighter, and the reported bar over it.
      spend: {
        cols: (c) => [c.x, c.charged, c.cost],
        series: [
          { label: 'Estimated', stroke: c3, fill: alpha(c3, 0.55), paths: bars, points: { show: false },
            value: (u, v, si, i) => (i == null ? '–' : fmtUSD(Math.round((u.data[1][i] - u.data[2][i]) * 1e6))) },
          { label: 'Reported', stroke: c1, fill: alpha(c1, 0.75), paths: bars, points: { show: false },
            value: (u, v) => (v == null ? '–' : fmtUSD(Math.round(v * 1e6))) },
        ],
        axes: { y: [{ values: (u, vals) => vals.map(fmtUSDAxis) }] },
      },
      tokens: {
        cols: (c) => [c.x, c.prompt, c.completion],
        series: [
          { label: 'Input', stroke: c1, fill: alpha(c1, 0.12), width: 2, value: num },
          { label: 'Output', stroke: c2, fill: alpha(c2, 0.12), width: 2, value: num },
        ],
        axes: { y: [{ values: (u, vals) => vals.map(fmtCompact) }] },
      },
      requests: {
        cols: (c) => [c.x, c.requests, c.errRate],
        series: [
          { label: 'Requests', stroke: c2, fill: alpha(c2, 0.55), paths: bars, points: { show: false }, value: num },
          { label: 'Error rate', stroke: c4, width: 2, scale: '%', spanGaps: false,
            value: (u, v) => (v == null ? '–' : v.toFixed(2) + '%') },
        ],
        axes: {
          scales: { '%': { range: (u, min, max) => [0, Math.max(5, Math.ceil((max || 0) * 1.15))] } },
          y: [{ values: (u, vals) => vals.map(fmtCompact) },
            { scale: '%', side: 1, grid: { show: false }, values: (u, vals) => vals.map((v) => v + '%') }],
        },
      },
      // each percentile's bucket, plotted at its bound "at most" as steps: the rollups'
      // buckets say no more (an interpolated figure inside one would claim it)
      latency: {
        cols: (c) => { latencyBuckets = [c.p50b, c.p95b, c.p99b]; return [c.x, c.p50, c.p95, c.p99]; },
        series: [
          { label: 'p50', stroke: c2, width: 2, paths: steps, value: bucketValue },
          { label: 'p95', stroke: c3, width: 2, paths: steps, value: bucketValue },
          { label: 'p99', stroke: c4, width: 1.5, dash: [4, 4], paths: steps, value: bucketValue },
        ],
        axes: { scales: { y: { range: (u, min, max) => [0, Math.max(100, (max || 0) * 1.1)] } },
          y: [{ values: (u, vals) => vals.map((v) => (v >= 1000 ? v / 1000 + ' s' : v + ' ms')) }] },
      },
    };
  }

  function renderCharts(resp) {
    if (typeof uPlot === 'undefined') {
      showBanner('The chart library (vendor/uPlot.iife.min.js) did not load.', 'error');
      return;
    }
    const { step, cols, empty } = seriesData(resp);
    chartStep = step;
    const defs = chartDefs();
    for (const [name, def] of Object.entries(defs)) {
      const el = $('chart-' + name);
      const data = def.cols(cols);
      if (charts[name]) {
        charts[name].setData(data);
      } else {
        el.replaceChildren();
        charts[name] = new uPlot(chartOpts(el, def.series, def.axes), data, el);
      }
      let msg = el.querySelector('.empty');
      if (empty && !msg) el.append(h('div', { class: 'empty' }, 'No requests in this range'));
      else if (!empty && msg) msg.remove();
      el.dataset.points = String(data[0].length);
      if (name === 'latency') el.dataset.p95 = JSON.stringify(data[2]);
    }
  }

  function destroyCharts() {
    for (const k of Object.keys(charts)) { charts[k].destroy(); delete charts[k]; }
  }

  const resizeCharts = debounce(() => {
    for (const [name, u] of Object.entries(charts)) {
      const w = $('chart-' + name).clientWidth;
      if (w > 0 && Math.abs(w - u.width) > 1) u.setSize({ width: w, height: CHART_H });
    }
  }, 100);

  // ------------------------------------------------------------------ top lists
  function renderTop(list, rows, kind) {
    if (!rows.length) {
      list.replaceChildren(h('li', { class: 'empty' }, 'No requests in this range'));
      return;
    }
    const maxCost = Math.max(...rows.map((r) => r.cost_micros || 0));
    const maxReq = Math.max(...rows.map((r) => r.requests || 0));
    list.replaceChildren(...rows.map((r) => {
      // an end user's group is its id (its key is the filter's), a tag's the tag
      const name = kind === 'key' ? r.key_name : kind === 'team' ? r.team_name : r.group;
      const share = maxCost > 0 ? (r.cost_micros || 0) / maxCost : (r.requests || 0) / (maxReq || 1);
      const label = name == null || name === '' ? (NO_NAME[kind] || '(none)') : name;
      const est = r.estimated_cost_micros || 0;
      return h('li', {
        'data-testid': 'top-item', 'data-name': name ?? '', 'data-cost': r.cost_micros || 0,
        'data-estimated': est, title: name ? `Show ${label}'s requests` : null,
        onclick: name ? () => applyFilter(kind, name) : null,
      },
      h('span', { class: 'name' + (name ? '' : ' none') }, label),
      h('span', { class: 'cost', title: spendText(r.cost_micros, est) },
        h('span', { class: 'rep' }, fmtUSD(r.cost_micros || 0)),
        est ? h('span', { class: 'est' }, ` + ${fmtUSD(est)} estimated`) : null),
      h('span', { class: 'bar' }, h('span', { style: `width:${Math.max(1, share * 100).toFixed(1)}%` })),
      h('span', { class: 'meta' },
        `${fmtInt(r.requests)} requests · ${fmtCompact(r.total_tokens)} tokens · ${fmtPct(r.error_rate)} errors` +
        (r.latency_ms && r.latency_ms.p95_bucket ? ` · p95 ${fmtBucket(r.latency_ms.p95_bucket)}` : '')));
    }));
  }

  // a group without a name: rows without a key (group 0) or a team (group 0, "no team")
  const NO_NAME = { key: '(no key)', team: '(no team)' };

  function applyFilter(kind, name) {
    $('filter-' + kind).value = name;
    readFilters();
    $('requests').scrollIntoView({ behavior: 'smooth', block: 'start' });
  }

  function addOptions(datalist, names) {
    const have = new Set([...datalist.options].map((o) => o.value));
    for (const n of names) if (!have.has(n)) { datalist.append(h('option', { value: n })); have.add(n); }
  }

  // ------------------------------------------------------------------ live
  async function pollLive() {
    clearTimeout(timers.live);
    if (!state.token) return;
    if (!document.hidden) {
      try {
        renderLive(await api('/api/live', null, state.session && state.session.signal));
      } catch (e) {
        if (isAbort(e)) return;
        renderLive({ agent: 'error', error: e.message });
      }
    }
    if (state.token) timers.live = setTimeout(pollLive, LIVE_MS);
  }

  function renderLive(d) {
    const up = d.agent === 'up';
    const c = (up ? d.counters : d.stored) || {};
    const card = $('live');
    const pill = $('live-pill');
    const st = up ? 'up' : d.agent === 'down' ? 'down' : 'unknown';
    setData(card, 'state', st);
    setData(pill, 'state', st);
    setText('live-pill-text', up ? 'agent up' : d.agent === 'down' ? 'agent down' : 'live: error');
    setTitle(pill, up ? (d.version || 'tally-agent') + (d.uptime_s != null ? ` · up ${fmtUptime(d.uptime_s)}` : '') : (d.error || ''));
    setText('live-agent', up ? 'up' : d.agent === 'down' ? 'down' : 'unknown');
    for (const k of ['received', 'written', 'dropped', 'duplicates', 'unauthenticated', 'pending_overflow']) {
      const el = $('live-' + k);
      setText(el, c[k] == null ? '–' : fmtInt(c[k]));
      setData(el, 'value', c[k]);
    }
    setText('live-queue', up && d.queue_depth != null
      ? `${fmtInt(d.queue_depth)}${d.queue_capacity ? ' / ' + fmtCompact(d.queue_capacity) : ''}` : '–');
    setText('live-inflight', up && d.inflight != null ? fmtInt(d.inflight) : '–');
    const bal = $('live-balance');
    if (c.received != null && c.written != null && c.dropped != null) {
      const pending = c.received - c.written - c.dropped;
      setText(bal, pending === 0 ? 'balanced ✓' : `${fmtInt(pending)} queued`);
      const cls = pending === 0 ? 'val bal-ok' : 'val bal-pending';
      if (bal.className !== cls) bal.className = cls;
      setTitle(bal, 'received = written + dropped' + (pending ? ' once the queue drains' : ''));
    } else {
      setText(bal, '–');
    }
    let note;
    if (up) note = `${d.version || 'tally-agent'}${d.uptime_s != null ? ' · up ' + fmtUptime(d.uptime_s) : ''} · every 2 s`;
    else if (d.agent === 'down') note = 'agent not answering: stored counters' + (c.updated_at ? ' as of ' + fmtStamp(c.updated_at, true) : '');
    else note = d.error || '';
    setText('live-note', note);
  }
  function fmtUptime(s) {
    if (s < 120) return s + ' s';
    if (s < 7200) return Math.floor(s / 60) + ' min';
    if (s < 172800) return Math.floor(s / 3600) + ' h';
    return Math.floor(s / 86400) + ' d';
  }

  // ------------------------------------------------------------------ requests
  let reqCtl = null;

  function filterParams() {
    const f = state.filters;
    return { team: f.team, key: f.key, end_user: f.end_user, tag: f.tag, model: f.model,
      status: f.status, outcome: f.outcome, stream: f.stream };
  }
  function reqParams() { return { from: state.from, to: state.to, ...filterParams() }; }
  function resetPaging() { state.cursors = [null]; state.page = 0; }

  const STATUS_RE = /^([1-5][0-9][0-9]|[1-5]xx)$/i;

  function readFilters() {
    const status = $('filter-status').value.trim().toLowerCase();
    const statusOk = status === '' || STATUS_RE.test(status);
    $('filter-status').classList.toggle('invalid', !statusOk);
    const key = $('filter-key').value.trim();
    const keyOk = key === '' || !state.keyNames || state.keyNames.has(key);
    $('filter-key').classList.toggle('invalid', !keyOk);
    $('filter-key').title = keyOk ? '' : 'No key of this name';
    const team = $('filter-team').value.trim();
    const teamOk = team === '' || !state.teamNames || state.teamNames.has(team);
    $('filter-team').classList.toggle('invalid', !teamOk);
    $('filter-team').title = teamOk ? '' : 'No team of this name';
    const next = {
      team: teamOk ? team : state.filters.team,
      key: keyOk ? key : state.filters.key,
      end_user: $('filter-end_user').value.trim(),
      tag: $('filter-tag').value.trim(),
      model: $('filter-model').value.trim(),
      status: statusOk ? status : state.filters.status,
      outcome: $('filter-outcome').value,
      stream: $('filter-stream').value,
    };
    const changed = Object.keys(next).some((k) => next[k] !== state.filters[k]);
    if (!changed) return;
    const keyChanged = next.key !== state.filters.key;
    state.filters = next;
    resetPaging();
    loadRequests();
    if (keyChanged) { loadEndUsers(); loadTags(); }
  }
  const readFiltersSoon = debounce(readFilters, DEBOUNCE_MS);

  /* The filtered key's end users by spend (none without a key filter: every key's end
   * users may be millions, and ranking them reads the whole rollup). Their rollup is
   * by day, so queryd widens the range to whole UTC days and says which: shown. */
  let endUsersCtl = null;

  async function loadEndUsers() {
    if (endUsersCtl) endUsersCtl.abort();
    const key = state.filters.key;
    const box = $('end-users');
    box.hidden = !key;
    box.dataset.key = key;
    if (!key) {
      endUsersCtl = null;
      box.dataset.state = 'idle';
      return;
    }
    const ctl = endUsersCtl = new AbortController();
    box.dataset.state = 'loading';
    setText('end-users-key', key);
    try {
      const d = await api('/api/summary', { from: state.from, to: state.to, group: 'end_user', key, limit: TOP_N },
        anySignal(ctl.signal));
      if (ctl !== endUsersCtl) return;
      renderTop($('top-end-users'), d.rows || [], 'end_user');
      // the last day's start: to is the end of the last day read
      setText('end-users-range', `by spend · whole UTC days ${fmtDayUTC(d.from)} – ${fmtDayUTC(d.to - DAY)}`);
      box.dataset.from = String(d.from);
      box.dataset.to = String(d.to);
      box.dataset.state = 'ready';
    } catch (e) {
      if (isAbort(e) || ctl !== endUsersCtl) return;
      $('top-end-users').replaceChildren(h('li', { class: 'empty' }, 'Could not load the end users: ' + e.message));
      box.dataset.state = 'error';
    }
  }
  /* The top tags by spend, of the filtered key when there is one (tags are few: the
   * operator's and the clients' labels, not their users). A tag is every key's, so a
   * row is one tag over the keys; a request with several tags counts in each. The
   * rollup is by day: the whole UTC days queryd read are shown. */
  let tagsCtl = null;

  async function loadTags() {
    if (tagsCtl) tagsCtl.abort();
    const key = state.filters.key;
    const box = $('tags');
    const ctl = tagsCtl = new AbortController();
    box.dataset.state = 'loading';
    box.dataset.key = key;
    setText('tags-of', key ? ' of ' + key : '');
    try {
      const d = await api('/api/summary', { from: state.from, to: state.to, group: 'tag', key, limit: TOP_N },
        anySignal(ctl.signal));
      if (ctl !== tagsCtl) return;
      renderTop($('top-tags'), d.rows || [], 'tag');
      setText('tags-range', `by spend · whole UTC days ${fmtDayUTC(d.from)} – ${fmtDayUTC(d.to - DAY)}`);
      box.dataset.from = String(d.from);
      box.dataset.to = String(d.to);
      box.dataset.state = 'ready';
    } catch (e) {
      if (isAbort(e) || ctl !== tagsCtl) return;
      $('top-tags').replaceChildren(h('li', { class: 'empty' }, 'Could not load the tags: ' + e.message));
      box.dataset.state = 'error';
    }
  }
  function fmtDayUTC(sec) {
    const d = new Date(sec * 1000);
    return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}`;
  }

  async function loadRequests() {
    if (reqCtl) reqCtl.abort();
    const ctl = reqCtl = new AbortController();
    const sec = $('requests');
    sec.dataset.state = 'loading';
    $('page-older').disabled = true;
    $('page-newer').disabled = true;
    try {
      const d = await api('/api/requests',
        { ...reqParams(), limit: state.pageSize, before: state.cursors[state.page] }, anySignal(ctl.signal));
      if (ctl !== reqCtl) return;
      const rows = d.requests || [];
      state.cursors.length = state.page + 1;
      if (d.next) state.cursors.push(d.next);
      renderRows(rows);
      const first = state.page * state.pageSize;
      setText('page-info', rows.length
        ? `Page ${state.page + 1} · rows ${fmtInt(first + 1)}–${fmtInt(first + rows.length)}${d.next ? '' : ' · end'}`
        : (state.page ? `Page ${state.page + 1} · no more rows` : 'No rows'));
      $('page-newer').disabled = state.page === 0;
      $('page-latest').disabled = state.page === 0;
      $('page-older').disabled = !d.next;
      sec.dataset.page = String(state.page);
      sec.dataset.rows = String(rows.length);
      sec.dataset.query = qs(filterParams()).slice(1);
      sec.dataset.state = 'ready';
    } catch (e) {
      if (isAbort(e)) return;
      if (ctl !== reqCtl) return;
      $('requests-body').replaceChildren(h('tr', { class: 'table-msg error' },
        h('td', { colspan: 13 }, 'Could not load requests: ' + e.message)));
      setText('page-info', '');
      $('page-newer').disabled = state.page === 0;
      sec.dataset.state = 'error';
    }
  }

  function statusBadge(s) {
    if (s == null) return h('span', { class: 'none' }, '–');
    const cls = s < 300 ? 'ok' : s < 500 ? 'warn' : 'err';
    return h('span', { class: 'badge ' + cls }, String(s));
  }
  function outcomeBadge(o) {
    if (!o) return h('span', { class: 'none' }, '–');
    const cls = o === 'complete' ? 'ok' : o === 'client_abort' ? 'warn' : 'err';
    return h('span', { class: 'badge ' + cls }, o.replace(/_/g, ' '));
  }
  function tokensText(r) {
    if (r.prompt_tokens == null && r.completion_tokens == null) return '–';
    // a count the provider did not report is unknown, not 0
    const n = (v) => (v == null ? '?' : fmtInt(v));
    return `${n(r.prompt_tokens)} → ${n(r.completion_tokens)}`;
  }
  /* The reported cost, and beside it the estimate of what the provider did not report. */
  function costCell(r) {
    const unpriced = r.prompt_tokens != null || r.completion_tokens != null;
    const reported = r.cost_micros != null ? h('span', { class: 'rep' }, fmtUSD(r.cost_micros))
      : h('span', { class: 'rep none' }, unpriced ? 'unpriced' : '–');
    const title = [r.cost_micros != null ? `${fmtInt(r.cost_micros)} micro-dollars reported` : null];
    let est = null;
    if (r.estimated_tokens != null) {
      est = h('span', { class: 'est' }, ` + ${r.estimated_cost_micros != null ? fmtUSD(r.estimated_cost_micros) : 'unpriced'} est.`);
      title.push(`estimated: ${fmtInt(r.estimated_tokens)} tokens` +
        (r.estimated_cost_micros != null ? `, ${fmtInt(r.estimated_cost_micros)} micro-dollars` : ', unpriced'));
    }
    return h('td', { class: 'r', title: title.filter(Boolean).join('; ') || null }, reported, est);
  }
  const orNone = (v) => (v == null || v === '' ? h('span', { class: 'none' }, '–') : String(v));

  function renderRows(rows) {
    const body = $('requests-body');
    if (!rows.length) {
      body.replaceChildren(h('tr', { class: 'table-msg' }, h('td', { colspan: 13 },
        state.page ? 'No older rows.' : 'No requests match this range and these filters.')));
      return;
    }
    const frag = document.createDocumentFragment();
    for (const r of rows) {
      frag.append(h('tr', {
        class: 'row', tabindex: 0, 'data-testid': 'request-row', 'data-request-id': r.request_id,
        onclick: () => openDrawer(r.request_id),
        onkeydown: (ev) => { if (ev.key === 'Enter') openDrawer(r.request_id); },
      },
      h('td', { title: r.started_at != null ? new Date(r.started_at).toISOString() : null }, fmtTimeMs(r.started_at)),
      h('td', { class: 'id', title: r.request_id }, r.request_id),
      h('td', null, r.key_name != null ? r.key_name : h('span', { class: 'none' }, r.key_id ? '#' + r.key_id : '–')),
      h('td', { class: 'eu', title: r.end_user }, orNone(r.end_user)),
      h('td', { class: 'tags', title: r.tags }, orNone(r.tags && r.tags.replaceAll(',', ', '))),
      h('td', { title: r.model_requested && r.model_requested !== r.model ? 'requested ' + r.model_requested : null }, orNone(r.model || r.model_requested)),
      h('td', null, orNone(r.provider)),
      h('td', null, statusBadge(r.status)),
      h('td', null, outcomeBadge(r.outcome)),
      h('td', null, r.stream == null ? h('span', { class: 'none' }, '–') : r.stream ? 'stream' : 'unary'),
      h('td', { class: 'r' }, tokensText(r)),
      costCell(r),
      h('td', { class: 'r' }, fmtMs(r.duration_ms))));
    }
    body.replaceChildren(frag);
  }

  // ------------------------------------------------------------------ drawer
  let drawerCtl = null;

  async function openDrawer(id) {
    if (drawerCtl) drawerCtl.abort();
    const ctl = drawerCtl = new AbortController();
    const drawer = $('drawer');
    const body = $('drawer-body');
    body.replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
    drawer.dataset.requestId = id;
    drawer.dataset.state = 'loading';
    drawer.hidden = false;
    $('drawer-backdrop').hidden = false;
    try {
      const d = await api('/api/requests/' + encodeURIComponent(id), null, anySignal(ctl.signal));
      if (ctl !== drawerCtl) return;
      renderDrawer(d.request || {});
      drawer.dataset.state = 'ready';
    } catch (e) {
      if (isAbort(e)) return;
      body.replaceChildren(h('p', { class: 'login-error' },
        e.status === 404 ? 'This request is not in the database.' : 'Could not load the request: ' + e.message));
      drawer.dataset.state = 'error';
    }
  }

  /* Request columns of the classes priced apart (docs/pricing.md), each part of a count. */
  const CLASS_FIELDS = [
    ['Cache creation (1 h)', 'cache_creation_1h_tokens'],
    ['Audio input tokens', 'audio_input_tokens'],
    ['Audio output tokens', 'audio_output_tokens'],
    ['Accepted prediction', 'accepted_prediction_tokens'],
    ['Rejected prediction', 'rejected_prediction_tokens'],
    ['Web searches', 'web_search_calls'],
  ];

  function renderDrawer(r) {
    const shown = new Set();
    const field = (label, key, fmt) => {
      shown.add(key);
      const v = r[key];
      return [h('dt', null, label), h('dd', { 'data-field': key }, v == null ? h('span', { class: 'none' }, '–') : fmt ? fmt(v) : String(v))];
    };
    const group = (title, items) => [h('h3', null, title), h('dl', null, ...items.flat())];
    const tok = (v) => fmtInt(v);
    const msExact = (v) => (v < 1000 ? fmtMs(v) : `${fmtMs(v)} (${fmtInt(v)} ms)`);
    const parts = [
      ...group('Request', [
        field('Request id', 'request_id', (v) => h('span', { class: 'mono' }, v)),
        field('Started', 'started_at', (v) => h('span', null, fmtTimeMs(v), h('div', { class: 'muted small' }, new Date(v).toISOString()))),
        field('Key', 'key_name'),
        field('Key id', 'key_id'),
        field('Team', 'team_name'),
        field('Team id', 'team_id'),
        field('End user', 'end_user', (v) => h('span', { class: 'mono' }, v)),
        field('Tags', 'tags', (v) => h('span', { class: 'mono' }, v.replaceAll(',', ', '))),
        field('Model', 'model'),
        field('Model requested', 'model_requested'),
        field('Provider', 'provider'),
        field('Verdict', 'verdict'),
      ]),
      ...group('Result', [
        field('Status', 'status', statusBadge),
        field('Outcome', 'outcome', outcomeBadge),
        field('Stream', 'stream', (v) => (v ? 'yes' : 'no')),
        field('Usage from', 'usage_source'),
        field('Termination', 'termination', (v) => h('span', { class: 'mono' }, v)),
        ...(r.service_tier != null ? [field('Service tier', 'service_tier')] : []),
      ]),
      ...group('Usage', [
        field('Prompt tokens', 'prompt_tokens', tok),
        field('Completion tokens', 'completion_tokens', tok),
        field('Cached tokens', 'cached_tokens', tok),
        field('Cache creation', 'cache_creation_tokens', tok),
        field('Reasoning tokens', 'reasoning_tokens', tok),
        // the classes priced apart, only those the provider reported
        ...CLASS_FIELDS.filter(([, key]) => r[key] != null).map(([label, key]) => field(label, key, tok)),
        field('Cost', 'cost_micros', (v) => `${fmtUSD(v)}  (${fmtInt(v)} µ$)`),
        // estimates only when the agent made one: what the provider did not report
        ...(r.estimated_tokens != null ? [
          field('Estimated tokens', 'estimated_tokens', tok),
          field('Estimated cost', 'estimated_cost_micros', (v) => `${fmtUSD(v)}  (${fmtInt(v)} µ$)`),
        ] : []),
      ]),
      ...group('Timing', [
        field('Duration', 'duration_ms', msExact),
        field('Time to first byte', 'ttfb_ms', msExact),
        field('Bytes in', 'bytes_in', fmtBytes),
        field('Bytes out', 'bytes_out', fmtBytes),
      ]),
    ];
    shown.add('estimated_tokens').add('estimated_cost_micros').add('service_tier');
    for (const [, key] of CLASS_FIELDS) shown.add(key);
    const rest = Object.keys(r).filter((k) => !shown.has(k));
    if (rest.length) parts.push(...group('Other', rest.map((k) => field(k, k, (v) => JSON.stringify(v)))));
    $('drawer-body').replaceChildren(...parts);
  }

  function closeDrawer() {
    if (drawerCtl) drawerCtl.abort();
    drawerCtl = null;
    $('drawer').hidden = true;
    $('drawer-backdrop').hidden = true;
  }

  // ------------------------------------------------------------------ keys, teams, models
  /* The team filter's names (checked as the key filter's are) and their suggestions. */
  async function loadTeams() {
    try {
      const d = await api('/api/teams', null, state.session && state.session.signal);
      const names = (d.teams || []).map((t) => t.name);
      state.teamNames = new Set(names);
      addOptions($('dl-teams'), names);
    } catch (e) {
      if (isAbort(e)) return;
      state.teamNames = null;   // unchecked: queryd refuses an unknown name itself
    }
  }

  async function loadKeys() {
    try {
      const d = await api('/api/keys', null, state.session && state.session.signal);
      renderKeys(d.keys || []);
    } catch (e) {
      if (isAbort(e)) return;
      $('keys-body').replaceChildren(h('tr', { class: 'table-msg error' }, h('td', { colspan: 10 }, 'Could not load keys: ' + e.message)));
    }
  }

  function renderKeys(keys) {
    state.keyNames = new Set(keys.map((k) => k.name));
    addOptions($('dl-keys'), keys.map((k) => k.name));
    if (!keys.length) {
      $('keys-body').replaceChildren(h('tr', { class: 'table-msg' }, h('td', { colspan: 10 },
        'No keys yet: tallyctl key create NAME')));
      return;
    }
    const lim = (v) => (v == null ? h('span', { class: 'none' }, '–') : fmtInt(v));
    $('keys-body').replaceChildren(...keys.map((k) => {
      const l = k.limits || {};
      const s = k.spend || {};
      const period = s.period || l.budget_period || 'month';
      // A budget in a stated zone (limits.time_zone) names it: its "today" is the zone's.
      const zone = l.time_zone && l.time_zone !== 'UTC' && period !== 'total' ? ` (${l.time_zone})` : '';
      const periodName = ({ total: 'in total', day: 'today', week: 'this week' }[period] || 'this month') + zone;
      // The budget is charged reported + estimated spend (charged_micros), as the agent counts it.
      const charged = s.charged_micros ?? 0;
      const split = h('span', { class: 'txt split', 'data-testid': 'key-spend' }, spendText(s.cost_micros, s.estimated_cost_micros));
      let budget;
      if (l.budget_micros) {
        const used = charged / l.budget_micros;
        const cls = 'budget' + (used >= 1 ? ' over' : used >= 0.8 ? ' warn' : '');
        budget = h('div', { class: cls, title: `${(used * 100).toFixed(1)}% of the budget charged ${periodName}` },
          h('div', { class: 'track' }, h('span', { style: `width:${Math.min(100, used * 100).toFixed(1)}%` })),
          h('span', { class: 'txt' }, `${fmtUSD(charged)} of ${fmtUSD(l.budget_micros)} charged ${periodName}`), split);
      } else {
        budget = h('span', { class: 'budget' }, h('span', { class: 'txt' }, `${fmtUSD(charged)} charged ${periodName}`),
          split, h('span', { class: 'txt none' }, 'no budget'));
      }
      const models = k.models && k.models.length ? k.models.join(', ') : 'all models';
      return h('tr', { 'data-testid': 'key-row', 'data-name': k.name, 'data-cost': s.cost_micros ?? 0,
        'data-estimated': s.estimated_cost_micros ?? 0, 'data-charged': charged },
        h('td', null, h('strong', null, k.name), k.default_model ? h('div', { class: 'muted small' }, 'default ' + k.default_model) : null),
        h('td', { class: 'mono' }, k.prefix || ''),
        h('td', { class: k.models && k.models.length ? '' : 'none', title: models }, models.length > 40 ? models.slice(0, 38) + '…' : models),
        h('td', { class: 'r' }, lim(l.rpm)),
        h('td', { class: 'r' }, lim(l.tpm)),
        h('td', { class: 'r' }, lim(l.max_concurrent)),
        h('td', null, budget),
        h('td', { class: 'r' }, fmtInt(s.requests ?? 0)),
        h('td', { class: 'r' }, fmtCompact(s.total_tokens ?? 0)),
        h('td', null, k.revoked_at ? h('span', { class: 'badge err', title: 'revoked ' + fmtStamp(k.revoked_at) }, 'revoked')
          : h('span', { class: 'badge ok' }, 'active')));
    }));
  }

  async function loadModels() {
    try {
      const d = await api('/api/models', null, state.session && state.session.signal);
      renderModels(d.models || []);
    } catch (e) {
      if (isAbort(e)) return;
      $('models-body').replaceChildren(h('tr', { class: 'table-msg error' }, h('td', { colspan: 13 }, 'Could not load models: ' + e.message)));
    }
  }

  /* A rate card's prices, short names first: [label, text] for each price it has. */
  const CARD_PRICES = [
    ['in', 'input_micros_per_mtok'], ['cached', 'cached_micros_per_mtok'],
    ['cache write', 'cache_write_micros_per_mtok'], ['cache write 1 h', 'cache_write_1h_micros_per_mtok'],
    ['out', 'output_micros_per_mtok'], ['reasoning', 'reasoning_micros_per_mtok'],
    ['audio in', 'audio_input_micros_per_mtok'], ['audio out', 'audio_output_micros_per_mtok'],
  ];
  function cardPrices(c) {
    const out = CARD_PRICES.filter(([, k]) => c[k] != null).map(([label, k]) => `${label} ${fmtUSD(c[k])}`);
    if (c.web_search_micros_per_call != null) out.push(`web search ${fmtUSD(c.web_search_micros_per_call)}/call`);
    return out.join(' · ') || 'no prices';
  }
  function cardName(c) {
    return c.tier + (c.above_tokens ? ` above ${fmtInt(c.above_tokens)} tokens` : '');
  }

  function renderModels(models) {
    addOptions($('dl-models'), models.map((m) => m.name));
    if (!models.length) {
      $('models-body').replaceChildren(h('tr', { class: 'table-msg' }, h('td', { colspan: 13 },
        'No models yet: tallyctl model set NAME --provider P')));
      return;
    }
    const price = (v) => (v == null ? h('span', { class: 'none', title: 'unknown: usage is stored unpriced' }, 'unset') : fmtUSD(v));
    $('models-body').replaceChildren(...models.map((m) => {
      const cards = m.prices || [];
      // the columns show the card of a request of any size at no tier in particular
      const main = cards.find((c) => c.tier === 'default' && c.above_tokens === 0);
      const p = main || {};
      const u = m.month || {};
      const others = cards.filter((c) => c !== main);
      return h('tr', { 'data-testid': 'model-row', 'data-name': m.name, title: main ? 'default: ' + cardPrices(main) : null },
        h('td', null, h('strong', null, m.name)),
        h('td', null, orNone(m.provider)),
        h('td', null, orNone(m.api)),
        h('td', { class: 'r' }, price(p.input_micros_per_mtok)),
        h('td', { class: 'r' }, price(p.output_micros_per_mtok)),
        h('td', { class: 'r' }, price(p.cached_micros_per_mtok)),
        h('td', { class: 'r' }, price(p.cache_write_micros_per_mtok)),
        h('td', { class: 'r', 'data-field': 'web-search' }, p.web_search_micros_per_call != null
          ? fmtUSD(p.web_search_micros_per_call) : h('span', { class: 'none', title: 'no price: requests that offer a web search are refused' }, 'unset')),
        h('td', { class: 'cards', 'data-field': 'cards' }, ...(others.length ? others.map((c) =>
          h('div', { 'data-testid': 'model-card', 'data-tier': c.tier, 'data-above': c.above_tokens },
            h('span', { class: 'card-name' }, cardName(c)), ' ', h('span', { class: 'muted' }, cardPrices(c))))
          : [h('span', { class: 'none' }, '–')])),
        h('td', { class: 'r' }, fmtInt(u.requests ?? 0)),
        h('td', { class: 'r' }, fmtCompact(u.total_tokens ?? 0)),
        h('td', { class: 'r', 'data-field': 'cost' }, fmtUSD(u.cost_micros ?? 0)),
        h('td', { class: 'r', 'data-field': 'estimated' }, fmtUSD(u.estimated_cost_micros ?? 0)));
    }));
  }

  // ------------------------------------------------------------------ export
  /* Downloads /api/export for the range and filters. The API wants the token in a
   * header, so a plain link cannot do: where the browser can write a stream to a file
   * (File System Access API) the answer goes there as it arrives; elsewhere it is
   * collected into a Blob first. */
  async function exportRows(format) {
    const params = { ...reqParams(), format };
    const name = `tally-${state.from}-${state.to}.${format === 'csv' ? 'csv' : 'ndjson'}`;
    let handle = null;
    if (typeof window.showSaveFilePicker === 'function') {
      try {
        handle = await window.showSaveFilePicker({ suggestedName: name });
      } catch (e) {
        if (e.name === 'AbortError') return;   // the operator cancelled
        handle = null;
      }
    }
    toast(`Exporting ${format.toUpperCase()}…`);
    try {
      const res = await fetch('/api/export' + qs(params), { headers: authHeaders(), cache: 'no-store' });
      if (res.status === 401) { signOut('The operator token was refused (401). Sign in again.'); return; }
      if (!res.ok) {
        let msg = `HTTP ${res.status}`;
        try { msg = (await res.json()).error || msg; } catch (_) { /* not JSON */ }
        throw new Error(msg);
      }
      if (handle) {
        const w = await handle.createWritable();
        await res.body.pipeTo(w);
      } else {
        const blob = await res.blob();
        const url = URL.createObjectURL(blob);
        const a = h('a', { href: url, download: name, hidden: true });
        document.body.append(a);
        a.click();
        a.remove();
        setTimeout(() => URL.revokeObjectURL(url), 60000);
      }
      toast(`Exported ${name}`, '', 3000);
    } catch (e) {
      toast('Export failed: ' + e.message, 'error', 8000);
    }
  }

  let toastTimer = null;
  function toast(msg, kind, ms) {
    const t = $('toast');
    clearTimeout(toastTimer);
    t.className = 'toast' + (kind ? ' ' + kind : '');
    t.textContent = msg;
    t.hidden = false;
    if (ms) toastTimer = setTimeout(() => { t.hidden = true; }, ms);
  }

  // ------------------------------------------------------------------ theme
  function applyTheme(t) {
    document.documentElement.dataset.theme = t;
  }
  function toggleTheme() {
    const t = document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark';
    localStorage.setItem('tally.theme', t);
    applyTheme(t);
    if (state.series) { destroyCharts(); renderCharts(state.series); }
  }

  // ------------------------------------------------------------------ wiring
  function wire() {
    $('login-form').addEventListener('submit', onLogin);
    $('filters').addEventListener('submit', (ev) => { ev.preventDefault(); readFilters(); });
    $('logout').addEventListener('click', () => signOut('Signed out.'));
    $('refresh').addEventListener('click', refreshAll);
    $('theme-toggle').addEventListener('click', toggleTheme);
    $('range').addEventListener('click', (ev) => {
      const b = ev.target.closest('button[data-range]');
      if (b) setRange(b.dataset.range);
    });
    for (const id of ['filter-team', 'filter-key', 'filter-end_user', 'filter-tag', 'filter-model', 'filter-status']) {
      $(id).addEventListener('input', readFiltersSoon);
      $(id).addEventListener('change', readFilters);   // datalist pick, Enter
    }
    for (const id of ['filter-outcome', 'filter-stream']) $(id).addEventListener('change', readFilters);
    $('filter-clear').addEventListener('click', () => {
      for (const id of ['filter-team', 'filter-key', 'filter-end_user', 'filter-tag', 'filter-model', 'filter-status']) $(id).value = '';
      $('filter-outcome').value = '';
      $('filter-stream').value = '';
      readFilters();
    });
    $('page-size').addEventListener('change', () => {
      state.pageSize = Number($('page-size').value);
      resetPaging();
      loadRequests();
    });
    $('page-older').addEventListener('click', () => {
      if (state.cursors.length > state.page + 1) { state.page++; loadRequests(); }
    });
    $('page-newer').addEventListener('click', () => {
      if (state.page > 0) { state.page--; loadRequests(); }
    });
    $('page-latest').addEventListener('click', () => { resetPaging(); loadRequests(); });
    $('export-csv').addEventListener('click', () => exportRows('csv'));
    $('export-ndjson').addEventListener('click', () => exportRows('ndjson'));
    $('drawer-close').addEventListener('click', closeDrawer);
    $('drawer-backdrop').addEventListener('click', closeDrawer);
    document.addEventListener('keydown', (ev) => { if (ev.key === 'Escape' && !$('drawer').hidden) closeDrawer(); });
    document.addEventListener('visibilitychange', () => {
      if (document.hidden || !state.token) return;
      pollLive();
      if (Date.now() - state.lastOverview > OVERVIEW_MS) { computeRange(); loadOverview(); }
    });
    if (typeof ResizeObserver === 'function') {
      const ro = new ResizeObserver(resizeCharts);
      for (const n of ['spend', 'tokens', 'requests', 'latency']) ro.observe($('chart-' + n));
    } else {
      window.addEventListener('resize', resizeCharts);
    }
  }

  function boot() {
    const saved = localStorage.getItem('tally.theme');
    applyTheme(saved || (window.matchMedia && matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light'));
    state.pageSize = Number($('page-size').value) || 50;
    wire();
    checkHealth();
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) startApp(token, null);
    else showLogin('');
  }

  boot();
})();
