// The workflow as SVG: nodes at their `position` when every node has one, else a layered
// layout (longest-path layers, left to right). States live in data-state (styled by CSS).

import { svg } from './dom.js';

const H = 40;
const GAP_X = 70;
const GAP_Y = 26;
const PAD = 16;
const INTERRUPTS = new Set(['core.approvalGate', 'core.clarificationGate', 'core.interrupt']);

/** The edge's ends, whatever the field names. */
export function ends(edge) {
  return { from: edge.sourceNodeId ?? edge.source ?? edge.from, to: edge.targetNodeId ?? edge.target ?? edge.to };
}

function layered(nodes, edges, W) {
  const preds = new Map(nodes.map((node) => [node.id, []]));
  for (const edge of edges) {
    const { from, to } = ends(edge);
    if (preds.has(from) && preds.has(to) && from !== to) preds.get(to).push(from);
  }
  const layer = new Map();
  const onStack = new Set();
  const depth = (id) => {
    if (layer.has(id)) return layer.get(id);
    onStack.add(id);
    let best = 0;
    for (const pred of preds.get(id)) if (!onStack.has(pred)) best = Math.max(best, depth(pred) + 1);
    onStack.delete(id);
    layer.set(id, best);
    return best;
  };
  const rows = [];
  const at = new Map();
  for (const node of nodes) {
    const column = depth(node.id);
    rows[column] = (rows[column] || 0) + 1;
    at.set(node.id, { x: PAD + column * (W + GAP_X), y: PAD + (rows[column] - 1) * (H + GAP_Y) });
  }
  return at;
}

function placed(nodes) {
  const usable = nodes.length > 0 && nodes.every((node) => Number.isFinite(node.position?.x) && Number.isFinite(node.position?.y));
  if (!usable) return null;
  const minX = Math.min(...nodes.map((node) => node.position.x));
  const minY = Math.min(...nodes.map((node) => node.position.y));
  return new Map(nodes.map((node) => [node.id, { x: PAD + node.position.x - minX, y: PAD + node.position.y - minY }]));
}

/** Draws `definition` into a new `svg#graph`; returns {element, nodes: Map(id → g), edges: [{from, to, path}]}. */
export function draw(definition) {
  const nodes = Array.isArray(definition?.nodes) ? definition.nodes : [];
  const edges = Array.isArray(definition?.edges) ? definition.edges : [];
  const W = Math.max(110, ...nodes.map((node) => String(node.id).length * 7.5 + 24));
  const at = placed(nodes) || layered(nodes, edges, W);
  let width = PAD;
  let height = PAD;
  for (const point of at.values()) {
    width = Math.max(width, point.x + W + PAD);
    height = Math.max(height, point.y + H + PAD);
  }
  const root = svg('svg', {
    id: 'graph',
    viewBox: `0 0 ${width} ${height}`,
    width,
    height,
    role: 'img',
    'aria-label': `workflow ${definition?.id ?? ''}`,
  });
  root.appendChild(
    svg('defs', {}, svg('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: '10', refY: '5', markerUnits: 'userSpaceOnUse', markerWidth: '9', markerHeight: '9', orient: 'auto-start-reverse' }, svg('path', { d: 'M0,0 L10,5 L0,10 z' })))
  );
  const drawnEdges = [];
  for (const edge of edges) {
    const { from, to } = ends(edge);
    const a = at.get(from);
    const b = at.get(to);
    if (!a || !b) continue;
    const x1 = a.x + W;
    const y1 = a.y + H / 2;
    const x2 = b.x;
    const y2 = b.y + H / 2;
    const bend = Math.max(30, Math.abs(x2 - x1) / 2);
    const path = svg('path', {
      class: 'edge',
      'data-from': from,
      'data-to': to,
      'data-state': 'pending',
      d: `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}`,
      'marker-end': 'url(#arrow)',
    });
    if (edge.condition) path.appendChild(svg('title', { text: `condition: ${JSON.stringify(edge.condition)}` }));
    root.appendChild(path);
    drawnEdges.push({ from, to, path });
  }
  const drawnNodes = new Map();
  for (const node of nodes) {
    const point = at.get(node.id);
    const label = String(node.id);
    const g = svg(
      'g',
      {
        class: 'node',
        'data-node-id': node.id,
        'data-type': node.typeId,
        'data-state': 'pending',
        transform: `translate(${point.x},${point.y})`,
        'aria-label': `${label} (${node.typeId ?? ''})`,
      },
      svg('rect', { width: W, height: H, rx: 6 }),
      svg('text', { x: W / 2, y: H / 2 + 5, 'text-anchor': 'middle', text: label })
    );
    root.appendChild(g);
    drawnNodes.set(node.id, g);
  }
  return { element: root, nodes: drawnNodes, edges: drawnEdges, types: new Map(nodes.map((node) => [node.id, node.typeId])) };
}

/**
 * Follows node states through events. `apply(event)` updates the state; `paint(graph)` writes
 * data-state on the drawn nodes and edges.
 */
export class NodeStates {
  constructor(types) {
    this.types = types;
    this.state = new Map();
    this.started = new Map();
    this.completed = new Map();
    // Nodes a rerun took from its source's results (trellis.node.replayed, debug mode).
    this.replayed = new Set();
  }

  apply(event) {
    const id = event.nodeId ?? event.payload?.nodeId;
    const seq = event.sequence;
    switch (event.type) {
      case 'node.started':
      case 'node.resumed':
      case 'node.retried':
      case 'node.dispatched':
        this.state.set(id, 'running');
        this.started.set(id, seq);
        break;
      case 'node.completed':
        this.state.set(id, 'completed');
        this.completed.set(id, seq);
        break;
      case 'node.failed':
        this.state.set(id, 'failed');
        break;
      case 'node.skipped':
        this.state.set(id, 'skipped');
        break;
      case 'node.cancelled':
        this.state.set(id, 'cancelled');
        break;
      case 'node.suspended':
        this.state.set(id, INTERRUPTS.has(this.types.get(id)) || event.payload?.interruptId ? 'waiting' : 'running');
        break;
      case 'trellis.node.replayed':
        this.replayed.add(id);
        break;
      case 'run.cancelled':
        for (const [node, state] of this.state) if (state === 'running' || state === 'waiting') this.state.set(node, 'cancelled');
        break;
      default:
    }
  }

  edgeState(from, to) {
    if (this.state.get(to) === 'skipped') return 'skipped';
    const done = this.completed.get(from);
    const started = this.started.get(to);
    return done !== undefined && started !== undefined && started > done ? 'taken' : 'pending';
  }

  paint(graph) {
    for (const [id, g] of graph.nodes) {
      g.setAttribute('data-state', this.state.get(id) || 'pending');
      if (this.replayed.has(id) && !g.hasAttribute('data-replayed')) {
        // A cache hit: the node's result is its source run's (nothing was called again).
        g.setAttribute('data-replayed', 'true');
        g.appendChild(svg('text', { class: 'replayed', x: 4, y: -4, text: 'from cache' }));
        g.appendChild(svg('title', { text: 'result taken from the source run (rerun cache)' }));
      }
    }
    for (const edge of graph.edges) edge.path.setAttribute('data-state', this.edgeState(edge.from, edge.to));
  }
}
