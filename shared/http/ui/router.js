// Hash routing: #/runs, #/runs/ID, #/workflows, #/workflows/ID. The hash never holds the key.

/** The current route: {page: 'runs'|'run'|'workflows'|'workflow', id?}. */
export function current() {
  let parts;
  try {
    parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  } catch {
    return { page: 'runs' }; // a malformed escape (#/runs/%E0): the default page
  }
  if (parts[0] === 'workflows') return parts[1] ? { page: 'workflow', id: parts[1] } : { page: 'workflows' };
  if (parts[0] === 'runs' && parts[1]) return { page: 'run', id: parts[1] };
  return { page: 'runs' };
}

/** The hash of a run's page. */
export const runHref = (id) => `#/runs/${encodeURIComponent(id)}`;
/** The hash of a workflow's page. */
export const workflowHref = (id) => `#/workflows/${encodeURIComponent(id)}`;

/** Goes to `hash`. */
export function go(hash) {
  location.hash = hash;
}

/** Calls `render(route)` on every hash change. */
export function onRoute(render) {
  window.addEventListener('hashchange', () => render(current()));
}
