// The audit console: asks for a token, then routes on the location's hash:
//   #/projects, #/p/{project}, #/p/{project}/audit?…, #/p/{project}/r/{reservation},
//   #/p/{project}/u/{user}.
// Every id in a route is percent-encoded; every piece of data is put in the page as text.

import { clearToken, setToken, token } from './api.js';
import { auditPage, reservationPage } from './audit.js';
import { clearProblem, currentRoute, el, hash, link, replace, showProblem } from './dom.js';
import { projectPage, userPage } from './project.js';
import { projectsPage } from './projects.js';

const main = document.getElementById('main');
const signOut = document.getElementById('sign-out');
const navProject = document.getElementById('nav-project');

function tokenForm(note) {
  const input = el('input', {
    id: 'token', name: 'token', type: 'password', required: true, autocomplete: 'off', spellcheck: 'false',
    'aria-describedby': 'token-help',
  });
  const form = el('form', { class: 'token-form', 'aria-label': 'Sign in' },
    el('div', { class: 'field' }, el('label', { for: 'token', text: 'API token' }), input),
    el('p', { id: 'token-help', class: 'muted', text: 'Sent as a Bearer header to this server only, and kept for this browser tab until you sign out.' }),
    el('div', { class: 'actions' }, el('button', { type: 'submit', text: 'Sign in' })));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const value = input.value.trim();
    if (!value) return;
    setToken(value);
    clearProblem();
    if (!location.hash.startsWith('#/')) location.hash = '#/projects';
    else route();
  });
  replace(main, el('h1', { text: 'Sign in' }), note ? el('p', { text: note }) : null, form);
  input.focus();
}

function setNavProject(project) {
  navProject.replaceChildren();
  navProject.hidden = !project;
  if (project) navProject.append(link(hash(['p', project]), `Project ${project}`));
}

async function route() {
  clearProblem();
  signOut.hidden = !token();
  if (!token()) {
    setNavProject(null);
    tokenForm('');
    document.body.dataset.ready = 'true';
    return;
  }
  const current = currentRoute();
  if (!current) {
    showProblem(new Error('This address is not a page of the console.'));
    replace(main, el('p', {}, link('#/projects', 'Go to the projects')));
    return;
  }
  const [first, project, kind, id] = current.segments;
  setNavProject(first === 'p' ? project : null);
  try {
    if (first === 'projects' || first === undefined) await projectsPage(main, current.params);
    else if (first === 'p' && project && kind === undefined) await projectPage(main, project, current.params);
    else if (first === 'p' && project && kind === 'audit') await auditPage(main, project, current.params);
    else if (first === 'p' && project && kind === 'r' && id) await reservationPage(main, project, id);
    else if (first === 'p' && project && kind === 'u' && id) await userPage(main, project, id);
    else {
      showProblem(new Error('This address is not a page of the console.'));
      replace(main, el('p', {}, link('#/projects', 'Go to the projects')));
    }
  } catch (error) {
    showProblem(error);
  }
  // A token the server does not know: ask for another one (the alert keeps the reason).
  const alert = document.getElementById('alert');
  if (!alert.hidden && alert.querySelector('[data-problem-status^="401"]')) {
    clearToken();
    signOut.hidden = true;
    main.append(el('h2', { text: 'Sign in again' }));
    const note = el('p', {}, 'The server refused the token. ', el('button', {
      type: 'button', id: 'sign-in-again', text: 'Enter another token', onclick: () => tokenForm(''),
    }));
    main.append(note);
  }
  document.body.dataset.ready = 'true';
}

signOut.addEventListener('click', () => {
  clearToken();
  clearProblem();
  signOut.hidden = true;
  tokenForm('Signed out: the token is forgotten.');
});

document.getElementById('skip-link').addEventListener('click', (event) => {
  event.preventDefault();
  main.focus();
});

window.addEventListener('hashchange', () => {
  document.body.dataset.ready = 'false';
  route().then(() => main.focus({ preventScroll: true }));
});
route();
