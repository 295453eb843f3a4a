// The quota API as the console reads it: the token kept for this tab (sessionStorage) and sent
// as a Bearer header on every request; a refusal is thrown as an ApiProblem with the problem
// document the server answered (RFC 9457).

const TOKEN_KEY = 'quota-console-token';

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  sessionStorage.setItem(TOKEN_KEY, value);
}

export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

export class ApiProblem extends Error {
  constructor(problem) {
    super(`${problem.status} ${problem.title}: ${problem.detail}`);
    this.problem = problem;
    this.status = problem.status;
  }
}

// An API path: fixed words and ids, each id percent-encoded.
export function path(...segments) {
  return '/' + segments.map((s) => encodeURIComponent(String(s))).join('/');
}

async function problemOf(response) {
  let body = null;
  try {
    body = await response.json();
  } catch (_) {
    body = null;
  }
  const problem = body && typeof body === 'object' ? body : {};
  return {
    status: typeof problem.status === 'number' ? problem.status : response.status,
    title: typeof problem.title === 'string' ? problem.title : response.statusText || 'Error',
    detail: typeof problem.detail === 'string' ? problem.detail : `the server answered ${response.status}`,
    type: typeof problem.type === 'string' ? problem.type : '',
  };
}

// GET `apiPath` with the non-empty `params`; the JSON answer, or throws an ApiProblem.
export async function get(apiPath, params) {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params || {})) {
    if (value !== null && value !== undefined && value !== '') query.set(name, String(value));
  }
  const text = query.toString();
  const headers = { Accept: 'application/json' };
  const current = token();
  if (current) headers.Authorization = `Bearer ${current}`;
  let response;
  try {
    response = await fetch(text ? `${apiPath}?${text}` : apiPath, {
      headers, cache: 'no-store', credentials: 'omit', redirect: 'error',
    });
  } catch (error) {
    throw new ApiProblem({ status: 0, title: 'Network error', detail: String(error.message || error), type: '' });
  }
  if (!response.ok) throw new ApiProblem(await problemOf(response));
  return response.json();
}

// Every entry of a paged audit query, following `next` up to `maxPages` pages.
export async function auditAll(project, params, maxPages) {
  const entries = [];
  let cursor = '';
  for (let page = 0; page < maxPages; page += 1) {
    const answer = await get(path('v1', 'projects', project, 'audit'),
      Object.assign({}, params, { cursor, limit: 1000 }));
    entries.push(...answer.entries);
    if (!answer.next) return { entries, complete: true };
    cursor = answer.next;
  }
  return { entries, complete: false };
}
