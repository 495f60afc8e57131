// #/runs/ID: the run's graph (node states from its events), the event timeline, variables,
// outputs, child runs and the pending interrupt's form; all live from the event stream.

import { follow, get, post } from '../api.js';
import { el, fill, pretty, when } from '../dom.js';
import { draw, NodeStates } from '../graph.js';
import { interruptForm } from '../form.js';
import { runHref, workflowHref } from '../router.js';

const REFRESH_DEBOUNCE_MS = 250;
const TERMINAL = new Set(['completed', 'failed', 'cancelled']);
const LIVE_TEXT = { streaming: 'live: streaming', polling: 'live: polling', ended: 'ended', connecting: 'connecting…' };

/** Mounts run `id` into `root`; returns the cleanup. */
export function runPage(root, id) {
  const control = new AbortController();
  const signal = control.signal;
  const live = el('span', { id: 'live', 'data-state': 'connecting', text: LIVE_TEXT.connecting });
  const error = el('p', { id: 'run-error', class: 'error', role: 'alert' });
  const heading = el('h2', {}, 'Run ', el('code', { text: id }));
  const status = el('span', { class: 'status', 'data-status': '' });
  const workflow = el('a', { href: '#/workflows' });
  const meta = el('span', { class: 'muted' });
  const graphBox = el('div', { class: 'graph-box' });
  const interruptSlot = el('div', { id: 'interrupt-slot' });
  const children = el('ul', { id: 'child-runs' });
  const childBox = el('div', { class: 'children', hidden: true }, el('h3', { text: 'Child runs' }), children);
  const variables = el('pre', { id: 'variables', class: 'json' });
  const outputs = el('pre', { id: 'outputs', class: 'json' });
  const failure = el('pre', { id: 'run-failure', class: 'json error', hidden: true });
  const timeline = el('ol', { id: 'timeline' });
  const page = el(
    'section',
    { id: 'run-page', 'data-run-id': id, 'data-status': '' },
    el('div', { class: 'bar' }, heading, status, live),
    el('p', {}, 'Workflow ', workflow, ' ', meta),
    error,
    el(
      'div',
      { class: 'run-grid' },
      el('div', { class: 'left' }, graphBox, interruptSlot, failure, childBox, el('div', { class: 'data' }, el('div', {}, el('h3', { text: 'Variables' }), variables), el('div', {}, el('h3', { text: 'Outputs' }), outputs))),
      el('div', { class: 'right' }, el('h3', { text: 'Timeline' }), timeline)
    )
  );
  root.appendChild(page);

  let graph = draw({ nodes: [], edges: [] });
  graphBox.appendChild(graph.element);
  let states = new NodeStates(new Map());
  const seen = new Set();
  let formKey = null;

  const setMode = (mode) => {
    live.setAttribute('data-state', mode);
    live.textContent = LIVE_TEXT[mode] || mode;
  };

  const show = (run) => {
    page.setAttribute('data-status', run.status);
    status.setAttribute('data-status', run.status);
    status.textContent = run.status;
    workflow.setAttribute('href', workflowHref(run.workflowId));
    workflow.textContent = run.workflowId;
    meta.textContent = `version ${run.workflowVersion ?? '?'} · created ${when(run.createdAt)}${run.endedAt ? ` · ended ${when(run.endedAt)}` : ''}`;
    variables.textContent = pretty(run.variables ?? {});
    outputs.textContent = pretty(run.outputs ?? {});
    failure.hidden = !run.error;
    failure.textContent = run.error ? pretty(run.error) : '';
    const kids = Array.isArray(run.childRuns) ? run.childRuns : [];
    childBox.hidden = kids.length === 0;
    fill(children, kids.map((child) => el('li', {}, el('a', { class: 'child-run', 'data-run-id': child.runId, href: runHref(child.runId), text: child.runId }), ` ${child.nodeId ? `at ${child.nodeId} · ` : ''}${child.status ?? ''}`)));
    const pending = !TERMINAL.has(run.status) ? run.interrupt : null;
    const key = pending ? `${pending.interruptId ?? ''}|${pending.key ?? ''}|${pending.nodeId}` : null;
    if (key !== formKey) {
      formKey = key;
      fill(interruptSlot, pending ? interruptForm(pending, (value) => resolve(pending, value)) : null);
    }
  };

  let inFlight = false;
  let again = false;
  let timer = null;
  const refresh = async () => {
    if (inFlight) {
      again = true;
      return;
    }
    inFlight = true;
    try {
      show(await get(`/v1/runs/${encodeURIComponent(id)}`, signal));
      error.textContent = '';
    } catch (problem) {
      if (!signal.aborted) error.textContent = problem.message;
    } finally {
      inFlight = false;
    }
    if (again && !signal.aborted) {
      again = false;
      refresh();
    }
  };
  const later = () => {
    clearTimeout(timer);
    timer = setTimeout(refresh, REFRESH_DEBOUNCE_MS);
  };

  async function resolve(interrupt, resumeValue) {
    await post(`/v1/runs/${encodeURIComponent(id)}/interrupts/${encodeURIComponent(interrupt.nodeId)}`, { resumeValue }, signal);
    formKey = undefined; // Drawn again (or removed) by the next snapshot, whatever it holds.
    await refresh();
  }

  const entry = (event) =>
    el(
      'li',
      { 'data-sequence': event.sequence, 'data-type': event.type, 'data-node-id': event.nodeId },
      el(
        'details',
        {},
        el('summary', {}, el('span', { class: 'seq', text: `#${event.sequence}` }), ' ', el('span', { class: 'type', text: event.type }), event.nodeId ? el('span', { class: 'node', text: ` ${event.nodeId}` }) : null, el('time', { text: ` ${when(event.timestamp)}` })),
        el('pre', { class: 'json', text: pretty(event.payload) })
      )
    );

  const onEvents = (batch) => {
    const atBottom = timeline.scrollHeight - timeline.scrollTop - timeline.clientHeight < 40;
    for (const event of batch) {
      if (seen.has(event.sequence)) continue;
      seen.add(event.sequence);
      timeline.appendChild(entry(event));
      states.apply(event);
    }
    states.paint(graph);
    if (atBottom) timeline.scrollTop = timeline.scrollHeight;
    later();
  };

  let stop = () => {};
  (async () => {
    let run;
    try {
      run = await get(`/v1/runs/${encodeURIComponent(id)}`, signal);
      show(run);
    } catch (problem) {
      if (!signal.aborted) {
        error.textContent = problem.message;
        setMode('ended');
      }
      return;
    }
    try {
      const definition = await get(`/v1/workflows/${encodeURIComponent(run.workflowId)}`, signal);
      graph = draw(definition);
      states = new NodeStates(graph.types);
      fill(graphBox, graph.element);
    } catch (problem) {
      if (!signal.aborted) error.textContent = `The workflow could not be read: ${problem.message}`;
    }
    if (signal.aborted) return;
    stop = follow(id, {
      onEvents,
      onMode: (mode) => {
        setMode(mode);
        if (mode === 'ended') refresh();
      },
      onError: (problem) => {
        error.textContent = problem.message;
      },
    });
  })();

  return () => {
    control.abort();
    clearTimeout(timer);
    stop();
  };
}
