// #/projects: the projects (search by prefix or parent, paged with `next`), as a tree where a
// parent is on the same page; and a form to open a project by id (a project's token may read
// only its own project, not the list).

import { get, path } from './api.js';
import { el, field, hash, link, replace, showProblem } from './dom.js';

// A form that opens a project by its id.
export function openProjectForm() {
  const form = el('form', { class: 'inline-form', 'aria-label': 'Open a project' },
    field('open-project', 'Project id', { required: true, maxlength: 128, autocomplete: 'off', spellcheck: 'false' }),
    el('button', { type: 'submit', text: 'Open project' }));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const id = form.elements['open-project'].value.trim();
    if (id) location.hash = hash(['p', id]);
  });
  return form;
}

// The projects of one page as nested lists: a child under its parent when the parent is on
// the page, otherwise at the top with its parent named.
function tree(projects) {
  const onPage = new Set(projects.map((p) => p.project));
  const children = new Map();
  const roots = [];
  for (const entry of projects) {
    if (entry.parent && onPage.has(entry.parent) && entry.parent !== entry.project) {
      if (!children.has(entry.parent)) children.set(entry.parent, []);
      children.get(entry.parent).push(entry);
    } else {
      roots.push(entry);
    }
  }
  const seen = new Set();
  const item = (entry, depth) => {
    seen.add(entry.project);
    const below = (children.get(entry.project) || []).filter((c) => !seen.has(c.project));
    return el('li', { 'data-project': entry.project, 'data-depth': depth },
      link(hash(['p', entry.project]), entry.project),
      entry.parent && !onPage.has(entry.parent)
        ? el('span', { class: 'muted' }, ' (parent: ', link(hash(['p', entry.parent]), entry.parent), ')')
        : null,
      below.length && depth < 8 ? el('ul', { class: 'tree' }, below.map((c) => item(c, depth + 1))) : null);
  };
  return el('ul', { class: 'tree tree-root', 'aria-label': 'Projects' }, roots.map((r) => item(r, 0)));
}

export async function projectsPage(main, params) {
  const prefix = params.get('prefix') || '';
  const parent = params.get('parent') || '';
  const cursor = params.get('cursor') || '';
  const limit = params.get('limit') || '100';
  const search = el('form', { class: 'filters', 'aria-label': 'Search projects' },
    field('prefix', 'Id starts with', { value: prefix, autocomplete: 'off', spellcheck: 'false' }),
    field('parent', 'Parent', { value: parent, autocomplete: 'off', spellcheck: 'false' }),
    field('limit', 'Per page', { type: 'number', min: 1, max: 1000, value: limit }),
    el('div', { class: 'actions' }, el('button', { type: 'submit', text: 'Search' })));
  search.addEventListener('submit', (event) => {
    event.preventDefault();
    const f = search.elements;
    location.hash = hash(['projects'], { prefix: f.prefix.value.trim(), parent: f.parent.value.trim(), limit: f.limit.value });
  });
  const results = el('section', { 'aria-labelledby': 'results-title' },
    el('h2', { id: 'results-title', text: 'Projects' }), el('p', { text: 'Loading…' }));
  replace(main,
    el('h1', { text: 'Projects' }),
    search,
    el('section', { class: 'open-project', 'aria-labelledby': 'open-title' },
      el('h2', { id: 'open-title', text: 'Open a project by id' }),
      el('p', { class: 'muted', text: 'A project token may read only its own project: open it here.' }),
      openProjectForm()),
    results);

  let answer;
  try {
    answer = await get(path('v1', 'projects'), { prefix, parent, limit, cursor });
  } catch (error) {
    showProblem(error);
    replace(results, el('h2', { id: 'results-title', text: 'Projects' }),
      el('p', { text: 'The list is not available with this token; open a project by its id above.' }));
    if (error.status === 403) document.getElementById('open-project').focus();
    return;
  }
  const paging = el('p', { class: 'paging' },
    cursor ? link(hash(['projects'], { prefix, parent, limit }), 'First page') : null,
    cursor && answer.next ? ' · ' : null,
    answer.next ? link(hash(['projects'], { prefix, parent, limit, cursor: answer.next }), 'Next page', { rel: 'next' }) : null);
  replace(results, el('h2', { id: 'results-title', text: 'Projects' }),
    answer.projects.length
      ? tree(answer.projects)
      : el('p', { text: prefix || parent ? 'No project matches.' : 'No project has any event yet.' }),
    paging);
}
