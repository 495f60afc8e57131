// Talking to the API: the bearer key (sessionStorage only), the error envelope, and a run's
// events as SSE over a streamed fetch (resumed with Last-Event-ID) with a long-poll fallback.

const KEY = 'trellis.key';
const TERMINAL_EVENTS = new Set(['run.completed', 'run.failed', 'run.cancelled']);

/** The API base: the path before `/ui/` (empty on the embedded host, `/v` under a stage). */
export const base = (() => {
  const path = location.pathname;
  const at = path.lastIndexOf('/ui/');
  return at < 0 ? '' : path.slice(0, at);
})();

/** The stored key, or null. */
export const key = () => sessionStorage.getItem(KEY);
/** Keeps the key for this tab only. */
export const setKey = (value) => sessionStorage.setItem(KEY, value);
/** Forgets the key. */
export const clearKey = () => sessionStorage.removeItem(KEY);

let unauthorized = () => {};
/** Registers what a 401 does (back to sign-in with the server's message). */
export function onUnauthorized(handler) {
  unauthorized = handler;
}

/** A non-2xx answer: the envelope's code and message. */
export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

function headers(extra) {
  const out = { Accept: 'application/json', ...extra };
  const value = key();
  if (value) out.Authorization = `Bearer ${value}`;
  return out;
}

async function failure(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  const message = (body && typeof body.message === 'string' && body.message) || `HTTP ${response.status}`;
  const error = new ApiError(response.status, body && body.error, message, body && body.details);
  if (response.status === 401) unauthorized(message);
  return error;
}

/** An error as text: the envelope's message, then its details when it has any. */
export function describe(error) {
  const details = error instanceof ApiError && error.details ? ` (${JSON.stringify(error.details)})` : '';
  return `${error.message}${details}`;
}

/** `method path` with an optional JSON body; resolves to the parsed JSON answer. */
export async function call(method, path, body, signal) {
  const init = { method, headers: headers(body === undefined ? {} : { 'Content-Type': 'application/json' }), signal };
  if (body !== undefined) init.body = JSON.stringify(body);
  init.cache = 'no-store';
  init.credentials = 'omit';
  const response = await fetch(base + path, init);
  if (!response.ok) throw await failure(response);
  const text = await response.text();
  return text ? JSON.parse(text) : null;
}

/** `GET path`. */
export const get = (path, signal) => call('GET', path, undefined, signal);
/** `POST path body`. */
export const post = (path, body, signal) => call('POST', path, body, signal);

/** A query string of the set values of `params`. */
export function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') search.set(name, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : '';
}

const pause = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });

/** Splits SSE text into frames; returns [events, rest]. */
function frames(buffer) {
  const events = [];
  const text = buffer.replace(/\r\n?/g, '\n');
  const blocks = text.split('\n\n');
  const rest = blocks.pop();
  for (const block of blocks) {
    const data = [];
    for (const line of block.split('\n')) {
      if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
    if (!data.length) continue;
    try {
      events.push(JSON.parse(data.join('\n')));
    } catch {
      // A frame that is not JSON is not an event document.
    }
  }
  return [events, rest];
}

/**
 * Follows the events of run `id` from the start: `onEvents(batch)` for each batch in order,
 * `onMode('streaming'|'polling'|'ended')`, `onError(error)`. Returns `stop()`.
 */
export function follow(id, { onEvents, onMode, onError }) {
  const control = new AbortController();
  const signal = control.signal;
  const path = `/v1/runs/${encodeURIComponent(id)}/events`;
  let last = null;
  let ended = false;

  const deliver = (batch) => {
    const fresh = batch.filter((event) => typeof event.sequence === 'number' && (last === null || event.sequence > last));
    if (!fresh.length) return;
    last = fresh[fresh.length - 1].sequence;
    if (fresh.some((event) => TERMINAL_EVENTS.has(event.type))) ended = true;
    onEvents(fresh);
  };

  async function stream() {
    const extra = { Accept: 'text/event-stream' };
    if (last !== null) extra['Last-Event-ID'] = String(last);
    const response = await fetch(`${base}${path}?streamMode=debug`, {
      headers: headers(extra),
      signal,
      cache: 'no-store',
      credentials: 'omit',
    });
    if (!response.ok) throw await failure(response);
    if (!response.body || !response.body.getReader) throw new Error('streaming is not available');
    onMode('streaming');
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      const [events, rest] = frames(buffer);
      buffer = rest;
      deliver(events);
    }
  }

  async function poll() {
    onMode('polling');
    while (!signal.aborted && !ended) {
      const page = await get(`${path}/poll${query({ lastSequence: last ?? undefined, timeout: 20 })}`, signal);
      deliver(page.events || []);
      if (page.isTerminal && !(page.events || []).length) ended = true;
    }
  }

  (async () => {
    let failures = 0;
    while (!signal.aborted && !ended) {
      try {
        await stream();
        failures = 0;
        if (!ended) await pause(500, signal);
      } catch (error) {
        if (signal.aborted) return;
        if (error instanceof ApiError && error.status === 401) return;
        failures += 1;
        if (failures >= 2 || error instanceof ApiError) break;
        await pause(1000, signal);
      }
    }
    while (!signal.aborted && !ended) {
      try {
        await poll();
      } catch (error) {
        if (signal.aborted) return;
        if (error instanceof ApiError && error.status === 401) return;
        onError(error);
        await pause(2000, signal);
      }
    }
    if (!signal.aborted) onMode('ended');
  })();

  return () => control.abort();
}
