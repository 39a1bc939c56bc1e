// The clawfed web fleet view: a small ES module, no dependencies.
//
// - Sign-in: an API token, kept in this tab's sessionStorage and sent only
//   as an `Authorization: Bearer` header (never in a URL, never logged).
// - Initial state from the REST list endpoints; then live over the SSE
//   watch (`GET /api/v1/watch`), read with fetch() because EventSource
//   cannot send an Authorization header. A `relist` event (or a 410 for a
//   stale cursor) re-fetches the lists; a dropped stream resumes from the
//   last cursor.
// - Everything from the hub is rendered with text nodes (`append(string)`,
//   `textContent`), never as HTML: names, labels and reasons are data.

const TOKEN_KEY = 'clawfed.token';
const REFRESH_MS = 250;
const BACKOFF_MAX_MS = 15000;

const $ = (id) => document.getElementById(id);

const state = {
  token: null,
  gen: 0, // bumped on sign-in/out: stale loops and fetches stop
  abort: null,
  cursor: null,
  needList: true,
  loaded: false,
  clusters: new Map(), // name -> cluster (+ certificateExpiresAt, changedAt)
  tenants: new Map(), // name -> namespace
  quotas: new Map(), // tenant name -> its quotas (limits and use), or null
  agents: new Map(), // "ns/name" -> { ns, agent, revision, asOf }
  work: null, // failed work items, or null when not readable
  fleet: null,
  detail: null, // the Agent page: { ns, name, agent, tenant, revisions: Map, error }
  events: 0,
  eventNamespaces: new Set(),
  refresh: new Set(),
  refreshTimer: null,
  renderQueued: false,
  firstRender: false,
};

// ---------------------------------------------------------------- DOM

/** An element with attributes and children; strings become text nodes. */
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function table(caption, headers, rows, empty) {
  if (rows.length === 0) return el('p', { class: 'empty' }, empty);
  return el('table', { 'aria-label': caption },
    el('thead', {}, el('tr', {}, headers.map((h) => el('th', { scope: 'col' }, h)))),
    el('tbody', {}, rows));
}

function badge(text, tone) {
  return el('span', { class: `badge ${tone}` }, text);
}

const PHASE_TONE = {
  active: 'ok', failed: 'bad', stopped: 'idle', retired: 'idle', stopping: 'warn',
  pending: 'warn', provisioning: 'warn', preparing: 'warn', 'waiting-ready': 'warn',
};
const phaseBadge = (p) => (p ? badge(p, PHASE_TONE[p] || 'idle') : badge('not deployed', 'idle'));
const STATE_TONE = { online: 'ok', offline: 'bad', revoked: 'bad', pending: 'warn' };

// A cluster that takes no new revisions: `draining` while a drain runs,
// else `cordoned` (none when it is schedulable).
function schedulingBadge(c) {
  if (c.drain && !c.drain.finishedAt) return [' ', badge('draining', 'warn')];
  if (c.cordonedAt) return [' ', badge('cordoned', 'warn')];
  return [];
}

// `bytes` in the largest binary unit that keeps it readable (`1.5Gi`), as
// the CLI prints it (clawfed_proto::capacity::human_bytes).
function humanBytes(bytes) {
  let value = bytes;
  let unit = '';
  for (const u of ['Ki', 'Mi', 'Gi', 'Ti', 'Pi']) {
    if (Math.abs(value) < 1024) break;
    value /= 1024;
    unit = u;
  }
  return unit ? value.toFixed(1).replace(/\.0$/, '') + unit : String(bytes);
}

// What a cluster's spoke last reported free for new Harnesses
// (`cpu 500m, memory 1Gi`, as the CLI's FREE column); `-` before a report.
function freeCapacity(c) {
  const free = c.capacity && c.capacity.free;
  return free ? `cpu ${free.cpuMillis}m, memory ${humanBytes(free.memoryBytes)}` : '-';
}

function fmtTime(s) {
  if (!s) return '-';
  const d = new Date(s);
  if (Number.isNaN(d.getTime())) return String(s);
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

function fmtRelative(s) {
  if (!s) return '';
  const ms = new Date(s).getTime() - Date.now();
  const abs = Math.abs(ms);
  const [n, unit] = abs < 90e3 ? [abs / 1e3, 's'] : abs < 90 * 60e3 ? [abs / 60e3, 'min']
    : abs < 48 * 3600e3 ? [abs / 3600e3, 'h'] : [abs / 86400e3, 'd'];
  const v = `${Math.round(n)} ${unit}`;
  return ms >= 0 ? `in ${v}` : `${v} ago`;
}

function fmtMs(ms) {
  return ms >= 1000 ? `${(ms / 1000).toFixed(1)} s` : `${ms} ms`;
}

const words = (k) => k.replace(/([A-Z])/g, ' $1').toLowerCase();
const enc = encodeURIComponent;
const agentHref = (ns, name) => `#/agent/${enc(ns)}/${enc(name)}`;

// ---------------------------------------------------------------- API

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/**
 * GETs `path` for the sign-in `gen` (the caller's, captured when its work
 * began): a continuation that outlives a sign-out sends nothing, rather
 * than a request with no token or the next session's.
 */
async function api(path, gen) {
  if (gen !== state.gen) throw new HttpError(0, 'signed out');
  const res = await fetch(`/api/v1${path}`, {
    headers: { Authorization: `Bearer ${state.token}`, Accept: 'application/json' },
    cache: 'no-store',
  });
  if (gen !== state.gen) throw new HttpError(0, 'signed out');
  if (!res.ok) {
    let message = `${res.status} ${res.statusText}`;
    try {
      const body = await res.json();
      if (body && body.error && body.error.message) message = body.error.message;
    } catch { /* not JSON */ }
    if (res.status === 401) signOut('The hub refused the token (401). Sign in again.');
    throw new HttpError(res.status, message);
  }
  const body = await res.json();
  if (gen !== state.gen) throw new HttpError(0, 'signed out');
  return body;
}

/** `p`, or `fallback` when the token may not read it (403). */
const readable = (p, fallback) => p.catch((e) => (e.status === 403 ? fallback : Promise.reject(e)));

// ---------------------------------------------------------------- state

async function loadAgents(namespaces, gen) {
  const lists = await Promise.all(namespaces.map((ns) => api(`/namespaces/${enc(ns.name)}/agents`, gen)
    .then((l) => l.items.map((agent) => ({ ns: ns.name, agent })))
    .catch((e) => (e.status === 404 ? [] : Promise.reject(e)))));
  const found = lists.flat();
  const revisions = await Promise.all(found.map(({ ns, agent }) => (agent.latestRevision
    ? api(`/namespaces/${enc(ns)}/agents/${enc(agent.name)}/revisions/${agent.latestRevision}`, gen)
      .catch(() => null)
    : null)));
  // A revision missed for a sign-out was caught above: keep nothing of it.
  if (gen !== state.gen) throw new HttpError(0, 'signed out');
  return found.map((f, i) => ({ ...f, revision: revisions[i] }));
}

/** Merges a listed Agent, unless an event newer than the listing was applied. */
function mergeAgent(fresh) {
  const key = `${fresh.ns}/${fresh.agent.name}`;
  const asOf = fresh.revision ? fresh.revision.updatedAt : fresh.agent.updatedAt;
  const old = state.agents.get(key);
  if (old && old.asOf && asOf && new Date(old.asOf) > new Date(asOf)) {
    old.agent = fresh.agent;
    return;
  }
  state.agents.set(key, { ...fresh, asOf, changedAt: old ? old.changedAt : undefined });
}

function mergeClusters(list, replace) {
  const names = new Set();
  for (const c of list) {
    names.add(c.name);
    const old = state.clusters.get(c.name);
    if (old && !replace) {
      // Connection state comes from events (newer than any listing in
      // flight); the listing adds what events do not carry.
      old.outboxDepth = c.outboxDepth;
      old.cordonedAt = c.cordonedAt;
      old.drain = c.drain;
      old.capacity = c.capacity;
      if (c.certificateExpiresAt) old.certificateExpiresAt = c.certificateExpiresAt;
      if (c.lastSeen && (!old.lastSeen || new Date(c.lastSeen) > new Date(old.lastSeen))) {
        old.lastSeen = c.lastSeen;
      }
    } else {
      state.clusters.set(c.name, {
        ...c,
        certificateExpiresAt: c.certificateExpiresAt || (old && old.certificateExpiresAt),
        changedAt: old ? old.changedAt : undefined,
      });
    }
  }
  if (replace) for (const n of [...state.clusters.keys()]) if (!names.has(n)) state.clusters.delete(n);
}

/** Each tenant's quotas (`null` where the token may not read them). */
async function loadQuotas(tenants, gen) {
  const got = await Promise.all(tenants.map((t) => readable(api(`/namespaces/${enc(t)}/quota`, gen), null)
    .catch((e) => (e.status === 404 ? null : Promise.reject(e)))));
  return new Map(tenants.map((t, i) => [t, got[i]]));
}

const QUOTA_LABEL = {
  agents: 'agents', runningAgents: 'running', revisionsPerHour: 'revisions/h', credentials: 'credentials',
};

/** "agents 2/5, running 1/1, revisions/h 3, credentials 0": use/limit, or use alone without a limit. */
const quotaSummary = (q) => (q
  ? q.items.map((i) => `${QUOTA_LABEL[i.name] || i.name} ${i.used}${i.limit === undefined || i.limit === null ? '' : `/${i.limit}`}`).join(', ')
  : '-');

/** True when some quota of `q` is used up. */
const quotaFull = (q) => !!q && q.items.some((i) => i.limit !== undefined && i.limit !== null && i.used >= i.limit);

async function loadAll(gen) {
  const [clusters, namespaces, work, fleet] = await Promise.all([
    readable(api('/clusters', gen), { items: [] }),
    api('/namespaces', gen),
    readable(api('/work?state=failed&limit=50', gen), null),
    readable(api('/fleet', gen), null),
  ]);
  const agents = await loadAgents(namespaces.items, gen);
  mergeClusters(clusters.items, true);
  state.tenants = new Map(namespaces.items.map((n) => [n.name, n]));
  state.quotas = await loadQuotas([...state.tenants.keys()], gen);
  state.agents = new Map();
  agents.forEach(mergeAgent);
  state.work = work ? work.items : null;
  state.fleet = fleet;
  state.loaded = true;
  if (state.detail) await loadDetail(gen);
}

async function loadDetail(gen) {
  const d = state.detail;
  if (!d) return;
  try {
    const [agent, revisions, tenant] = await Promise.all([
      api(`/namespaces/${enc(d.ns)}/agents/${enc(d.name)}`, gen),
      api(`/namespaces/${enc(d.ns)}/agents/${enc(d.name)}/revisions`, gen),
      api(`/namespaces/${enc(d.ns)}`, gen),
    ]);
    if (state.detail !== d) return;
    d.agent = agent;
    d.tenant = tenant;
    d.revisions = new Map(revisions.items.map((r) => [r.number, r]));
    d.error = null;
  } catch (e) {
    if (state.detail === d) d.error = e.message;
  }
}

/** Re-fetches parts of the state a little later, coalesced. */
function scheduleRefresh(...what) {
  what.forEach((w) => state.refresh.add(w));
  // Set while a refresh is due or running: the page has settled without it.
  document.body.dataset.refreshing = '1';
  if (state.refreshTimer) return;
  const gen = state.gen;
  state.refreshTimer = setTimeout(async () => {
    state.refreshTimer = null;
    if (gen !== state.gen) return;
    const parts = new Set(state.refresh);
    state.refresh.clear();
    try {
      const jobs = [];
      if (parts.has('clusters')) jobs.push(readable(api('/clusters', gen), { items: [] }).then((l) => mergeClusters(l.items, false)));
      if (parts.has('fleet')) jobs.push(readable(api('/fleet', gen), null).then((f) => { state.fleet = f; }));
      if (parts.has('work')) jobs.push(readable(api('/work?state=failed&limit=50', gen), null).then((w) => { state.work = w ? w.items : null; }));
      if (parts.has('agents')) {
        jobs.push(api('/namespaces', gen).then(async (n) => {
          n.items.forEach((t) => state.tenants.set(t.name, t));
          (await loadAgents(n.items, gen)).forEach(mergeAgent);
        }));
      }
      if (parts.has('quotas')) {
        jobs.push(loadQuotas([...state.tenants.keys()], gen).then((q) => { state.quotas = q; }));
      }
      if (parts.has('detail')) jobs.push(loadDetail(gen));
      await Promise.all(jobs);
    } catch (e) {
      if (gen === state.gen) console.warn('clawfed: refresh failed:', e.message);
    }
    if (gen === state.gen) queueRender();
    if (!state.refreshTimer && state.refresh.size === 0) delete document.body.dataset.refreshing;
  }, REFRESH_MS);
}

function applyEvent(ev) {
  state.cursor = ev.cursor;
  state.events += 1;
  if (ev.namespace) state.eventNamespaces.add(ev.namespace);
  const b = ev.body || {};
  switch (ev.kind) {
    case 'cluster.connected':
    case 'cluster.offline':
    case 'cluster.revoked': {
      const c = state.clusters.get(ev.cluster) || { name: ev.cluster };
      if (c.connectionState !== b.state) c.changedAt = Date.now();
      Object.assign(c, {
        connectionState: b.state,
        lastSeen: b.lastSeen,
        version: b.version,
        capabilities: b.capabilities,
        certificateExpiresAt: b.certificateExpiresAt,
      });
      state.clusters.set(ev.cluster, c);
      scheduleRefresh('clusters', 'fleet');
      break;
    }
    case 'cluster.scheduling': {
      const c = state.clusters.get(ev.cluster);
      if (c) {
        c.cordonedAt = b.cordonedAt;
        // The drain's record comes with the listing; until then a
        // running one is marked as such.
        c.drain = b.draining ? Object.assign({}, c.drain, { finishedAt: null }) : c.drain;
      }
      scheduleRefresh('clusters');
      break;
    }
    case 'revision.phase': {
      // A deploy, a stop or a new Agent changes what the tenant uses.
      scheduleRefresh('quotas');
      const entry = state.agents.get(`${ev.namespace}/${b.agent}`);
      if (!entry) {
        scheduleRefresh('agents', 'fleet'); // an Agent listed after we listed
      } else if (!entry.revision || b.number >= entry.revision.number) {
        const r = entry.revision && entry.revision.number === b.number
          ? entry.revision
          : { number: b.number, readiness: null, progress: {} };
        Object.assign(r, {
          id: b.revisionId, phase: b.phase, reason: b.reason, resolvedCluster: ev.cluster || r.resolvedCluster,
        });
        r.progress = { ...r.progress, phases: b.phases || {}, durationsMs: b.durationsMs || {} };
        entry.revision = r;
        entry.asOf = ev.at;
        entry.changedAt = Date.now();
        if (b.phase === 'active') entry.agent.activeRevision = b.number;
        entry.agent.latestRevision = Math.max(entry.agent.latestRevision || 0, b.number);
      }
      const d = state.detail;
      if (d && d.ns === ev.namespace && d.name === b.agent) {
        const r = d.revisions && d.revisions.get(b.number);
        if (r) {
          Object.assign(r, { phase: b.phase, reason: b.reason });
          r.progress = { ...r.progress, phases: b.phases || {}, durationsMs: b.durationsMs || {} };
        } else {
          scheduleRefresh('detail');
        }
      }
      // A revision placed, started or retired changes its cluster's free
      // capacity, which no event carries: list the clusters again too.
      scheduleRefresh('fleet', 'clusters');
      break;
    }
    case 'readiness': {
      const verdict = {
        ready: b.ready, reason: b.reason, error: b.error, liveCandidates: b.liveCandidates,
        readyCandidates: b.readyCandidates, pod: b.pod, startupReason: b.startupReason,
      };
      const entry = state.agents.get(`${ev.namespace}/${b.agent}`);
      if (entry && entry.revision && entry.revision.number === b.number) {
        entry.revision.readiness = verdict;
      }
      const d = state.detail;
      const r = d && d.ns === ev.namespace && d.name === b.agent && d.revisions && d.revisions.get(b.number);
      if (r) r.readiness = verdict;
      break;
    }
    case 'work.failed':
      scheduleRefresh('work', 'fleet');
      break;
    default:
      break;
  }
  queueRender();
}

// ---------------------------------------------------------------- watch

function setLive(text) {
  $('live').textContent = text;
}

function parseBlock(block) {
  let event = 'message';
  const data = [];
  for (const line of block.split('\n')) {
    if (line.startsWith(':')) continue;
    const i = line.indexOf(':');
    const field = i < 0 ? line : line.slice(0, i);
    let value = i < 0 ? '' : line.slice(i + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') event = value;
    else if (field === 'data') data.push(value);
  }
  return data.length ? { event, data: data.join('\n') } : null;
}

/** Applies the stream's events until it ends: 'relist' or 'ended'. */
async function readStream(body, gen) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done || gen !== state.gen) return 'ended';
    buf += decoder.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const frame = parseBlock(buf.slice(0, i));
      buf = buf.slice(i + 2);
      if (!frame) continue;
      if (frame.event === 'relist') return 'relist';
      applyEvent(JSON.parse(frame.data));
    }
    document.body.dataset.events = String(state.events);
    document.body.dataset.eventNamespaces = [...state.eventNamespaces].sort().join(' ');
  }
}

/** Lists, then follows the watch; reconnects with backoff until signed out. */
async function watchLoop(gen) {
  let delay = 500;
  while (gen === state.gen) {
    const ctl = new AbortController();
    state.abort = ctl;
    try {
      const q = state.cursor === null ? '' : `?cursor=${state.cursor}`;
      // The subscription exists once the headers are in: list after it,
      // then apply the events that queued meanwhile, in order.
      const res = await fetch(`/api/v1/watch${q}`, {
        headers: { Authorization: `Bearer ${state.token}`, Accept: 'text/event-stream' },
        cache: 'no-store',
        signal: ctl.signal,
      });
      if (gen !== state.gen) return;
      if (res.status === 401) {
        signOut('The hub refused the token (401). Sign in again.');
        return;
      }
      if (res.status === 410) { // the cursor is older than the log: re-list
        state.cursor = null;
        state.needList = true;
        continue;
      }
      if (!res.ok) throw new Error(`watch: ${res.status}`);
      if (state.needList) {
        await loadAll(gen);
        state.needList = false;
        queueRender();
      }
      setLive('live');
      delay = 500;
      if ((await readStream(res.body, gen)) === 'relist') {
        state.cursor = null;
        state.needList = true;
        continue;
      }
    } catch (e) {
      if (gen !== state.gen) return;
      console.warn('clawfed: watch interrupted:', e.message);
    }
    if (gen !== state.gen) return;
    setLive('reconnecting…');
    await new Promise((r) => { setTimeout(r, delay); });
    delay = Math.min(delay * 2, BACKOFF_MAX_MS);
  }
}

// ---------------------------------------------------------------- views

function overview() {
  const parts = [];
  if (state.fleet) {
    const items = Object.entries(state.fleet).filter(([, v]) => typeof v === 'number');
    parts.push(el('ul', { class: 'summary', 'aria-label': 'Fleet summary' },
      items.map(([k, v]) => el('li', {}, el('b', {}, v), words(k)))));
  }

  parts.push(el('h2', { id: 'clusters-h' }, 'Clusters'));
  const clusters = [...state.clusters.values()].sort((a, b) => a.name.localeCompare(b.name));
  parts.push(table('Clusters',
    ['Cluster', 'State', 'Last seen', 'Outbox depth', 'Certificate expires', 'Version', 'Free', 'Capabilities'],
    clusters.map((c) => el('tr', { 'data-cluster': c.name, 'data-state': c.connectionState, 'data-changed-at': c.changedAt },
      el('td', {}, c.name),
      el('td', { class: 'state' }, badge(c.connectionState || 'unknown', STATE_TONE[c.connectionState] || 'idle'),
        ...schedulingBadge(c)),
      el('td', { title: fmtRelative(c.lastSeen) }, fmtTime(c.lastSeen)),
      el('td', { class: 'num' }, c.outboxDepth === undefined || c.outboxDepth === null ? '-' : c.outboxDepth),
      el('td', {}, c.certificateExpiresAt ? `${fmtTime(c.certificateExpiresAt)} (${fmtRelative(c.certificateExpiresAt)})` : '-'),
      el('td', {}, c.version || '-'),
      el('td', { class: 'free', title: c.capacity ? `reported ${fmtRelative(c.capacity.reportedAt)}` : 'not reported yet' }, freeCapacity(c)),
      el('td', { class: 'muted' }, (c.capabilities || []).join(', ') || '-'))),
    'No clusters enrolled.'));

  parts.push(el('h2', {}, 'Tenants'));
  const tenants = [...state.tenants.values()].sort((a, b) => a.name.localeCompare(b.name));
  const agentCount = (ns) => [...state.agents.values()].filter((a) => a.ns === ns).length;
  parts.push(table('Tenants', ['Tenant', 'Display name', 'State', 'Agents', 'Quotas (used/limit)', 'Data-plane namespace'],
    tenants.map((t) => el('tr', { 'data-tenant': t.name },
      el('td', {}, t.name),
      el('td', { class: 'display-name' }, t.displayName),
      el('td', {}, t.state, t.stateReason ? el('span', { class: 'muted' }, ` (${t.stateReason})`) : null),
      el('td', { class: 'num' }, agentCount(t.name)),
      el('td', { class: quotaFull(state.quotas.get(t.name)) ? 'quota full' : 'quota' }, quotaSummary(state.quotas.get(t.name))),
      el('td', { class: 'muted' }, t.dataPlaneNamespace))),
    'No tenants.'));

  parts.push(el('h2', {}, 'Agents'));
  const agents = [...state.agents.values()].sort((a, b) => `${a.ns}/${a.agent.name}`.localeCompare(`${b.ns}/${b.agent.name}`));
  parts.push(table('Agents', ['Agent', 'Tenant', 'Revision', 'Phase', 'Ready', 'Reason', 'Cluster'],
    agents.map(({ ns, agent, revision: r }) => {
      const ready = r && r.readiness;
      const key = `${ns}/${agent.name}`;
      return el('tr', { 'data-agent': key, 'data-phase': r ? r.phase : '' },
        el('td', {}, el('a', { href: agentHref(ns, agent.name), 'data-key': `agent:${key}` }, agent.name)),
        el('td', {}, ns),
        el('td', { class: 'num' }, r ? r.number : '-'),
        el('td', { class: 'phase' }, phaseBadge(r && r.phase)),
        el('td', { class: 'ready' }, ready ? badge(ready.ready ? 'ready' : 'not ready', ready.ready ? 'ok' : 'warn') : '-'),
        el('td', { class: 'reason' }, (r && r.reason) || (ready && !ready.ready ? ready.reason : '') || ''),
        el('td', {}, (r && r.resolvedCluster) || '-'));
    }),
    'No Agents.'));

  parts.push(el('h2', {}, 'Failing work'));
  if (state.work === null) {
    parts.push(el('p', { class: 'empty' }, 'This token may not read the work queue.'));
  } else {
    parts.push(table('Failing work', ['Kind', 'Target', 'Tenant', 'Attempts', 'Last error', 'Updated'],
      state.work.map((w) => el('tr', { 'data-work': w.id },
        el('td', {}, w.kind),
        el('td', {}, w.target),
        el('td', {}, w.namespace || '-'),
        el('td', { class: 'num' }, `${w.attempts}/${w.maxAttempts}`),
        el('td', { class: 'reason' }, w.lastError || ''),
        el('td', {}, fmtTime(w.updatedAt)))),
      'No failed work.'));
  }
  return parts;
}

function timeline(r) {
  const phases = Object.entries((r.progress && r.progress.phases) || {})
    .sort((a, b) => new Date(a[1]) - new Date(b[1]));
  const start = phases.length ? new Date(phases[0][1]).getTime() : 0;
  const durations = Object.entries((r.progress && r.progress.durationsMs) || {});
  return [
    phases.length ? el('ol', { class: 'timeline' }, phases.map(([p, t]) => el('li', { title: fmtTime(t) },
      `${p} +${fmtMs(new Date(t).getTime() - start)}`))) : null,
    durations.length ? el('div', { class: 'muted durations' },
      durations.map(([k, v]) => `${words(k.replace(/Ms$/, ''))} ${fmtMs(v)}`).join(' · ')) : null,
  ];
}

function readinessText(v) {
  if (!v) return '-';
  if (v.error) return `error: ${v.error}`;
  if (v.ready) return v.pod ? `ready (${v.pod})` : 'ready';
  return `not ready: ${v.startupReason || v.reason}`;
}

// Where a revision runs; for one moved off a cluster (drain or failover),
// from where and what became of its workspace (claims do not move).
function placedOn(r) {
  const at = r.resolvedCluster || '-';
  if (!r.movedFrom) return at;
  if (!r.resolvedCluster) return `- (moving from ${r.movedFrom})`;
  return r.resolvedCluster === r.movedFrom
    ? `${at} (moved back, workspace kept)`
    : `${at} (moved from ${r.movedFrom}, fresh workspace)`;
}

function agentPage() {
  const d = state.detail;
  const parts = [el('p', {}, el('a', { href: '#/', 'data-key': 'back' }, '← Fleet overview'))];
  parts.push(el('h2', {}, `Agent ${d.name}`, el('span', { class: 'muted' }, ` in ${d.ns}`)));
  if (d.error) parts.push(el('p', { class: 'error', role: 'alert' }, d.error));
  if (!d.agent) return parts;
  const a = d.agent;
  parts.push(el('dl', { class: 'facts' },
    el('dt', {}, 'Tenant'), el('dd', { class: 'display-name' }, d.tenant ? d.tenant.displayName || d.tenant.name : d.ns),
    el('dt', {}, 'Harness kind'), el('dd', {}, a.spec.harnessKind),
    el('dt', {}, 'Desired state'), el('dd', {}, a.desiredState),
    el('dt', {}, 'Active revision'), el('dd', {}, a.activeRevision ?? '-'),
    el('dt', {}, 'Failover'),
    el('dd', { class: 'failover' }, a.spec.failover ? `after ${a.spec.failover.afterSeconds} s (fenced first)` : 'off'),
    el('dt', {}, 'Image'), el('dd', {}, a.spec.image),
    el('dt', {}, 'Requirement labels'),
    el('dd', {}, Object.entries(a.spec.requirementLabels || {}).map(([k, v]) => `${k}=${v}`).join(', ') || '-')));
  parts.push(el('h2', {}, 'Revisions'));
  const revisions = [...(d.revisions || new Map()).values()].sort((x, y) => y.number - x.number);
  parts.push(table('Revisions', ['#', 'Phase', 'Cluster', 'Ready', 'Reason', 'Created', 'Phase timings'],
    revisions.map((r) => el('tr', { 'data-revision': r.number, 'data-phase': r.phase },
      el('td', { class: 'num' }, r.number),
      el('td', { class: 'phase' }, phaseBadge(r.phase)),
      el('td', { class: 'cluster' }, placedOn(r)),
      el('td', {}, readinessText(r.readiness)),
      el('td', { class: 'reason' }, r.reason || ''),
      el('td', {}, fmtTime(r.createdAt)),
      el('td', { class: 'timings' }, timeline(r)))),
    'Not deployed yet.'));
  return parts;
}

function queueRender() {
  if (state.renderQueued) return;
  state.renderQueued = true;
  setTimeout(() => {
    state.renderQueued = false;
    render();
  }, 0);
}

function render() {
  if (!state.token) return;
  // Re-rendering replaces the nodes: keep keyboard focus where it was.
  const focused = document.activeElement && document.activeElement.getAttribute('data-key');
  const view = $('view');
  if (!state.loaded) {
    view.replaceChildren(el('p', { class: 'muted' }, 'Loading…'));
    return;
  }
  view.replaceChildren(...(state.detail ? agentPage() : overview()));
  if (focused) {
    const again = view.querySelector(`[data-key="${CSS.escape(focused)}"]`);
    if (again) again.focus();
  }
  if (!state.firstRender) {
    state.firstRender = true;
    performance.mark('clawfed:first-render');
    document.body.dataset.rendered = '1';
  }
}

// ---------------------------------------------------------------- routes

function route() {
  const m = /^#\/agent\/([^/]+)\/([^/]+)$/.exec(window.location.hash);
  if (m) {
    const ns = decodeURIComponent(m[1]);
    const name = decodeURIComponent(m[2]);
    state.detail = { ns, name, agent: null, revisions: null, error: null };
    if (state.token) loadDetail(state.gen).then(queueRender);
  } else {
    state.detail = null;
  }
  queueRender();
  if (state.token && state.loaded) $('main').focus();
}

// ---------------------------------------------------------------- sign-in

function showSignIn(message) {
  $('signin').hidden = false;
  $('signout').hidden = true;
  $('view').replaceChildren();
  $('signin-error').textContent = message || '';
  setLive('signed out');
  $('token').focus();
}

function start(token) {
  state.token = token;
  state.gen += 1;
  state.cursor = null;
  state.needList = true;
  state.loaded = false;
  $('signin').hidden = true;
  $('signout').hidden = false;
  setLive('connecting…');
  route();
  watchLoop(state.gen);
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  state.gen += 1;
  if (state.abort) state.abort.abort();
  // A refresh due for the old token must not run with none.
  clearTimeout(state.refreshTimer);
  state.refreshTimer = null;
  state.refresh.clear();
  delete document.body.dataset.refreshing;
  state.clusters.clear();
  state.tenants.clear();
  state.agents.clear();
  state.eventNamespaces.clear();
  state.events = 0;
  state.work = null;
  state.fleet = null;
  state.firstRender = false;
  delete document.body.dataset.rendered;
  showSignIn(message);
}

async function signIn(event) {
  event.preventDefault();
  const input = $('token');
  const token = input.value.trim();
  input.value = '';
  if (!token) return;
  // Checked before it is kept: a refused token never reaches storage.
  const res = await fetch('/api/v1/namespaces', {
    headers: { Authorization: `Bearer ${token}`, Accept: 'application/json' },
    cache: 'no-store',
  }).catch(() => null);
  if (!res) {
    showSignIn('The hub did not answer.');
    return;
  }
  if (res.status === 401) {
    showSignIn('The hub refused this token (401).');
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  start(token);
}

function main() {
  $('signin').addEventListener('submit', signIn);
  $('signout').addEventListener('click', () => signOut(''));
  window.addEventListener('hashchange', route);
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) start(token);
  else showSignIn('');
}

main();
