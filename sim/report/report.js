(function () {
  'use strict';
  const NS = 'http://www.w3.org/2000/svg';
  const MU = '\u00b5';
  const DATA = JSON.parse(document.getElementById('report-data').textContent);
  const VARIANTS = DATA.variants;
  const PALETTE = ['#0072b2', '#e69f00', '#009e73', '#d55e00', '#cc79a7', '#56b4e9', '#8c6d1f', '#3f3f3f',
                   '#9467bd', '#17becf'];
  const colour = (i) => i < PALETTE.length ? PALETTE[i] : 'hsl(' + Math.round((i * 137.508) % 360) + ',55%,42%)';
  const colourOf = (v) => colour(VARIANTS.indexOf(v));
  const isNum = (x) => typeof x === 'number' && isFinite(x);
  // Loops rather than Math.max(...a): a long run's step list can exceed the engine's argument limit.
  const maxOf = (a) => a.reduce((m, x) => (x > m ? x : m), -Infinity);
  const minOf = (a) => a.reduce((m, x) => (x < m ? x : m), Infinity);
  const baseline = VARIANTS.find((v) => v.baseline);

  function el(parent, tag, attrs) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs || {}) e.setAttribute(k, String(attrs[k]));
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, str, attrs) {
    const t = el(parent, 'text', Object.assign({ x: x, y: y }, attrs || {}));
    t.textContent = str;
    return t;
  }
  function tip(e, str) { el(e, 'title').textContent = str; return e; }
  function html(parent, tag, attrs, str) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, String(attrs[k]));
    if (str !== undefined) e.textContent = str;
    if (parent) parent.appendChild(e);
    return e;
  }
  function clear(node) { while (node && node.firstChild) node.removeChild(node.firstChild); }
  function fmt(x, digits) {
    if (!isNum(x)) return 'n/a';
    const d = digits || 4;
    if (x === 0) return '0';
    const a = Math.abs(x);
    if (a >= 1e5) return Math.round(x).toLocaleString('en-US');
    return Number(x.toPrecision(d)).toString();
  }
  function pct(x) { return (x >= 0 ? '+' : '') + (100 * x).toFixed(1) + '%'; }
  function timeUnit(maxS) {
    if (maxS >= 1) return { f: 1, u: 's' };
    if (maxS >= 1e-3) return { f: 1e3, u: 'ms' };
    return { f: 1e6, u: MU + 's' };
  }
  function energyUnit(maxJ) { return maxJ >= 1 ? { f: 1, u: 'J' } : { f: 1e3, u: 'mJ' }; }

  // Ticks at 1, 2 or 5 times a power of ten, covering [lo, hi].
  function niceTicks(lo, hi, count) {
    if (!(hi > lo)) {
      const pad = lo === 0 ? 1 : Math.abs(lo) * 0.05;
      lo -= pad; hi += pad;
    }
    const raw = (hi - lo) / Math.max(1, count);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const norm = raw / mag;
    const step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
    const first = Math.floor(lo / step + 1e-9), last = Math.ceil(hi / step - 1e-9);
    const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    const ticks = [];
    for (let i = first; i <= last; ++i) ticks.push(i * step);
    return { lo: first * step, hi: last * step, ticks: ticks, label: (v) => v.toFixed(decimals) };
  }

  // Axes, grid and labels. opts.x is {bands: [names]} or {lo, hi}; opts.y is {lo, hi}.
  function frame(svg, opts) {
    const m = opts.margin, W = opts.width, H = opts.height;
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    const pw = W - m.l - m.r, ph = H - m.t - m.b;
    const g = el(svg, 'g', { transform: 'translate(' + m.l + ',' + m.t + ')' });
    const f = { g: g, pw: pw, ph: ph };
    const yt = opts.y.ticks ? { lo: opts.y.lo, hi: opts.y.hi, ticks: opts.y.ticks, label: opts.y.label }
                            : niceTicks(opts.y.lo, opts.y.hi, opts.yCount || 6);
    f.y = (v) => ph - (v - yt.lo) / (yt.hi - yt.lo) * ph;
    const grid = el(g, 'g', { class: 'grid' });
    const axis = el(g, 'g', { class: 'axis' });
    for (const v of yt.ticks) {
      el(grid, 'line', { x1: 0, x2: pw, y1: f.y(v), y2: f.y(v) });
      text(axis, -6, f.y(v) + 4, yt.label(v), { class: 'tick', 'text-anchor': 'end' });
    }
    if (opts.x.bands) {
      const n = opts.x.bands.length;
      f.band = pw / n;
      f.xBand = (i) => i * f.band;
      const lab = opts.x.labels;
      opts.x.bands.forEach((name, i) => {
        const cx = (i + 0.5) * f.band;
        const attrs = { class: 'tick' };
        if (opts.x.bold && opts.x.bold(i)) attrs['font-weight'] = 700;
        if (lab.rotate) {
          attrs['text-anchor'] = 'end';
          attrs.transform = 'rotate(-40 ' + cx + ' ' + (ph + 12) + ')';
          text(axis, cx, ph + 12, name, attrs);
        } else {
          attrs['text-anchor'] = 'middle';
          lab.lines[i].forEach((line, k) => text(axis, cx, ph + 15 + 13 * k, line, attrs));
        }
      });
    } else {
      const xt = niceTicks(opts.x.lo, opts.x.hi, opts.xCount || 8);
      f.x = (v) => (v - xt.lo) / (xt.hi - xt.lo) * pw;
      f.xLo = xt.lo; f.xHi = xt.hi;
      for (const v of xt.ticks) {
        el(grid, 'line', { x1: f.x(v), x2: f.x(v), y1: 0, y2: ph });
        text(axis, f.x(v), ph + 16, opts.x.label ? opts.x.label(v) : xt.label(v), { class: 'tick', 'text-anchor': 'middle' });
      }
    }
    el(axis, 'line', { x1: 0, x2: pw, y1: ph, y2: ph });
    el(axis, 'line', { x1: 0, x2: 0, y1: 0, y2: ph });
    text(axis, pw / 2, ph + m.b - 8, opts.xLabel, { class: 'axis-label', 'text-anchor': 'middle' });
    text(axis, 0, 0, opts.yLabel, { class: 'axis-label', 'text-anchor': 'middle',
      transform: 'translate(' + (14 - m.l) + ',' + ph / 2 + ') rotate(-90)' });
    return f;
  }

  function legendItem(c, col, label, kind) {
    const s = html(c.legend, 'span', { class: 'item' });
    const i = html(s, 'i', { class: kind || '' });
    if (kind && kind.indexOf('line') >= 0) i.style.borderTopColor = col; else i.style.background = col;
    s.appendChild(document.createTextNode(label));
  }
  function variantLegend(c, vs) {
    for (const v of vs) legendItem(c, colourOf(v), v.name + (v.baseline ? ' (baseline)' : ''));
  }
  function empty(c, message) {
    const W = c.wide ? 1320 : 660;
    c.svg.setAttribute('viewBox', '0 0 ' + W + ' 70');
    text(c.svg, W / 2, 40, message, { class: 'empty-msg', 'text-anchor': 'middle' });
    return { marks: 0, status: 'empty' };
  }
  function noMoeMessage() {
    const modes = Array.from(new Set(VARIANTS.map((v) => v.mode))).join(', ');
    return 'no MoE layers with routed tokens (workload mode ' + modes + ': no routing to show)';
  }
  // Labels under a band axis: wrapped after '-', '_' or ' ' into at most three lines when that fits
  // the band, else rotated; returns the room they need below the axis and left of it.
  const CHAR_W = 6.6;
  function bandLabels(names, width) {
    const band = width / names.length, perLine = Math.max(4, Math.floor(band / CHAR_W));
    const wrapped = names.map((name) => {
      const lines = [];
      let cur = '';
      for (const t of name.split(/(?<=[-_ ])/)) {
        if (cur && (cur + t).trim().length > perLine) { lines.push(cur.trim()); cur = t; } else cur += t;
      }
      if (cur) lines.push(cur.trim());
      return lines;
    });
    if (wrapped.every((ls) => ls.length <= 3 && ls.every((l) => l.length <= perLine)))
      return { lines: wrapped, space: 10 + 13 * maxOf(wrapped.map((l) => l.length)), left: 0 };
    const longest = maxOf(names.map((n) => n.length));
    const ang = 40 * Math.PI / 180;
    return { rotate: true, space: Math.min(210, 24 + longest * CHAR_W * Math.sin(ang)),
             left: Math.max(0, Math.min(170, names[0].length * CHAR_W * Math.cos(ang) - band / 2 - 50)) };
  }

  function drawLatency(c) {
    const vs = VARIANTS.filter((v) => isNum(v.p50) || isNum(v.p99));
    if (!vs.length) return empty(c, 'no variant has measured steps');
    const tu = timeUnit(maxOf(vs.map((v) => Math.max(v.p50 || 0, v.p99 || 0))));
    const names = vs.map((v) => v.name + (v.baseline ? ' (baseline)' : ''));
    const lab = bandLabels(names, 580);
    const top = maxOf(vs.map((v) => Math.max(v.p50 || 0, v.p99 || 0))) * tu.f * 1.1;
    const f = frame(c.svg, { width: 660 + lab.left, height: 330 + lab.space,
      margin: { l: 66 + lab.left, r: 14, t: 16, b: 30 + lab.space },
      x: { bands: names, labels: lab, bold: (i) => vs[i].baseline }, y: { lo: 0, hi: top },
      xLabel: 'variant', yLabel: 'step latency (' + tu.u + ')' });
    let marks = 0;
    vs.forEach((v, i) => {
      const col = colourOf(v);
      const bw = f.band * 0.36;
      const x0 = f.xBand(i) + f.band * 0.14;
      [['p50', v.p50, 0.45], ['p99', v.p99, 1]].forEach(([k, val, op], j) => {
        if (!isNum(val)) return;
        const y = f.y(val * tu.f);
        const r = el(f.g, 'rect', { x: x0 + j * bw, y: y, width: Math.max(1, bw - 2), height: Math.max(0, f.ph - y),
          fill: col, 'fill-opacity': op, stroke: col, 'data-mark': 1 });
        const base = baseline && isNum(baseline[k]) && !v.baseline ? ', ' + pct(val / baseline[k] - 1) + ' vs baseline' : '';
        tip(r, v.name + ': ' + k + ' ' + fmt(val * tu.f) + ' ' + tu.u + base);
        if (bw >= 30) text(f.g, x0 + j * bw + (bw - 2) / 2, y - 4, fmt(val * tu.f, 3), { class: 'tick', 'text-anchor': 'middle' });
        ++marks;
      });
    });
    if (baseline && isNum(baseline.p99)) {
      const y = f.y(baseline.p99 * tu.f);
      el(f.g, 'line', { x1: 0, x2: f.pw, y1: y, y2: y, stroke: '#333', 'stroke-dasharray': '5,4', 'stroke-width': 1.2 });
    }
    legendItem(c, 'rgba(80,90,100,0.45)', 'p50 (light)');
    legendItem(c, 'rgb(80,90,100)', 'p99 (solid)');
    if (baseline && isNum(baseline.p99))
      legendItem(c, '#333', 'baseline p99 (' + fmt(baseline.p99 * tu.f) + ' ' + tu.u + ')', 'line dashed');
    c.legend.appendChild(document.createTextNode(' \u00b7 colour = variant, as in every chart'));
    return { marks: marks };
  }

  // Line styles that tell variants apart without colour; the baseline is always solid.
  const DASHES = ['', '7,3', '2,3', '9,3,2,3', '4,4', '12,4', '2,2,6,2'];
  function lineLegend(c, col, label, dash, width, marker) {
    const s = html(c.legend, 'span', { class: 'item' });
    const svg = el(null, 'svg', { width: 30, height: 12, viewBox: '0 0 30 12', class: 'swatch' });
    el(svg, 'line', { x1: 1, x2: 29, y1: 6, y2: 6, stroke: col, 'stroke-width': width, 'stroke-dasharray': dash });
    if (marker === 'square') el(svg, 'rect', { x: 11.5, y: 2.5, width: 7, height: 7, fill: col, stroke: '#fff' });
    else if (marker) el(svg, 'circle', { cx: 15, cy: 6, r: 3.2, fill: col, stroke: '#fff' });
    s.appendChild(svg);
    s.appendChild(document.createTextNode(label));
  }
  function drawCdf(c) {
    const vs = VARIANTS.filter((v) => v.steps.length);
    if (!vs.length) return empty(c, 'no variant has measured steps');
    const all = [].concat.apply([], vs.map((v) => v.steps));
    const lo = minOf(all), hi = maxOf(all);
    const tu = timeUnit(hi);
    const pad = (hi - lo) * 0.03;
    const f = frame(c.svg, { width: 660, height: 380, margin: { l: 66, r: 18, t: 14, b: 46 },
      x: { lo: (lo - pad) * tu.f, hi: (hi + pad) * tu.f }, y: { lo: 0, hi: 1 }, yCount: 5,
      xLabel: 'step latency (' + tu.u + ')', yLabel: 'fraction of measured steps' });
    for (const q of [0.5, 0.99]) {
      el(f.g, 'line', { x1: 0, x2: f.pw, y1: f.y(q), y2: f.y(q), stroke: '#999', 'stroke-dasharray': '2,3' });
      text(f.g, 4, f.y(q) + 12, q === 0.5 ? 'p50' : 'p99', { class: 'tick' });
    }
    let marks = 0;
    const styleOf = (v) => {
      const others = vs.filter((x) => !x.baseline);
      return v.baseline ? { dash: '', width: 2.6, marker: 'square' }
                        : { dash: DASHES[(others.indexOf(v) + 1) % DASHES.length], width: 1.8, marker: 'circle' };
    };
    // The baseline last, over a white halo, so that no other curve hides it.
    const order = vs.filter((v) => !v.baseline).concat(vs.filter((v) => v.baseline));
    for (const v of order) {
      const s = v.steps.slice().sort((a, b) => a - b);
      const n = s.length;
      const st = styleOf(v);
      let d = 'M' + f.x(s[0] * tu.f).toFixed(2) + ',' + f.y(0).toFixed(2);
      s.forEach((x, i) => {
        const px = f.x(x * tu.f).toFixed(2);
        d += 'L' + px + ',' + f.y(i / n).toFixed(2) + 'L' + px + ',' + f.y((i + 1) / n).toFixed(2);
      });
      d += 'L' + f.pw.toFixed(2) + ',' + f.y(1).toFixed(2);
      if (v.baseline)
        el(f.g, 'path', { d: d, fill: 'none', stroke: '#fff', 'stroke-width': st.width + 3, 'stroke-opacity': 0.9 });
      const p = el(f.g, 'path', { d: d, fill: 'none', stroke: colourOf(v), 'stroke-width': st.width,
        'stroke-dasharray': st.dash, 'data-mark': 1 });
      tip(p, v.name + (v.baseline ? ' (baseline)' : '') + ': ' + n + ' steps, min ' + fmt(s[0] * tu.f) + ', p50 ' +
        fmt(v.p50 * tu.f) + ', p99 ' + fmt(v.p99 * tu.f) + ', max ' + fmt(s[n - 1] * tu.f) + ' ' + tu.u);
      ++marks;
      // Markers where the curve crosses p50 and p99: they stay visible where curves coincide.
      [[v.p50, 0.5], [v.p99, 0.99]].forEach(([x, q]) => {
        if (!isNum(x)) return;
        const cx = f.x(x * tu.f), cy = f.y(q);
        const mk = el(f.g, st.marker === 'square' ? 'rect' : 'circle', st.marker === 'square'
          ? { x: cx - 4, y: cy - 4, width: 8, height: 8, fill: colourOf(v), stroke: '#fff' }
          : { cx: cx, cy: cy, r: 3.4, fill: colourOf(v), stroke: '#fff' });
        tip(mk, v.name + ': p' + Math.round(q * 100) + ' ' + fmt(x * tu.f) + ' ' + tu.u);
      });
    }
    for (const v of vs) {
      const st = styleOf(v);
      const label = v.name + (v.baseline ? ' (baseline, drawn on top)' : '');
      lineLegend(c, colourOf(v), label, st.dash, st.width, st.marker);
    }
    return { marks: marks };
  }

  function drawLayers(c) {
    const all = VARIANTS.filter((v) => v.layers.length);
    if (!all.length) return empty(c, noMoeMessage());
    if (!c.selected) {
      c.selected = new Set(all.map((v) => v.name));
      const ctl = html(c.controls, 'span', {}, 'variants: ');
      for (const v of all) {
        const l = html(ctl, 'label', {});
        const box = html(l, 'input', { type: 'checkbox', 'data-variant': v.name });
        box.checked = true;
        box.addEventListener('change', () => {
          if (box.checked) c.selected.add(v.name); else c.selected.delete(v.name);
          c.repaint();
        });
        const sw = html(l, 'span', {}, ' ' + v.name);
        sw.style.color = colourOf(v);
      }
    }
    const vs = all.filter((v) => c.selected.has(v.name));
    if (!vs.length) return empty(c, 'no variant selected: tick one above');
    const vals = [].concat.apply([], vs.map((v) => v.layers.map((l) => Math.max(l.token_tail, l.a2a_tail))));
    const tu = timeUnit(maxOf(vals));
    const lmin = minOf(vs.map((v) => v.layers[0].layer));
    const lmax = maxOf(vs.map((v) => v.layers[v.layers.length - 1].layer));
    const top = maxOf(vals) * tu.f * 1.08;
    c.svg.setAttribute('viewBox', '0 0 1320 380');
    let marks = 0;
    const panels = [['token_tail', 'token_avg', 'token-processing tail (slowest GPU)', ''],
                    ['a2a_tail', 'a2a_avg', 'all-to-all tail (slowest GPU)', '6,4']];
    panels.forEach(([key, avgKey, title, dash], pi) => {
      const g = el(c.svg, 'svg', { x: pi * 660, y: 0, width: 660, height: 380 });
      const f = frame(g, { width: 660, height: 380, margin: { l: 66, r: 16, t: 26, b: 46 },
        x: { lo: lmin, hi: lmax, label: (v) => v.toFixed(0) }, xCount: Math.min(12, Math.max(1, lmax - lmin)),
        y: { lo: 0, hi: top }, xLabel: 'decoder layer index (MoE layers)', yLabel: title.split(' (')[0] + ' (' + tu.u + ')' });
      text(g, 66, 16, title, { class: 'axis-label', 'font-weight': 700 });
      for (const v of vs) {
        const col = colourOf(v);
        const d = v.layers.map((l, i) => (i ? 'L' : 'M') + f.x(l.layer).toFixed(2) + ',' + f.y(l[key] * tu.f).toFixed(2)).join('');
        const p = el(f.g, 'path', { d: d, fill: 'none', stroke: col, 'stroke-width': v.baseline ? 2.4 : 1.6,
          'stroke-dasharray': dash, 'data-mark': 1 });
        const worst = v.layers.reduce((a, b) => (b[key] > a[key] ? b : a));
        tip(p, v.name + ': ' + title + ', mean over layers ' + fmt(v.layers.reduce((s, l) => s + l[key], 0) /
          v.layers.length * tu.f) + ' ' + tu.u + ', worst layer ' + worst.layer + ' (' + fmt(worst[key] * tu.f) + ' ' + tu.u + ')');
        ++marks;
        if (v.layers.length <= 80) {
          for (const l of v.layers) {
            const dot = el(f.g, 'circle', { cx: f.x(l.layer), cy: f.y(l[key] * tu.f), r: 2.6, fill: dash ? '#fff' : col,
              stroke: col, 'stroke-width': 1.2 });
            tip(dot, v.name + ', layer ' + l.layer + ': ' + title.split(' (')[0] + ' ' + fmt(l[key] * tu.f) + ' ' + tu.u +
              ' (mean over GPUs ' + fmt(l[avgKey] * tu.f) + ' ' + tu.u + ')');
          }
        }
      }
    });
    variantLegend(c, vs);
    legendItem(c, '#333', 'token-processing tail', 'line');
    legendItem(c, '#333', 'all-to-all tail', 'line dashed');
    return { marks: marks };
  }

  const VIRIDIS = ['#440154', '#482878', '#3e4989', '#31688e', '#26828e', '#1f9e89', '#35b779', '#6ece58', '#b5de2b', '#fde725'];
  function viridis(t) {
    const x = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
    const i = Math.min(VIRIDIS.length - 2, Math.floor(x)), u = x - i;
    const a = VIRIDIS[i], b = VIRIDIS[i + 1];
    const ch = (h, k) => parseInt(h.substr(1 + 2 * k, 2), 16);
    const mix = [0, 1, 2].map((k) => Math.round(ch(a, k) + (ch(b, k) - ch(a, k)) * u));
    return 'rgb(' + mix.join(',') + ')';
  }

  function drawHeatmap(c) {
    const all = VARIANTS.filter((v) => v.layers.length);
    if (!all.length) return empty(c, noMoeMessage());
    if (!c.select) {
      const l = html(c.controls, 'label', {}, 'variant: ');
      c.select = html(l, 'select', {});
      for (const v of all) html(c.select, 'option', { value: v.name }, v.name + (v.baseline ? ' (baseline)' : ''));
      c.select.value = (baseline && baseline.layers.length ? baseline : all[0]).name;
      c.select.addEventListener('change', () => c.repaint());
    }
    const v = all.find((x) => x.name === c.select.value) || all[0];
    let vmax = 0;
    for (const x of all) for (const l of x.layers) for (const n of l.tokens) vmax = Math.max(vmax, n);
    const rows = v.layers.length;
    const cols = maxOf(v.layers.map((l) => l.tokens.length));
    const m = { l: 70, t: 30, r: 190, b: 52 };
    const cw = Math.min(80, (1320 - m.l - m.r) / cols);
    const rh = Math.max(5, Math.min(24, 620 / rows));
    const lh = Math.max(140, Math.min(rows * rh, 300));
    const W = 1320, H = m.t + Math.max(rows * rh, lh) + m.b;
    c.svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    const g = el(c.svg, 'g', { transform: 'translate(' + m.l + ',' + m.t + ')' });
    const axis = el(g, 'g', { class: 'axis' });
    let marks = 0;
    const rowEvery = Math.ceil(12 / rh), colEvery = Math.ceil(26 / cw);
    v.layers.forEach((l, r) => {
      const mean = l.tokens.reduce((s, n) => s + n, 0) / l.tokens.length;
      l.tokens.forEach((n, k) => {
        const cell = el(g, 'rect', { x: k * cw, y: r * rh, width: Math.max(0.5, cw - 1), height: Math.max(0.5, rh - 1),
          fill: viridis(vmax > 0 ? n / vmax : 0), 'data-mark': 1 });
        tip(cell, v.name + ', layer ' + l.layer + ', EP rank ' + k + ': ' + fmt(n) + ' tokens/step (' +
          (mean > 0 ? fmt(n / mean, 3) : 'n/a') + ' x layer mean)');
        ++marks;
      });
      if (r % rowEvery === 0) text(axis, -6, r * rh + rh / 2 + 4, String(l.layer), { class: 'tick', 'text-anchor': 'end' });
      const ratio = mean > 0 ? maxOf(l.tokens) / mean : NaN;
      if (r % rowEvery === 0)
        text(axis, cols * cw + 8, r * rh + rh / 2 + 4, isNum(ratio) ? ratio.toFixed(2) : 'n/a',
          { class: 'tick', fill: ratio > 1.5 ? '#b00020' : '#4a5462' });
    });
    for (let k = 0; k < cols; k += colEvery) text(axis, k * cw + cw / 2, rows * rh + 14, String(k), { class: 'tick', 'text-anchor': 'middle' });
    text(axis, cols * cw / 2, rows * rh + 38, 'EP rank', { class: 'axis-label', 'text-anchor': 'middle' });
    text(axis, -6, -10, 'MoE layer', { class: 'axis-label', 'text-anchor': 'end' });
    text(axis, cols * cw + 8, -10, 'max/mean', { class: 'tick', 'font-weight': 700 });
    // The colour scale.
    const lx = cols * cw + 90;
    const defs = el(c.svg, 'defs');
    const grad = el(defs, 'linearGradient', { id: 'heat-scale', x1: 0, y1: 1, x2: 0, y2: 0 });
    VIRIDIS.forEach((col, i) => el(grad, 'stop', { offset: (i / (VIRIDIS.length - 1)).toFixed(3), 'stop-color': col }));
    el(g, 'rect', { x: lx, y: 0, width: 16, height: lh, fill: 'url(#heat-scale)', stroke: '#999' });
    const lt = niceTicks(0, vmax > 0 ? vmax : 1, 5);
    for (const t of lt.ticks) {
      if (t > vmax && vmax > 0) continue;
      const y = lh - (vmax > 0 ? t / vmax : 0) * lh;
      el(axis, 'line', { x1: lx + 16, x2: lx + 20, y1: y, y2: y });
      text(axis, lx + 23, y + 4, lt.label(t), { class: 'tick' });
    }
    text(axis, lx - 4, -10, 'tokens/step', { class: 'tick', 'font-weight': 700 });
    c.svg.setAttribute('data-rows', String(rows));
    c.svg.setAttribute('data-cols', String(cols));
    c.svg.setAttribute('data-variant', v.name);
    const worst = v.layers.map((l) => ({ l: l.layer, r: maxOf(l.tokens) / (l.tokens.reduce((s, n) => s + n, 0) / l.tokens.length) }))
      .reduce((a, b) => (b.r > a.r ? b : a));
    html(c.note, 'span', {}, v.name + ': ' + rows + ' MoE layers x ' + cols + ' EP ranks; most imbalanced layer ' + worst.l +
      ' (max/mean ' + fmt(worst.r, 3) + '); colour scale 0..' + fmt(vmax) + ' tokens/step, shared by all variants.');
    return { marks: marks };
  }

  function drawPareto(c) {
    const vs = VARIANTS.filter((v) => isNum(v.p99) && isNum(v.energy_per_token));
    if (!vs.length) return empty(c, 'no variant has an energy per token (synthetic workloads process no tokens)');
    const tu = timeUnit(maxOf(vs.map((v) => v.p99)));
    const eu = energyUnit(maxOf(vs.map((v) => v.energy_per_token)));
    const xs = vs.map((v) => v.p99 * tu.f), ys = vs.map((v) => v.energy_per_token * eu.f);
    const span = (a) => { const lo = minOf(a), hi = maxOf(a); const p = (hi - lo) * 0.12 || Math.abs(hi) * 0.05 || 1; return [lo - p, hi + p]; };
    const [x0, x1] = span(xs), [y0, y1] = span(ys);
    const f = frame(c.svg, { width: 660, height: 400, margin: { l: 70, r: 18, t: 14, b: 46 }, x: { lo: x0, hi: x1 },
      y: { lo: y0, hi: y1 }, xLabel: 'p99 step latency (' + tu.u + ')', yLabel: 'energy per token (' + eu.u + ', all GPUs)' });
    const dominates = (a, b) => a.p99 <= b.p99 && a.energy_per_token <= b.energy_per_token &&
      (a.p99 < b.p99 || a.energy_per_token < b.energy_per_token);
    const front = vs.filter((p) => !vs.some((q) => dominates(q, p))).sort((a, b) => a.p99 - b.p99 || a.energy_per_token - b.energy_per_token);
    let d = '';
    front.forEach((p, i) => {
      const px = f.x(p.p99 * tu.f).toFixed(2), py = f.y(p.energy_per_token * eu.f).toFixed(2);
      d += i === 0 ? 'M' + px + ',0L' + px + ',' + py : 'H' + px + 'V' + py;
    });
    d += 'H' + f.pw;
    el(f.g, 'path', { d: d, fill: 'none', stroke: '#555', 'stroke-dasharray': '5,4', 'stroke-width': 1.3 });
    let marks = 0;
    const placed = [];
    // A label beside its point, moved up or down until it overlaps no earlier one; none if no room.
    const placeLabel = (cx, cy, str) => {
      const w = str.length * CHAR_W;
      const x = cx + 12 + w <= f.pw ? cx + 11 : cx - 11 - w;
      for (const dy of [-7, 15, -19, 27, -31, 39, -43, 51]) {
        const box = { x: x, y: cy + dy - 10, w: w, h: 12 };
        if (box.y < -4 || box.y + box.h > f.ph + 4) continue;
        if (placed.some((b) => b.x < box.x + box.w && box.x < b.x + b.w && b.y < box.y + box.h && box.y < b.y + b.h)) continue;
        placed.push(box);
        text(f.g, x, cy + dy, str, { class: 'tick' });
        return;
      }
    };
    const order = vs.filter((v) => !v.baseline).concat(vs.filter((v) => v.baseline));
    for (const v of order) {
      const cx = f.x(v.p99 * tu.f), cy = f.y(v.energy_per_token * eu.f);
      const onFront = front.indexOf(v) >= 0;
      if (onFront) el(f.g, 'circle', { cx: cx, cy: cy, r: 10, fill: 'none', stroke: '#222', 'stroke-width': 1.5 });
      const dot = el(f.g, v.baseline ? 'rect' : 'circle', v.baseline
        ? { x: cx - 6, y: cy - 6, width: 12, height: 12, fill: colourOf(v), stroke: '#222', transform: 'rotate(45 ' + cx + ' ' + cy + ')', 'data-mark': 1 }
        : { cx: cx, cy: cy, r: 6, fill: colourOf(v), stroke: '#fff', 'data-mark': 1 });
      tip(dot, v.name + (v.baseline ? ' (baseline)' : '') + ': p99 ' + fmt(v.p99 * tu.f) + ' ' + tu.u + ', ' +
        fmt(v.energy_per_token * eu.f) + ' ' + eu.u + '/token' + (onFront ? ', on the Pareto front' : ''));
      if (vs.length <= 16) placeLabel(cx, cy, v.name);
      ++marks;
    }
    c.svg.setAttribute('data-front', front.map((v) => v.name).join(','));
    variantLegend(c, vs);
    legendItem(c, '#fff', 'ringed: on the Pareto front', 'ring');
    legendItem(c, '#888', 'diamond: baseline', 'diamond');
    html(c.note, 'span', {}, 'Pareto front (lower left is better on both axes): ');
    const ul = html(c.note, 'ul', { class: 'front' });
    for (const v of front)
      html(ul, 'li', {}, v.name + (v.baseline ? ' (baseline)' : '') + ': p99 ' + fmt(v.p99 * tu.f) + ' ' + tu.u + ', ' +
        fmt(v.energy_per_token * eu.f) + ' ' + eu.u + '/token');
    return { marks: marks };
  }

  // One step of each of the sequential, overlapped and ideal timelines of one variant, per GPU: a row per
  // GPU with its compute lane (solid) above its communication lane (light, hatched), time from the
  // step's first event on x. Colour is the variant's, as in every chart; the shade says compute or
  // communication.
  const POLICIES = ['sequential', 'overlapped', 'ideal'];
  function drawTimelines(c) {
    const all = VARIANTS.filter((v) => v.activity && POLICIES.some((k) => v.activity[k]));
    if (!all.length) return empty(c, 'no timeline recorded a step (results written by an older moesim: rerun it)');
    if (!c.select) {
      const l = html(c.controls, 'label', {}, 'variant: ');
      c.select = html(l, 'select', {});
      for (const v of all) html(c.select, 'option', { value: v.name }, v.name + (v.baseline ? ' (baseline)' : ''));
      c.select.value = (baseline && all.indexOf(baseline) >= 0 ? baseline : all[0]).name;
      c.select.addEventListener('change', () => c.repaint());
    }
    const v = all.find((x) => x.name === c.select.value) || all[0];
    const col = colourOf(v);
    const shown = POLICIES.filter((k) => v.activity[k]);
    const span = maxOf(shown.map((k) => v.activity[k].span));
    const tu = timeUnit(span);
    const gpus = maxOf(shown.map((k) => v.activity[k].gpus.length));
    const laneH = gpus > 8 ? 5 : 8, rowH = 2 * laneH + 4, head = 22, groupGap = 12;
    const m = { l: 64, r: 110, t: 8, b: 46 };
    const plotH = shown.length * (head + gpus * rowH + groupGap);
    const W = 1320, H = m.t + plotH + m.b;
    const f = frame(c.svg, { width: W, height: H, margin: m, x: { lo: 0, hi: span * tu.f * 1.02 },
      y: { lo: 0, hi: 1, ticks: [], label: () => '' }, xLabel: 'time from the step\u2019s first event (' + tu.u + ')',
      yLabel: '' });
    const defs = el(c.svg, 'defs');
    const pat = el(defs, 'pattern', { id: 'comm-hatch', width: 5, height: 5, patternUnits: 'userSpaceOnUse',
      patternTransform: 'rotate(45)' });
    el(pat, 'rect', { width: 5, height: 5, fill: col, 'fill-opacity': 0.3 });
    el(pat, 'line', { x1: 0, y1: 0, x2: 0, y2: 5, stroke: col, 'stroke-width': 2 });
    let marks = 0, y = 0;
    for (const k of shown) {
      const a = v.activity[k];
      const requested = v.overlap === k;
      const title = text(f.g, 4, y + 15, k + (requested ? ' (requested)' : ''),
        { class: 'axis-label', 'font-weight': 700 });
      const sub = el(title, 'tspan', { class: 'tick', 'font-weight': 400, dx: 8 });
      sub.textContent = a.chunks + (a.chunks === 1 ? ' chunk' : ' chunks per MoE layer') +
        (k === 'ideal' ? ', contention off' : k === 'sequential' ? '' : ', contention on');
      y += head;
      const end = f.x(a.span * tu.f);
      el(f.g, 'line', { x1: end, x2: end, y1: y, y2: y + a.gpus.length * rowH, stroke: '#222', 'stroke-width': 1.2 });
      text(f.g, end + 4, y + 10, 'step ' + fmt(a.span * tu.f, 3) + ' ' + tu.u, { class: 'tick' });
      a.gpus.forEach((g, i) => {
        const ry = y + i * rowH;
        text(f.g, -6, ry + laneH + 3, 'GPU ' + i, { class: 'tick', 'text-anchor': 'end' });
        [['compute', g.compute, col], ['communication', g.comm, 'url(#comm-hatch)']].forEach(([lane, iv, fill], j) => {
          for (const [tb, te] of iv) {
            const b = tb * a.tick, e = te * a.tick;
            const x0 = f.x(b * tu.f), x1 = f.x(e * tu.f);
            const r = el(f.g, 'rect', { x: x0, y: ry + j * laneH, width: Math.max(0.6, x1 - x0), height: laneH - 1,
              fill: fill, stroke: j ? col : 'none', 'stroke-width': 0.5, 'data-mark': 1 });
            tip(r, v.name + ', ' + k + ', GPU ' + i + ': ' + lane + ' ' + fmt(b * tu.f) + '\u2013' + fmt(e * tu.f) + ' ' +
              tu.u);
            ++marks;
          }
        });
      });
      y += a.gpus.length * rowH + groupGap;
    }
    c.svg.setAttribute('data-variant', v.name);
    c.svg.setAttribute('data-policies', shown.join(','));
    c.svg.setAttribute('data-gpus', String(gpus));
    legendItem(c, col, 'compute (solid)');
    legendItem(c, 'rgba(0,0,0,0)', 'communication: dispatch, combine, collectives (light, hatched)', 'hatch');
    const hatch = c.legend.lastChild.firstChild;
    hatch.style.background = 'repeating-linear-gradient(45deg, ' + col + ' 0 2px, transparent 2px 5px)';
    hatch.style.borderColor = col;
    legendItem(c, '#222', 'end of the step', 'line');
    c.legend.appendChild(document.createTextNode(' \u00b7 colour = variant, as in every chart'));
    const parts = [];
    const ideal = v.activity.ideal, one = v.activity['ideal-1-chunk'], seq = v.activity.sequential;
    if (ideal && one && one.span > 0)
      parts.push('cost of chunking ideal(' + ideal.chunks + ' chunks) / ideal(1 chunk) \u2212 1 = ' +
        pct(ideal.span / one.span - 1));
    if (ideal && seq && seq.span > 0)
      parts.push('ideal vs sequential ' + pct(ideal.span / seq.span - 1));
    const first = v.activity[shown[0]];
    if (first.gpus_total > first.gpus.length)
      parts.push('first ' + first.gpus.length + ' of ' + first.gpus_total + ' GPUs shown');
    const missing = POLICIES.filter((k) => !v.activity[k]);
    if (missing.length) parts.push('not run: ' + missing.join(', ') + ' (overlap.timelines: requested)');
    html(c.note, 'span', {}, v.name + ', step ' + first.step + ' (warmup included): ' +
      (parts.length ? parts.join('; ') + '. ' : ''));
    if (v.trace) {
      html(c.note, 'span', {}, 'Every slice of the requested timeline\u2019s first steps: ');
      html(c.note, 'a', { href: (DATA.link_base || '') + v.trace }, v.trace);
      html(c.note, 'span', {}, ' (open it in Perfetto, see "Timeline traces" above).');
    }
    return { marks: marks };
  }

  // Every measured step in run order, one line per variant; a ring marks each step an online rebalance
  // came before (its migration included, docs/simulator.md "Online rebalancing").
  function drawSteps(c) {
    const vs = VARIANTS.filter((v) => v.steps.length);
    if (!vs.length) return empty(c, 'no variant has measured steps');
    const all = [].concat.apply([], vs.map((v) => v.steps));
    const hi = maxOf(all);
    const tu = timeUnit(hi);
    const n = maxOf(vs.map((v) => v.steps.length));
    const f = frame(c.svg, { width: 1320, height: 380, margin: { l: 66, r: 18, t: 14, b: 46 },
      x: { lo: 0, hi: Math.max(1, n - 1) }, y: { lo: 0, hi: hi * tu.f * 1.05 }, yCount: 5,
      xLabel: 'measured step', yLabel: 'step latency (' + tu.u + ')' });
    let marks = 0, rings = 0;
    for (const v of vs) {
      let d = '';
      v.steps.forEach((x, i) => { d += (i ? 'L' : 'M') + f.x(i).toFixed(2) + ',' + f.y(x * tu.f).toFixed(2); });
      const p = el(f.g, 'path', { d: d, fill: 'none', stroke: colourOf(v), 'stroke-width': v.baseline ? 1.8 : 1.2,
        'stroke-opacity': 0.85, 'data-mark': 1 });
      tip(p, v.name + ': ' + v.steps.length + ' steps, p50 ' + fmt(v.p50 * tu.f) + ', p99 ' + fmt(v.p99 * tu.f) + ' ' +
        tu.u + (v.rebalances.length ? ', ' + v.rebalances.length + ' rebalances' : ''));
      ++marks;
      for (const i of v.rebalances) {
        if (!(i >= 0 && i < v.steps.length)) continue;
        const r = el(f.g, 'circle', { cx: f.x(i), cy: f.y(v.steps[i] * tu.f), r: 3.5, fill: '#fff',
          stroke: colourOf(v), 'stroke-width': 1.5, 'data-mark': 1 });
        tip(r, v.name + ': rebalance before measured step ' + i + ', step ' + fmt(v.steps[i] * tu.f) + ' ' + tu.u);
        ++marks;
        ++rings;
      }
    }
    variantLegend(c, vs);
    if (rings) legendItem(c, '#222', 'a step an online rebalance came before (migration included)', 'ring');
    return { marks: marks };
  }

  const CHARTS = { latency: drawLatency, cdf: drawCdf, layers: drawLayers, heatmap: drawHeatmap, pareto: drawPareto,
                   timelines: drawTimelines, steps: drawSteps };
  let drawn = 0;
  const figures = document.querySelectorAll('figure.chart');
  for (const fig of figures) {
    const svg = fig.querySelector('svg');
    const c = { svg: svg, controls: fig.querySelector('.controls'), legend: fig.querySelector('.legend'),
                note: fig.querySelector('.note'), error: fig.querySelector('.error'), wide: fig.classList.contains('wide') };
    const draw = CHARTS[svg.getAttribute('data-chart')];
    const paint = () => {
      clear(svg); clear(c.legend); clear(c.note); clear(c.error);
      try {
        if (!draw) throw new Error('unknown chart ' + svg.getAttribute('data-chart'));
        const r = draw(c);
        svg.setAttribute('data-marks', String(r.marks));
        svg.setAttribute('data-status', r.status || (r.marks > 0 ? 'ok' : 'empty'));
        return true;
      } catch (e) {
        clear(svg);
        svg.setAttribute('viewBox', '0 0 660 8');
        svg.setAttribute('data-marks', '0');
        svg.setAttribute('data-status', 'error');
        c.error.textContent = 'This chart could not be drawn: ' + (e && e.message ? e.message : String(e));
        return false;
      }
    };
    c.repaint = paint;
    if (paint()) ++drawn;
  }
  document.body.dataset.rendered = String(drawn);
})();
