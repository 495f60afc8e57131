// The pending interrupt as a form: accept/reject buttons for approvals, else one input per
// property of the resume schema (string → text, number/integer → number, boolean → checkbox,
// enum → select, anything else → a JSON textarea), else one JSON textarea.

import { el, pretty } from './dom.js';

/** A starting JSON value for a property the form shows as JSON text. */
function skeleton(schema) {
  const object = [schema, ...(schema?.anyOf || []), ...(schema?.oneOf || [])].find((option) => option?.properties);
  if (object) return Object.fromEntries(Object.keys(object.properties).map((name) => [name, '']));
  if (schema?.type === 'array') return [];
  if (schema?.type === 'object') return {};
  return null;
}

function field(name, schema, required) {
  const label = `${schema.title || name}${required ? ' *' : ''}`;
  const common = { 'data-field': name, name, required: required || undefined, id: `interrupt-field-${name}` };
  let input;
  let read;
  if (Array.isArray(schema.enum)) {
    const shown = (option) => (typeof option === 'string' ? option : JSON.stringify(option));
    // Always a leading blank: a required choice is never answered by a value nobody picked
    // (the server refuses the missing field instead).
    const blank = el('option', { value: '', text: '—', disabled: required || undefined, selected: true });
    input = el('select', common, blank, schema.enum.map((option) => el('option', { value: shown(option), text: shown(option) })));
    read = () => {
      const at = input.selectedIndex - 1;
      return at < 0 ? undefined : schema.enum[at];
    };
  } else if (schema.type === 'string') {
    input = el('input', { ...common, type: 'text' });
    read = () => (input.value === '' && !required ? undefined : input.value);
  } else if (schema.type === 'number' || schema.type === 'integer') {
    input = el('input', { ...common, type: 'number', step: schema.type === 'integer' ? '1' : 'any' });
    read = () => (input.value === '' ? undefined : Number(input.value));
  } else if (schema.type === 'boolean') {
    input = el('input', { ...common, type: 'checkbox', required: undefined });
    read = () => input.checked;
  } else {
    input = el('textarea', { ...common, rows: 4, spellcheck: 'false' });
    const start = skeleton(schema);
    input.value = start === null ? '' : pretty(start);
    read = () => {
      if (input.value.trim() === '') return undefined;
      try {
        return JSON.parse(input.value);
      } catch {
        throw new Error(`${name}: not valid JSON`);
      }
    };
  }
  const hint = schema.description ? el('small', { text: schema.description }) : null;
  return { row: el('label', { class: schema.type === 'boolean' ? 'field check' : 'field' }, el('span', { text: label }), input, hint), read };
}

/**
 * The form for `interrupt` (the snapshot's). `submit(resumeValue)` resolves when the server
 * accepted it and rejects with the error to show.
 */
export function interruptForm(interrupt, submit) {
  const kind = interrupt.kind || interrupt.payload?.kind || 'interrupt';
  const payload = interrupt.payload || {};
  const data = payload.data || {};
  const error = el('p', { id: 'interrupt-error', class: 'error', role: 'alert' });
  const form = el('form', { id: 'interrupt', 'data-node-id': interrupt.nodeId, 'data-kind': kind, novalidate: true });
  const title = data.title || (kind === 'approval' ? 'Approval needed' : 'Input needed');
  form.appendChild(el('h3', { text: `${title} — ${interrupt.nodeId}` }));
  if (data.description) form.appendChild(el('p', { text: data.description }));
  if (Array.isArray(data.questions)) {
    form.appendChild(el('ul', { class: 'questions' }, data.questions.map((q) => el('li', {}, el('code', { text: q.id ?? '' }), ' ', q.question ?? ''))));
  }
  const buttons = el('div', { class: 'actions' });
  let collect;
  if (kind === 'approval') {
    const comment = el('textarea', { id: 'interrupt-comment', rows: 2, placeholder: 'Comment (optional)' });
    form.appendChild(el('label', { class: 'field' }, el('span', { text: 'Comment' }), comment));
    // A quorum counts one vote per voter: let the approver name themselves.
    const voter = Number(data.requiredApprovals) > 1 ? el('input', { id: 'interrupt-voter', type: 'text', autocomplete: 'off' }) : null;
    // Enter in the voter field must not submit: the form's first submit button is Accept.
    voter?.addEventListener('keydown', (event) => {
      if (event.key === 'Enter') event.preventDefault();
    });
    if (voter) form.appendChild(el('label', { class: 'field' }, el('span', { text: `Voter (${data.requiredApprovals} approvals needed)` }), voter));
    collect = (action) => {
      const value = { action };
      if (comment.value.trim()) value.comment = comment.value;
      if (voter && voter.value.trim()) value.voter = voter.value.trim();
      return value;
    };
    for (const action of ['accept', 'reject']) {
      buttons.appendChild(el('button', { type: 'submit', 'data-action': action, value: action, class: action, text: action === 'accept' ? 'Accept' : 'Reject' }));
    }
  } else if (payload.resumeSchema?.properties && typeof payload.resumeSchema.properties === 'object') {
    const required = new Set(payload.resumeSchema.required || []);
    const fields = Object.entries(payload.resumeSchema.properties).map(([name, schema]) => [name, field(name, schema || {}, required.has(name))]);
    for (const [, made] of fields) form.appendChild(made.row);
    collect = () => {
      const value = {};
      for (const [name, made] of fields) {
        const read = made.read();
        if (read !== undefined) value[name] = read;
      }
      return value;
    };
    buttons.appendChild(el('button', { type: 'submit', 'data-action': 'answer', text: 'Answer' }));
  } else {
    const text = el('textarea', { id: 'interrupt-value', 'data-field': 'value', rows: 4, spellcheck: 'false' });
    text.value = '{}';
    form.appendChild(el('label', { class: 'field' }, el('span', { text: 'Resume value (JSON)' }), text));
    collect = () => {
      try {
        return JSON.parse(text.value);
      } catch {
        throw new Error('the resume value is not valid JSON');
      }
    };
    buttons.appendChild(el('button', { type: 'submit', 'data-action': 'answer', text: 'Answer' }));
  }
  form.appendChild(buttons);
  form.appendChild(error);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const action = event.submitter?.getAttribute('data-action') || 'answer';
    error.textContent = '';
    let value;
    try {
      value = collect(action);
    } catch (problem) {
      error.textContent = problem.message;
      return;
    }
    for (const button of buttons.querySelectorAll('button')) button.disabled = true;
    try {
      await submit(value);
    } catch (problem) {
      error.textContent = problem.message;
    } finally {
      for (const button of buttons.querySelectorAll('button')) button.disabled = false;
    }
  });
  return form;
}
