// Usage over time of one resource, drawn by hand in SVG: in_use and reserved as stacked step
// areas, the limit as a step line (broken where unlimited), time and value axes. The SVG scales
// with its viewBox; dragging across it selects a time range.

import { el, svg, limitText, timeText } from './dom.js';

const W = 640;
const H = 240;
const M = { left: 60, right: 16, top: 12, bottom: 38 };
const PLOT_W = W - M.left - M.right;
const PLOT_H = H - M.top - M.bottom;

function isUnlimited(limit) {
  return limit === null || limit === undefined || limit < 0;
}

// Round tick steps: 1, 2, 5 × 10^k.
function niceStep(max, count) {
  const raw = max / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const unit = [1, 2, 5, 10].find((m) => m * power >= raw) * power;
  return Math.max(1, unit);
}

function timeLabel(ms, spanMs) {
  const iso = new Date(ms).toISOString();
  if (spanMs > 2 * 86400e3) return iso.slice(5, 16).replace('T', ' ');
  if (spanMs > 3600e3) return iso.slice(11, 16);
  return iso.slice(11, 19);
}

// The vertices of a step line (each value holds until the next point), as [x, y] pairs.
function steps(xs, ys) {
  const out = [];
  for (let i = 0; i < xs.length; i += 1) {
    out.push([xs[i], ys[i]]);
    if (i + 1 < xs.length) out.push([xs[i + 1], ys[i]]);
  }
  return out;
}

function pointsText(vertices) {
  return vertices.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(' ');
}

// The last value of each series, shown beside the chart as text.
function lastValues(last) {
  const row = (series, label, value) => el('div', { class: `last last-${series}` },
    el('dt', {}, el('span', { class: `swatch swatch-${series}`, 'aria-hidden': 'true' }), label),
    el('dd', { 'data-last': series, text: value }));
  return el('dl', { class: 'chart-last', 'aria-label': 'Values at the end of the range' },
    row('in_use', 'in use', last ? String(last.in_use) : '–'),
    row('reserved', 'reserved', last ? String(last.reserved) : '–'),
    row('limit', 'limit', last ? limitText(last.limit) : '–'));
}

// A figure for `resource` with its `points` ({at, in_use, reserved, limit}, in time order).
// `onSelect(sinceIso, untilIso)` is called when a range is dragged across the chart.
export function chart(resource, points, onSelect) {
  const valid = points.filter((p) => !Number.isNaN(Date.parse(p.at)));
  const titleId = `chart-title-${resource.replace(/[^A-Za-z0-9_-]/g, '_')}`;
  const figure = el('figure', { class: 'chart', 'data-chart': resource });
  const caption = el('figcaption', { id: titleId, text: `Usage of ${resource} over time` });
  const root = svg('svg', {
    viewBox: `0 0 ${W} ${H}`, class: 'chart-svg', role: 'img', 'aria-labelledby': titleId,
    'data-resource': resource, preserveAspectRatio: 'xMidYMid meet',
  });
  if (valid.length === 0) {
    root.append(svg('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'chart-empty', text: 'No points in this range' }));
    figure.append(caption, el('div', { class: 'chart-body' }, root, lastValues(null)));
    return figure;
  }
  const times = valid.map((p) => Date.parse(p.at));
  const t0 = times[0];
  const t1 = times[times.length - 1] > t0 ? times[times.length - 1] : t0 + 1000;
  const top = Math.max(1, ...valid.map((p) => p.in_use + p.reserved),
    ...valid.filter((p) => !isUnlimited(p.limit)).map((p) => p.limit));
  const step = niceStep(top * 1.1, 4);
  const vmax = Math.ceil((top * 1.05) / step) * step;
  const x = (t) => M.left + ((t - t0) / (t1 - t0)) * PLOT_W;
  const y = (v) => M.top + PLOT_H - (Math.max(0, v) / vmax) * PLOT_H;
  const xs = times.map(x);
  if (xs.length === 1) xs.push(M.left + PLOT_W);
  const series = (f) => {
    const ys = valid.map((p) => y(f(p)));
    if (ys.length < xs.length) ys.push(ys[ys.length - 1]);
    return ys;
  };
  const base = y(0);

  // Axes and grid.
  const axes = svg('g', { class: 'chart-axes' });
  for (let v = 0; v <= vmax; v += step) {
    axes.append(
      svg('line', { x1: M.left, x2: M.left + PLOT_W, y1: y(v), y2: y(v), class: 'grid' }),
      svg('text', { x: M.left - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'tick', text: String(v) }));
  }
  const ticks = 4;
  for (let i = 0; i <= ticks; i += 1) {
    const t = t0 + ((t1 - t0) * i) / ticks;
    const anchor = i === 0 ? 'start' : i === ticks ? 'end' : 'middle';
    axes.append(
      svg('line', { x1: x(t), x2: x(t), y1: base, y2: base + 4, class: 'axis' }),
      svg('text', { x: x(t), y: base + 18, 'text-anchor': anchor, class: 'tick', text: timeLabel(t, t1 - t0) }));
  }
  axes.append(
    svg('line', { x1: M.left, x2: M.left + PLOT_W, y1: base, y2: base, class: 'axis' }),
    svg('line', { x1: M.left, x2: M.left, y1: M.top, y2: base, class: 'axis' }),
    svg('text', { x: M.left + PLOT_W, y: H - 1, 'text-anchor': 'end', class: 'axis-label', text: 'time (UTC)' }));

  // in_use: an area from the axis; reserved: stacked on top of it.
  const inUse = steps(xs, series((p) => p.in_use));
  const stacked = steps(xs, series((p) => p.in_use + p.reserved));
  const inUseArea = [[xs[0], base], ...inUse, [xs[xs.length - 1], base]];
  const reservedArea = [...stacked, ...inUse.slice().reverse()];
  const plot = svg('g', { class: 'chart-series' },
    svg('polygon', { points: pointsText(reservedArea), class: 'series-reserved', 'data-series': 'reserved' }),
    svg('polygon', { points: pointsText(inUseArea), class: 'series-in_use', 'data-series': 'in_use' }));

  // The limit: one path, broken where the limit is unlimited.
  let d = '';
  const limits = valid.map((p) => p.limit);
  if (limits.length < xs.length) limits.push(limits[limits.length - 1]);
  for (let i = 0; i < limits.length; i += 1) {
    if (isUnlimited(limits[i])) continue;
    const ly = y(limits[i]).toFixed(1);
    const start = xs[i].toFixed(1);
    const end = (i + 1 < xs.length ? xs[i + 1] : xs[i]).toFixed(1);
    d += (i > 0 && !isUnlimited(limits[i - 1]) ? `V${ly}` : `M${start},${ly}`) + `H${end}`;
  }
  plot.append(svg('path', { d: d || 'M0,0', class: 'series-limit', 'data-series': 'limit', fill: 'none' }));

  const selection = svg('rect', { class: 'chart-selection', x: 0, y: M.top, width: 0, height: PLOT_H, visibility: 'hidden' });
  root.append(svg('title', { text: `${resource}: in use, reserved and limit over time` }), axes, plot, selection);
  if (onSelect) dragToSelect(root, selection, (px) => t0 + ((px - M.left) / PLOT_W) * (t1 - t0), onSelect);

  const last = valid[valid.length - 1];
  figure.append(caption, el('div', { class: 'chart-body' }, root, lastValues(last)),
    el('p', { class: 'chart-range', text: `${timeText(valid[0].at)} to ${timeText(last.at)}, ${valid.length} points` }));
  return figure;
}

// Dragging across the plot draws a selection; releasing it zooms to that range.
function dragToSelect(root, selection, timeAt, onSelect) {
  let startX = null;
  const plotX = (event) => {
    const box = root.getBoundingClientRect();
    const px = ((event.clientX - box.left) / box.width) * W;
    return Math.min(M.left + PLOT_W, Math.max(M.left, px));
  };
  root.addEventListener('pointerdown', (event) => {
    startX = plotX(event);
    root.setPointerCapture(event.pointerId);
    selection.setAttribute('x', startX);
    selection.setAttribute('width', 0);
    selection.setAttribute('visibility', 'visible');
  });
  root.addEventListener('pointermove', (event) => {
    if (startX === null) return;
    const now = plotX(event);
    selection.setAttribute('x', Math.min(startX, now));
    selection.setAttribute('width', Math.abs(now - startX));
  });
  root.addEventListener('pointerup', (event) => {
    if (startX === null) return;
    const end = plotX(event);
    const [a, b] = [Math.min(startX, end), Math.max(startX, end)];
    startX = null;
    selection.setAttribute('visibility', 'hidden');
    if (b - a < 4) return;
    onSelect(new Date(timeAt(a)).toISOString(), new Date(timeAt(b)).toISOString());
  });
}

// A headroom bar: in_use and reserved as segments of the limit (nothing when unlimited).
export function headroomBar(limit, inUse, reserved) {
  if (isUnlimited(limit)) return el('span', { class: 'bar-none', text: 'no limit' });
  const scale = Math.max(limit, inUse + reserved, 1);
  const used = (inUse / scale) * 100;
  const held = (reserved / scale) * 100;
  const over = inUse + reserved > limit;
  const label = `${inUse} in use and ${reserved} reserved of ${limit}${over ? ' (over the limit)' : ''}`;
  return svg('svg', { viewBox: '0 0 100 10', preserveAspectRatio: 'none', class: `bar${over ? ' bar-over' : ''}`, role: 'img', 'aria-label': label },
    svg('title', { text: label }),
    svg('rect', { x: 0, y: 0, width: 100, height: 10, class: 'bar-track' }),
    svg('rect', { x: 0, y: 0, width: used.toFixed(2), height: 10, class: 'bar-in_use' }),
    svg('rect', { x: used.toFixed(2), y: 0, width: held.toFixed(2), height: 10, class: 'bar-reserved' }),
    svg('line', { x1: ((limit / scale) * 100).toFixed(2), x2: ((limit / scale) * 100).toFixed(2), y1: 0, y2: 10, class: 'bar-limit' }));
}
