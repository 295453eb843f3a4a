// Building the page: every element is made with createElement and every piece of data goes in
// as text (textContent, or an attribute set with setAttribute), never parsed as HTML. Data from
// the API (actors, reasons, request ids, project and user ids) is hostile.

const SVG_NS = 'http://www.w3.org/2000/svg';

function fill(node, attrs, children) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === 'text') node.textContent = String(value);
    else if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// An HTML element: el('td', {class: 'n'}, 'text', otherNode).
export function el(tag, attrs, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

// An SVG element.
export function svg(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), attrs, children);
}

// A link inside the console: `route` is built by the callers of `hash` below, so it always
// starts with `#/` (never a `javascript:` or outside address).
export function link(route, text, attrs) {
  if (!route.startsWith('#/')) throw new Error('not a console route');
  return el('a', Object.assign({ href: route }, attrs || {}), text);
}

// A console route: fixed words and ids, each id percent-encoded, and a query of the
// non-empty parameters.
export function hash(segments, params) {
  const path = '#/' + segments.map((s) => encodeURIComponent(String(s))).join('/');
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params || {})) {
    if (value !== null && value !== undefined && value !== '' && value !== false) {
      query.set(name, String(value));
    }
  }
  const text = query.toString();
  return text ? path + '?' + text : path;
}

// The current route: decoded path segments and the query parameters; null when malformed.
export function currentRoute() {
  const raw = location.hash.startsWith('#/') ? location.hash.slice(2) : 'projects';
  const [path, query] = [raw.split('?')[0], raw.split('?').slice(1).join('?')];
  try {
    const segments = path.split('/').filter((s) => s !== '').map(decodeURIComponent);
    return { segments, params: new URLSearchParams(query) };
  } catch (_) {
    return null;
  }
}

// Replaces the children of `node`.
export function replace(node, ...children) {
  node.replaceChildren();
  return fill(node, {}, children);
}

// A table inside a horizontally scrolling, keyboard-focusable region.
export function table(caption, headers, rows, attrs) {
  return el('div', { class: 'table-wrap', tabindex: '0', role: 'region', 'aria-label': caption },
    el('table', attrs || {},
      el('caption', { text: caption }),
      el('thead', {}, el('tr', {}, headers.map((h) => el('th', { scope: 'col', text: h })))),
      el('tbody', {}, rows)));
}

// A labelled input: returns [label, input].
export function field(id, labelText, attrs) {
  const input = el('input', Object.assign({ id, name: id, type: 'text' }, attrs || {}));
  return el('div', { class: 'field' }, el('label', { for: id, text: labelText }), input);
}

// The global alert region: a refused request's problem, shown as text.
export function showProblem(error) {
  const region = document.getElementById('alert');
  region.replaceChildren();
  const problem = error && error.problem;
  if (problem) {
    region.append(
      el('p', { class: 'alert-title' },
        el('strong', { 'data-problem-status': problem.status, text: `${problem.status} ${problem.title}` })),
      el('p', { class: 'alert-detail', 'data-problem-detail': '', text: problem.detail }));
  } else {
    region.append(el('p', { class: 'alert-detail', 'data-problem-detail': '', text: String(error && error.message || error) }));
  }
  region.hidden = false;
}

export function clearProblem() {
  const region = document.getElementById('alert');
  region.replaceChildren();
  region.hidden = true;
}

// Numbers and limits as shown.
export function limitText(limit) {
  return limit === null || limit === undefined || limit < 0 ? 'unlimited' : String(limit);
}

export function deltasText(deltas) {
  if (!deltas) return '';
  return Object.entries(deltas).map(([r, n]) => `${r}: ${n}`).join(', ');
}

export function usageText(usage) {
  if (!usage) return '';
  return Object.entries(usage)
    .map(([r, u]) => `${r}: ${u.in_use} in use, ${u.reserved} reserved`).join('; ');
}

// A time for display (UTC, to the second).
export function timeText(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : d.toISOString().replace('.000Z', 'Z');
}
