// #/runs: the runs list with status and workflow filters, refreshed every 2 s.

import { get, query } from '../api.js';
import { el, when } from '../dom.js';
import { go, runHref, workflowHref } from '../router.js';

const STATUSES = ['pending', 'running', 'paused', 'waiting-approval', 'waiting-input', 'waiting-external', 'completed', 'failed', 'cancelling', 'cancelled'];
const REFRESH_MS = 1500;

/** Mounts the page into `root`; returns the cleanup. */
export function runsPage(root) {
  const control = new AbortController();
  const status = el('select', { id: 'filter-status', 'aria-label': 'Status' }, el('option', { value: '', text: 'any status' }), STATUSES.map((name) => el('option', { value: name, text: name })));
  const workflow = el('input', { id: 'filter-workflow', type: 'search', placeholder: 'workflow id', 'aria-label': 'Workflow', autocomplete: 'off' });
  const body = el('tbody');
  const error = el('p', { id: 'runs-error', class: 'error', role: 'alert' });
  const empty = el('p', { class: 'muted', text: '' });
  const rows = new Map();
  root.appendChild(
    el(
      'section',
      { id: 'runs-page' },
      el('div', { class: 'bar' }, el('h2', { text: 'Runs' }), el('div', { class: 'filters' }, status, workflow)),
      error,
      el('table', { id: 'runs' }, el('thead', {}, el('tr', {}, el('th', { text: 'Run' }), el('th', { text: 'Status' }), el('th', { text: 'Workflow' }), el('th', { text: 'Created' }))), body),
      empty
    )
  );

  const row = (run) => {
    let tr = rows.get(run.runId);
    if (!tr) {
      tr = el(
        'tr',
        { 'data-run-id': run.runId, class: 'link', onclick: (event) => { if (!event.target.closest('a')) go(runHref(run.runId)); } },
        el('td', { 'data-field': 'id' }, el('a', { href: runHref(run.runId), text: run.runId })),
        el('td', { 'data-field': 'status' }),
        el('td', { 'data-field': 'workflow' }, el('a', { href: workflowHref(run.workflowId), text: run.workflowId })),
        el('td', { 'data-field': 'created', text: when(run.createdAt) })
      );
      rows.set(run.runId, tr);
    }
    const cell = tr.querySelector('[data-field=status]');
    if (cell.textContent !== run.status) {
      cell.textContent = run.status;
      cell.setAttribute('data-status', run.status);
    }
    return tr;
  };

  let timer = null;
  let generation = 0;
  const refresh = async () => {
    clearTimeout(timer);
    const mine = ++generation;
    try {
      const page = await get(`/v1/runs${query({ status: status.value, workflowId: workflow.value.trim(), limit: 100 })}`, control.signal);
      if (mine !== generation) return;
      const runs = page.runs || [];
      const keep = new Set(runs.map((run) => run.runId));
      for (const [id, tr] of rows) if (!keep.has(id)) { tr.remove(); rows.delete(id); }
      runs.forEach((run, at) => {
        const tr = row(run);
        if (body.children[at] !== tr) body.insertBefore(tr, body.children[at] || null);
      });
      empty.textContent = runs.length ? '' : 'No runs.';
      error.textContent = '';
    } catch (problem) {
      if (control.signal.aborted) return;
      error.textContent = problem.message;
    }
    if (!control.signal.aborted && mine === generation) timer = setTimeout(refresh, REFRESH_MS);
  };
  status.addEventListener('change', refresh);
  let typing = null;
  workflow.addEventListener('input', () => { clearTimeout(typing); typing = setTimeout(refresh, 300); });
  refresh();
  return () => { control.abort(); clearTimeout(timer); clearTimeout(typing); };
}
