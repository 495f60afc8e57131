// The one way the page builds DOM: elements, fixed attribute names, text as text.
// Nothing here parses markup; untrusted values only ever reach textContent or setAttribute.

const SVG_NS = 'http://www.w3.org/2000/svg';

function build(node, attrs, children) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (typeof value === 'function' && name.startsWith('on')) {
      node.addEventListener(name.slice(2), value);
    } else if (name === 'text') {
      node.textContent = String(value);
    } else {
      node.setAttribute(name, value === true ? '' : String(value));
    }
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else if (child instanceof Node) node.appendChild(child);
    else node.appendChild(document.createTextNode(String(child)));
  }
}

/** An HTML element: `el('a', {href: '#/runs'}, 'Runs')`. */
export function el(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** An SVG element. */
export function svg(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

/** Replaces the children of `node`. */
export function fill(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

/** Pretty JSON text (never markup). */
export function pretty(value) {
  return value === undefined ? '' : JSON.stringify(value, null, 2);
}

/** A short local time for an RFC 3339 timestamp. */
export function when(text) {
  const date = new Date(text);
  return Number.isNaN(date.getTime()) ? String(text ?? '') : date.toLocaleString();
}
