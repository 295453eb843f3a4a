// #/p/{project}/audit: the audit trail with every filter of the API and paging; denials,
// corrections and forced limits stand out (a class and a text label, not colour alone).
// #/p/{project}/r/{reservation}: one reservation's status and all its events in order.

import { ApiProblem, auditAll, get, path } from './api.js';
import { deltasText, el, field, hash, link, replace, showProblem, table, timeText, usageText } from './dom.js';

export const EVENT_TYPES = [
  'DefaultLimitsSet', 'LimitsSet', 'LimitsReset', 'ReservationRequested', 'ReservationCommitted',
  'ReservationReleased', 'ReservationDenied', 'UsageCorrected', 'UserLimitsSet', 'UserLimitsReset',
  'ParentSet', 'DescendantReserved', 'DescendantUsageChanged', 'DescendantsJoined', 'DescendantsLeft',
];

const FILTERS = ['since', 'until', 'type', 'reservation', 'principal', 'actor', 'user', 'subtree', 'limit'];

// How an entry is marked: a class for the row and a label that says it in words.
function marking(entry) {
  if (entry.type === 'ReservationDenied') return ['entry-denied', 'denied'];
  if (entry.type === 'UsageCorrected') return ['entry-corrected', 'corrected'];
  if (entry.force === true) return ['entry-forced', 'forced'];
  return ['', ''];
}

function changeText(entry) {
  if (!entry.before && !entry.after) return '';
  const names = [...new Set([...Object.keys(entry.before || {}), ...Object.keys(entry.after || {})])].sort();
  const show = (map, r) => (map && r in map ? String(map[r]) : '–');
  return names.map((r) => `${r}: ${show(entry.before, r)} → ${show(entry.after, r)}`).join(', ');
}

const HEADERS = ['Position', 'At', 'Type', 'Project', 'Reservation', 'User', 'Deltas', 'Count',
  'Before → after', 'Actor', 'Principal', 'Request id', 'Reason', 'Usage after'];

// The table of `entries`; `project` is the audit's project (an entry of a descendant names its own).
export function auditTable(caption, project, entries) {
  const rows = entries.map((entry) => {
    const [cls, label] = marking(entry);
    const owner = typeof entry.project === 'string' ? entry.project : project;
    const text = (value, cls) => el('td', { class: cls, text: value === null || value === undefined ? '' : String(value) });
    return el('tr', { class: `entry ${cls}`.trim(), 'data-type': entry.type, 'data-position': entry.position },
      el('td', { class: 'num', text: String(entry.position) }),
      el('td', { class: 'nowrap' }, el('time', { datetime: entry.at, text: timeText(entry.at) })),
      el('td', { class: 'type' }, label ? el('span', { class: `tag tag-${label}`, text: label.toUpperCase() }) : null,
        label ? ' ' : null, entry.type),
      el('td', {}, owner === project ? owner : link(hash(['p', owner]), owner)),
      el('td', { class: 'id' }, entry.reservation_id
        ? link(hash(['p', typeof entry.descendant === 'string' ? entry.descendant : owner, 'r', entry.reservation_id]), entry.reservation_id, { 'data-reservation': entry.reservation_id })
        : ''),
      el('td', {}, typeof entry.user === 'string' ? link(hash(['p', owner, 'u', entry.user]), entry.user) : ''),
      text(deltasText(entry.deltas), 'wide'),
      text(entry.count),
      text(changeText(entry) || (entry.descendant ? `descendant ${entry.descendant}` : '') || (entry.parent ? `parent ${entry.parent}` : ''), 'wide'),
      el('td', { class: 'client-text', 'data-field': 'actor', text: entry.actor ?? '' }),
      el('td', { class: 'client-text', 'data-field': 'principal', text: entry.principal ?? '' }),
      el('td', { class: 'client-text', 'data-field': 'request_id', text: entry.request_id ?? '' }),
      el('td', { class: 'client-text', 'data-field': 'reason', text: entry.reason ?? '' }),
      text(usageText(entry.usage_after), 'wide'));
  });
  return table(caption, HEADERS, rows, { class: 'audit' });
}

function filterForm(project, params) {
  const value = (name) => params.get(name) || '';
  const type = el('select', { id: 'type', name: 'type' },
    el('option', { value: '', text: 'any type' }),
    EVENT_TYPES.map((t) => el('option', { value: t, selected: value('type') === t, text: t })));
  const subtree = el('input', { id: 'subtree', name: 'subtree', type: 'checkbox', checked: value('subtree') === 'true' });
  const form = el('form', { class: 'filters', 'aria-label': 'Audit filters' },
    field('since', 'Since (RFC 3339)', { value: value('since'), placeholder: '2026-01-31T12:00:00Z', autocomplete: 'off' }),
    field('until', 'Until (RFC 3339)', { value: value('until'), autocomplete: 'off' }),
    el('div', { class: 'field' }, el('label', { for: 'type', text: 'Event type' }), type),
    field('reservation', 'Reservation id', { value: value('reservation'), autocomplete: 'off', spellcheck: 'false' }),
    field('principal', 'Principal', { value: value('principal'), autocomplete: 'off', spellcheck: 'false' }),
    field('actor', 'Actor', { value: value('actor'), autocomplete: 'off', spellcheck: 'false' }),
    field('user', 'User', { value: value('user'), autocomplete: 'off', spellcheck: 'false' }),
    field('limit', 'Per page', { type: 'number', min: 1, max: 1000, value: value('limit') || '100' }),
    el('div', { class: 'field field-check' }, subtree, el('label', { for: 'subtree', text: 'Include descendants' })),
    el('div', { class: 'actions' },
      el('button', { type: 'submit', text: 'Filter' }), ' ',
      link(hash(['p', project, 'audit']), 'Clear filters', { class: 'button-link' })));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const f = form.elements;
    const next = {};
    for (const name of FILTERS) {
      if (name === 'subtree') next.subtree = f.subtree.checked ? 'true' : '';
      else next[name] = f[name].value.trim();
    }
    location.hash = hash(['p', project, 'audit'], next);
  });
  return form;
}

export async function auditPage(main, project, params) {
  const title = el('h1', {}, 'Audit trail of ', link(hash(['p', project]), project));
  const results = el('section', { 'aria-labelledby': 'entries-title' },
    el('h2', { id: 'entries-title', text: 'Entries' }), el('p', { text: 'Loading…' }));
  replace(main, title,
    el('p', { class: 'page-links' },
      link(hash(['p', project, 'audit'], { type: 'ReservationDenied' }), 'Denials only'), ' · ',
      link(hash(['p', project, 'audit'], { type: 'UsageCorrected' }), 'Corrections only'), ' · ',
      link(hash(['p', project, 'audit'], { type: 'LimitsSet' }), 'Limit changes only')),
    filterForm(project, params), results);
  const query = {};
  for (const name of FILTERS) query[name] = params.get(name) || '';
  query.cursor = params.get('cursor') || '';
  let answer;
  try {
    answer = await get(path('v1', 'projects', project, 'audit'), query);
  } catch (error) {
    showProblem(error);
    replace(results, el('h2', { id: 'entries-title', text: 'Entries' }), el('p', { text: 'No entries: the request was refused.' }));
    return;
  }
  const kept = {};
  for (const name of FILTERS) kept[name] = query[name];
  const paging = el('p', { class: 'paging' },
    query.cursor ? link(hash(['p', project, 'audit'], kept), 'First page') : null,
    query.cursor && answer.next ? ' · ' : null,
    answer.next ? link(hash(['p', project, 'audit'], Object.assign({}, kept, { cursor: answer.next })), 'Next page', { rel: 'next' }) : null);
  replace(results, el('h2', { id: 'entries-title', text: 'Entries' }),
    el('p', { class: 'muted', 'aria-live': 'polite', text: `${answer.entries.length} entries on this page${answer.next ? '; more on the next' : ''}.` }),
    answer.entries.length ? auditTable(`Audit entries of ${project}`, project, answer.entries) : el('p', { text: 'No entry matches.' }),
    paging);
}

function reservationSummary(reservation) {
  const row = (name, value, key) => (value === undefined || value === null || value === '' ? null
    : el('div', {}, el('dt', { text: name }), el('dd', { 'data-field': key, text: String(value) })));
  return el('dl', { class: 'summary' },
    row('Status', reservation.status, 'status'),
    row('User', reservation.user, 'user'),
    row('Count', reservation.count, 'count'),
    row('Deltas', deltasText(reservation.deltas), 'deltas'),
    row('Created', timeText(reservation.created_at), 'created_at'),
    row('Expires', reservation.status === 'held' ? timeText(reservation.expires_at) : '', 'expires_at'),
    row('Reason', reservation.reason, 'reason'),
    row('Position', reservation.position, 'position'));
}

export async function reservationPage(main, project, id) {
  const title = el('h1', {}, 'Reservation ', el('span', { class: 'id', text: id }));
  replace(main, title, el('p', {}, 'In project ', link(hash(['p', project]), project)), el('p', { text: 'Loading…' }));
  let status;
  try {
    const reservation = await get(path('v1', 'projects', project, 'reservations', id));
    status = reservationSummary(reservation);
  } catch (error) {
    if (error instanceof ApiProblem && error.status === 404) {
      status = el('p', { text: 'No reservation is stored under this id (a denied request leaves only its denial).' });
    } else {
      showProblem(error);
      status = el('p', { text: 'Its status is not available.' });
    }
  }
  let history;
  try {
    const { entries, complete } = await auditAll(project, { reservation: id }, 10);
    entries.sort((a, b) => a.position - b.position);
    history = [
      entries.length ? auditTable(`Events of reservation ${id}, oldest first`, project, entries)
        : el('p', { text: 'No event names this reservation.' }),
      complete ? null : el('p', { class: 'muted', text: 'Only the first 10,000 events are shown.' }),
    ];
  } catch (error) {
    showProblem(error);
    history = el('p', { text: 'Its history is not available.' });
  }
  replace(main, title,
    el('p', {}, 'In project ', link(hash(['p', project]), project), ' · ',
      link(hash(['p', project, 'audit'], { reservation: id }), 'in the audit trail')),
    el('section', { 'aria-labelledby': 'status-title' }, el('h2', { id: 'status-title', text: 'Current status' }), status),
    el('section', { 'aria-labelledby': 'history-title' }, el('h2', { id: 'history-title', text: 'History' }), history));
}
