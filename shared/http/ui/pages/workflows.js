// #/workflows: the registered workflows; #/workflows/ID: its graph and a form to start a run.

import { describe, get, post, query } from '../api.js';
import { el, pretty } from '../dom.js';
import { draw } from '../graph.js';
import { go, runHref, workflowHref } from '../router.js';

const MAX_PAGES = 20;

/** Mounts the list into `root`; returns the cleanup. */
export function workflowsPage(root) {
  const control = new AbortController();
  const body = el('tbody');
  const error = el('p', { id: 'workflows-error', class: 'error', role: 'alert' });
  root.appendChild(
    el(
      'section',
      { id: 'workflows-page' },
      el('div', { class: 'bar' }, el('h2', { text: 'Workflows' })),
      error,
      el('table', { id: 'workflows' }, el('thead', {}, el('tr', {}, el('th', { text: 'Workflow' }), el('th', { text: 'Name' }), el('th', { text: 'Version' }), el('th', { text: 'Runnable' }))), body)
    )
  );
  (async () => {
    try {
      let cursor;
      for (let page = 0; page < MAX_PAGES; page += 1) {
        const answer = await get(`/v1/workflows${query({ limit: 100, cursor })}`, control.signal);
        for (const flow of answer.workflows || []) {
          body.appendChild(
            el(
              'tr',
              { 'data-workflow-id': flow.workflowId, class: 'link', onclick: (event) => { if (!event.target.closest('a')) go(workflowHref(flow.workflowId)); } },
              el('td', {}, el('a', { href: workflowHref(flow.workflowId), text: flow.workflowId })),
              el('td', { text: flow.name ?? '' }),
              el('td', { text: flow.version ?? '' }),
              el('td', { text: flow.runnable === false ? 'no' : 'yes' })
            )
          );
        }
        cursor = answer.nextCursor;
        if (!cursor) break;
      }
    } catch (problem) {
      if (!control.signal.aborted) error.textContent = problem.message;
    }
  })();
  return () => control.abort();
}

/** Mounts workflow `id` into `root`; returns the cleanup. */
export function workflowPage(root, id) {
  const control = new AbortController();
  const holder = el('div', { class: 'graph-box' });
  const error = el('p', { id: 'workflow-error', class: 'error', role: 'alert' });
  const inputs = el('textarea', { id: 'start-inputs', rows: 6, spellcheck: 'false', 'aria-label': 'Inputs (JSON object)' });
  inputs.value = '{}';
  const startError = el('p', { id: 'start-error', class: 'error', role: 'alert' });
  const button = el('button', { type: 'submit', text: 'Start run' });
  const form = el('form', { id: 'start-run', novalidate: true }, el('h3', { text: 'Start a run' }), el('label', { class: 'field' }, el('span', { text: 'Inputs (JSON object)' }), inputs), el('div', { class: 'actions' }, button), startError);
  const details = el('pre', { id: 'definition', class: 'json' });
  const title = el('h2', { text: id });
  root.appendChild(
    el(
      'section',
      { id: 'workflow-page', 'data-workflow-id': id },
      el('div', { class: 'bar' }, title, el('a', { href: '#/workflows', text: '← all workflows' })),
      error,
      el('div', { class: 'split' }, el('div', {}, holder, el('details', {}, el('summary', { text: 'Definition' }), details)), form)
    )
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    startError.textContent = '';
    let value;
    try {
      value = JSON.parse(inputs.value.trim() === '' ? '{}' : inputs.value);
    } catch (problem) {
      startError.textContent = `The inputs are not valid JSON: ${problem.message}`;
      return;
    }
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      startError.textContent = 'The inputs must be a JSON object.';
      return;
    }
    button.disabled = true;
    try {
      const run = await post('/v1/runs', { workflowId: id, inputs: value }, control.signal);
      go(runHref(run.runId));
    } catch (problem) {
      if (!control.signal.aborted) startError.textContent = describe(problem);
    } finally {
      button.disabled = false;
    }
  });
  (async () => {
    try {
      const definition = await get(`/v1/workflows/${encodeURIComponent(id)}`, control.signal);
      if (definition.name) title.textContent = `${definition.name} (${id})`;
      holder.appendChild(draw(definition).element);
      details.textContent = pretty(definition);
    } catch (problem) {
      if (!control.signal.aborted) error.textContent = problem.message;
    }
  })();
  return () => control.abort();
}
