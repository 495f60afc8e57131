// The run viewer's entry: sign-in (the key kept in sessionStorage only), the nav, and the
// page for the current hash.

import { clearKey, get, key, onUnauthorized, setKey } from './api.js';
import { el, fill } from './dom.js';
import { runPage } from './pages/run.js';
import { runsPage } from './pages/runs.js';
import { workflowPage, workflowsPage } from './pages/workflows.js';
import { current, onRoute } from './router.js';

const app = document.getElementById('app');
const navSlot = document.getElementById('nav-slot');
let cleanup = () => {};

function unmount() {
  cleanup();
  cleanup = () => {};
  app.replaceChildren();
}

function signIn(message) {
  unmount();
  clearKey();
  navSlot.replaceChildren();
  const input = el('input', { id: 'key', type: 'password', autocomplete: 'off', required: true, placeholder: 'trl_…', 'aria-label': 'API key' });
  const error = el('p', { id: 'sign-in-error', class: 'error', role: 'alert', text: message || '' });
  const button = el('button', { type: 'submit', text: 'Sign in' });
  const form = el(
    'form',
    { id: 'sign-in', novalidate: true },
    el('h2', { text: 'Sign in' }),
    el('p', { class: 'muted', text: 'Paste an API key. It is kept in this tab only (sessionStorage) and sent as a bearer header.' }),
    el('label', { class: 'field' }, el('span', { text: 'API key' }), input),
    el('div', { class: 'actions' }, button),
    error
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const value = input.value.trim();
    if (!value) {
      error.textContent = 'Enter an API key.';
      return;
    }
    error.textContent = '';
    button.disabled = true;
    setKey(value);
    try {
      await get('/v1/runs?limit=1');
      input.value = '';
      start();
    } catch (problem) {
      if (problem.status !== 401) {
        // The key may still be good (a key without runs:read); keep it and go on.
        if (problem.status === 403) {
          start();
          return;
        }
        clearKey();
        error.textContent = problem.message;
      }
    } finally {
      button.disabled = false;
    }
  });
  app.appendChild(form);
  input.focus();
}

function nav() {
  const out = el('button', { id: 'sign-out', type: 'button', text: 'Sign out' });
  out.addEventListener('click', () => {
    clearKey();
    signIn('');
  });
  fill(navSlot, el('nav', { id: 'nav' }, el('a', { href: '#/runs', 'data-nav': 'runs', text: 'Runs' }), el('a', { href: '#/workflows', 'data-nav': 'workflows', text: 'Workflows' }), out));
}

function render(route) {
  if (!key()) {
    signIn('');
    return;
  }
  unmount();
  for (const link of navSlot.querySelectorAll('[data-nav]')) {
    const active = link.getAttribute('data-nav') === (route.page.startsWith('workflow') ? 'workflows' : 'runs');
    if (active) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  if (route.page === 'run') cleanup = runPage(app, route.id);
  else if (route.page === 'workflows') cleanup = workflowsPage(app);
  else if (route.page === 'workflow') cleanup = workflowPage(app, route.id);
  else cleanup = runsPage(app);
}

function start() {
  nav();
  render(current());
}

onUnauthorized((message) => signIn(message));
onRoute((route) => render(route));
if (key()) start();
else signIn('');
