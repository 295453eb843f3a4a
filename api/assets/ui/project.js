// #/p/{project}: its limits and usage with headroom bars, its parent and children, the users
// its recent audit entries name, and usage over time per resource (a chart each, zoomable).
// #/p/{project}/u/{user}: one user's limits and usage.

import { ApiProblem, get, path } from './api.js';
import { chart, headroomBar } from './chart.js';
import { el, field, hash, limitText, link, replace, showProblem, table } from './dom.js';

const RANGES = [['1h', 3600], ['24h', 86400], ['7d', 7 * 86400], ['all', null]];
// The whole history first: an investigation starts from the overview, then zooms in.
const DEFAULT_RANGE = 'all';

function section(id, title, ...children) {
  return el('section', { id, 'aria-labelledby': `${id}-title` },
    el('h2', { id: `${id}-title`, text: title }), ...children);
}

function cell(value, attrs) {
  return el('td', Object.assign({ class: 'num' }, attrs || {}), value === undefined || value === null ? '' : String(value));
}

// One row per resource: limit, source, in_use, reserved, headroom and the bar. A parent's bar
// shows its subtree's usage (what its limit caps).
function usageTable(caption, usage, limits) {
  const subtree = usage.subtree || null;
  const headers = ['Resource', 'Limit', 'Source', 'In use', 'Reserved'];
  if (subtree) headers.push('Subtree in use', 'Subtree reserved');
  headers.push('Headroom', 'Usage of the limit');
  const rows = Object.entries(usage.resources).map(([resource, u]) => {
    const below = subtree && subtree[resource];
    const source = limits && limits[resource] ? limits[resource].source : '';
    const shown = below || u;
    return el('tr', { 'data-resource': resource },
      el('th', { scope: 'row', text: resource }),
      cell(limitText(u.limit), { 'data-field': 'limit' }),
      el('td', { 'data-field': 'source', text: source }),
      cell(u.in_use, { 'data-field': 'in_use' }),
      cell(u.reserved, { 'data-field': 'reserved' }),
      below ? cell(below.in_use) : null,
      below ? cell(below.reserved) : null,
      cell(u.headroom === undefined || u.headroom === null ? '–' : u.headroom, { 'data-field': 'headroom' }),
      el('td', { class: 'bar-cell' }, headroomBar(u.limit, shown.in_use, shown.reserved)));
  });
  return table(caption, headers, rows, { class: 'usage' });
}

function childrenTable(project, children) {
  const resources = [...new Set(Object.values(children).flatMap((c) => Object.keys(c)))].sort();
  const rows = Object.entries(children).map(([child, usage]) => el('tr', {},
    el('th', { scope: 'row' }, link(hash(['p', child]), child)),
    resources.map((r) => cell(usage[r] ? `${usage[r].in_use} / ${usage[r].reserved}` : '–'))));
  return table(`Children of ${project} (their subtree's in use / reserved)`,
    ['Child', ...resources], rows);
}

async function parentSection(project) {
  try {
    const answer = await get(path('v1', 'projects', project, 'parent'));
    if (!answer.parent) return el('p', { text: 'No parent: a top-level project.' });
    const chain = (answer.ancestors && answer.ancestors.length ? answer.ancestors : [answer.parent]);
    return el('p', {}, 'Parent: ', link(hash(['p', answer.parent]), answer.parent, { 'data-parent': '' }),
      chain.length > 1 ? el('span', { class: 'muted' }, ' (ancestors: ',
        chain.map((a, i) => [i ? ' › ' : '', link(hash(['p', a]), a)]), ')') : null);
  } catch (error) {
    return el('p', { class: 'muted', text: `Parent not available: ${error.message}` });
  }
}

async function usersSection(project) {
  try {
    const since = new Date(Date.now() - 30 * 86400e3).toISOString();
    const answer = await get(path('v1', 'projects', project, 'audit'), { since, limit: 1000 });
    const users = [...new Set(answer.entries.map((e) => e.user).filter((u) => typeof u === 'string'))].sort();
    if (!users.length) return el('p', { text: 'No user named in the audit entries of the last 30 days.' });
    return el('ul', { class: 'users' }, users.map((u) => el('li', {}, link(hash(['p', project, 'u', u]), u))));
  } catch (error) {
    return el('p', { class: 'muted', text: `Users not available: ${error.message}` });
  }
}

// The time range of the charts, from the route's `since`/`until`/`range`.
function rangeOf(params) {
  const since = params.get('since') || '';
  const until = params.get('until') || '';
  if (since || until) return { since, until, label: 'custom', step: stepFor(since, until) };
  const label = params.get('range') || DEFAULT_RANGE;
  const seconds = (RANGES.find(([name]) => name === label) || RANGES[3])[1];
  if (seconds === null) return { since: '', until: '', label: 'all', step: '' };
  return { since: new Date(Date.now() - seconds * 1000).toISOString(), until: '', label, step: Math.max(1, Math.round(seconds / 240)) };
}

function stepFor(since, until) {
  const a = Date.parse(since);
  const b = until ? Date.parse(until) : Date.now();
  if (Number.isNaN(a) || Number.isNaN(b) || b <= a) return '';
  return Math.max(1, Math.round((b - a) / 1000 / 240));
}

function rangeForm(project, range) {
  const form = el('form', { class: 'filters', 'aria-label': 'Time range of the charts' },
    field('since', 'Since (RFC 3339)', { value: range.since, placeholder: '2026-01-31T12:00:00Z', autocomplete: 'off' }),
    field('until', 'Until (RFC 3339, empty: now)', { value: range.until, placeholder: 'now', autocomplete: 'off' }),
    el('div', { class: 'actions' }, el('button', { type: 'submit', text: 'Show range' })));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    location.hash = hash(['p', project], { since: form.elements.since.value.trim(), until: form.elements.until.value.trim() });
  });
  const quick = el('p', { class: 'quick-ranges' }, 'Quick ranges: ',
    RANGES.map(([name], i) => [i ? ' ' : '', link(hash(['p', project], { range: name }), name,
      { class: 'chip', 'aria-current': range.label === name ? 'true' : null })]));
  return [quick, form];
}

async function historyChart(project, resource, range) {
  try {
    const answer = await get(path('v1', 'projects', project, 'usage', 'history'),
      { resource, since: range.since, until: range.until, step: range.step });
    return chart(resource, answer.points || [], (since, until) => {
      location.hash = hash(['p', project], { since, until });
    });
  } catch (error) {
    const problem = error instanceof ApiProblem ? error.problem : { status: 0, title: 'Error', detail: String(error) };
    return el('figure', { class: 'chart', 'data-chart': resource },
      el('figcaption', { text: `Usage of ${resource} over time` }),
      el('div', { class: 'chart-error', role: 'alert' },
        el('strong', { text: `${problem.status} ${problem.title}: ` }), problem.detail));
  }
}

export async function projectPage(main, project, params) {
  replace(main, el('h1', {}, 'Project ', el('span', { class: 'id', text: project })), el('p', { text: 'Loading…' }));
  let usage;
  let limits;
  try {
    [usage, limits] = await Promise.all([
      get(path('v1', 'projects', project, 'usage')),
      get(path('v1', 'projects', project, 'limits')),
    ]);
  } catch (error) {
    showProblem(error);
    replace(main, el('h1', {}, 'Project ', el('span', { class: 'id', text: project })),
      el('p', {}, link(hash(['projects']), 'Back to the projects')));
    return;
  }
  const range = rangeOf(params);
  const resources = Object.keys(usage.resources).sort();
  const charts = el('div', { class: 'charts' }, el('p', { text: 'Loading charts…' }));
  replace(main,
    el('h1', {}, 'Project ', el('span', { class: 'id', text: project })),
    el('p', { class: 'page-links' },
      link(hash(['p', project, 'audit']), 'Audit trail'), ' · ',
      link(hash(['p', project, 'audit'], { subtree: 'true' }), 'Audit trail with descendants'), ' · ',
      link(hash(['p', project, 'audit'], { type: 'ReservationDenied' }), 'Denials'), ' · ',
      link(hash(['p', project, 'audit'], { type: 'UsageCorrected' }), 'Corrections')),
    section('limits', 'Limits and usage',
      el('p', { class: 'muted', text: `As of position ${usage.position}.` }),
      usageTable(`Limits and usage of ${project}`, usage, limits.limits)),
    section('family', 'Parent and children', el('p', { text: 'Loading…' })),
    section('users', 'Users', el('p', { text: 'Loading…' })),
    section('history', 'Usage over time', ...rangeForm(project, range), charts));

  const family = document.getElementById('family');
  const [parent, users, figures] = await Promise.all([
    parentSection(project),
    usersSection(project),
    Promise.all(resources.map((r) => historyChart(project, r, range))),
  ]);
  replace(family, el('h2', { id: 'family-title', text: 'Parent and children' }), parent,
    usage.children && Object.keys(usage.children).length
      ? childrenTable(project, usage.children)
      : el('p', { text: 'No children.' }));
  replace(document.getElementById('users'), el('h2', { id: 'users-title', text: 'Users' }),
    el('p', { class: 'muted', text: 'The users named in the audit entries of the last 30 days (there is no user list).' }), users);
  replace(charts, figures.length ? figures : el('p', { text: 'No resource has a limit yet.' }));
}

export async function userPage(main, project, user) {
  const title = el('h1', {}, 'User ', el('span', { class: 'id', text: user }), ' in ',
    link(hash(['p', project]), project));
  replace(main, title, el('p', { text: 'Loading…' }));
  try {
    const [usage, limits] = await Promise.all([
      get(path('v1', 'projects', project, 'users', user, 'usage')),
      get(path('v1', 'projects', project, 'users', user, 'limits')),
    ]);
    replace(main, title,
      el('p', { class: 'page-links' }, link(hash(['p', project, 'audit'], { user }), 'Audit trail of this user')),
      usageTable(`Limits and usage of ${user} in ${project}`, usage, limits.limits));
  } catch (error) {
    showProblem(error);
    replace(main, title);
  }
}
