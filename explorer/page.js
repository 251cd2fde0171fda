// The gradient explorer's page script (explorer/page.h writes it into the
// page). It reads the traces (docs/trace-format.md) from the page's
// <script class="qkv-trace"> blocks and the Graphviz layouts from its
// <template id="graph-N"> blocks, and computes nothing of its own: every
// number shown is one the library wrote into the trace.
(function () {
  'use strict';
  const body = document.body;
  const traces = Array.from(document.querySelectorAll('script.qkv-trace'))
    .map(s => JSON.parse(s.textContent));
  const docsBase = body.dataset.docsBase || '';
  const state = { t: 0, selected: null, mode: 'backward', step: -1, picked: null };
  window.qkvExplorer = { traces, state, decode, select, go, setMode, showTrace,
    reveal: id => reveal(boxOf(id)) };

  // ---- the page's frame ----------------------------------------------------------------
  body.insertAdjacentHTML('beforeend', `
<header><h1>qkv gradient explorer</h1><nav id="tabs"></nav><div id="summary"></div>
  <div id="howto" class="hint">Every gradient is proven by finite differences: click
    <b>finite differences</b> above for the first proof, or click a parameter in an op's
    inputs, then an outlined cell of its gradient.</div></header>
<div id="main">
  <div id="graph-wrap"><div id="legend">Arrows follow the forward pass; gradients flow
      against them. Each box: module: op, output shape,
      <span id="grad-norm" title="the Frobenius norm of dL/d(output): sqrt(sum of squares)">|grad| =
      ||dL/d(output)||, the Frobenius norm: sqrt(sum of squares)</span>, the parameters it reads.
      Click a box to inspect it; scroll to zoom, drag to pan.</div>
    <div id="graph"></div></div>
  <aside id="panel"></aside>
</div>
<footer>
  <button id="mode-backward" title="step through the backward pass, in the engine's order">Backward</button>
  <button id="mode-forward" title="step through the forward pass">Forward</button>
  <button id="first" title="first step (Home)">first</button>
  <button id="prev" title="previous step (left arrow)">&#x25C0; prev</button>
  <span id="step-count"></span>
  <button id="next" title="next step (right arrow)">next &#x25B6;</button>
  <button id="last" title="last step (End)">last</button>
  <span class="hint">keys: &larr; &rarr;</span>
  <span class="cmd" id="cmd"></span>
</footer>
<div id="tip"></div>`);
  const $ = id => document.getElementById(id);
  const panel = $('panel'), tip = $('tip');
  if (body.dataset.command) $('cmd').textContent = 'made by: ' + body.dataset.command;

  // ---- numbers ---------------------------------------------------------------------------
  function decode(t) {
    if (!t) return null;
    if (t._values) return t._values;
    const bin = atob(t.data);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; ++i) bytes[i] = bin.charCodeAt(i);
    t._values = t.dtype === 'float64' ? new Float64Array(bytes.buffer) : new Float32Array(bytes.buffer);
    return t._values;
  }
  const fmt = v => (Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3)) ? v.toExponential(2) : v.toFixed(4);
  const full = v => String(v);
  const shapeText = s => '(' + s.join(',') + ')';
  const esc = s => String(s).replace(/[&<>"]/g, c => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]));

  function trace() { return traces[state.t]; }
  function nodeName(n) {
    if (n.kind === 'leaf') return n.name;
    return (n.module ? n.module + ': ' : '') + n.op;
  }
  function docLink(page) {
    if (!page) return '';
    if (!docsBase) return `<code>${esc(page)}</code>`;
    const href = docsBase.replace(/\/?$/, '/') + page.replace(/^docs\//, '');
    return `<a href="${esc(href)}" target="_blank">${esc(page)}</a>`;
  }

  // ---- finite differences, indexed by node ---------------------------------------------
  function fdIndex(tr) {
    if (tr._fd !== undefined) return tr._fd;
    tr._fd = {};
    const fd = tr.finite_differences;
    if (!fd) return tr._fd;
    for (const c of fd.checks) {
      const [node, index, engine, value, rel, pass, step] = c;
      (tr._fd[node] = tr._fd[node] || {})[index] = { engine, fd: value, rel, pass, step: step || fd.step };
    }
    return tr._fd;
  }
  function fdTotals(tr) {
    const fd = tr.finite_differences;
    if (!fd) return null;
    let failed = 0, maxRel = 0;
    for (const c of fd.checks) {
      if (!c[5]) ++failed;
      if (Math.abs(c[3]) > fd.atol) maxRel = Math.max(maxRel, c[4]);
    }
    return { checked: fd.checks.length, failed, maxRel };
  }

  // ---- heatmaps --------------------------------------------------------------------------
  // A tensor as a table: the last two axes as rows and columns, the axes
  // before them chosen with selectors. kind 'signed' is blue (negative) to
  // red (positive), 'prob' white to blue. Hover shows the index and number.
  function heatmap(el, values, shape, opt) {
    opt = opt || {};
    const r = shape.length;
    const rows = r >= 2 ? shape[r - 2] : 1, cols = r >= 1 ? shape[r - 1] : 1;
    const lead = shape.slice(0, Math.max(0, r - 2));
    const pick = lead.map(() => 0);
    const wrap = document.createElement('div');
    el.appendChild(wrap);
    const sel = document.createElement('div');
    sel.className = 'slice';
    const axisNames = opt.axisNames || lead.map((_, i) => 'axis ' + i);
    lead.forEach((n, a) => {
      if (n <= 1) return;
      const label = document.createElement('label');
      label.textContent = axisNames[a] + ' ';
      const s = document.createElement('select');
      for (let i = 0; i < n; ++i) s.add(new Option(String(i), String(i)));
      s.onchange = () => { pick[a] = +s.value; draw(); };
      label.appendChild(s);
      sel.appendChild(label);
    });
    if (sel.childNodes.length) wrap.appendChild(sel);
    const table = document.createElement('table');
    table.className = 'heat';
    wrap.appendChild(table);
    function draw() {
      let base = 0, stride = rows * cols;
      for (let a = lead.length - 1; a >= 0; --a) { base += pick[a] * stride; stride *= lead[a]; }
      let max = 0;
      for (let k = 0; k < rows * cols; ++k) max = Math.max(max, Math.abs(values[base + k]));
      const showNum = cols <= 12;
      let html = '<tr><th></th>';
      for (let j = 0; j < cols; ++j) html += `<th>${esc(opt.colLabels ? opt.colLabels[j] : j)}</th>`;
      html += '</tr>';
      for (let i = 0; i < rows; ++i) {
        html += `<tr><th>${esc(opt.rowLabels ? opt.rowLabels[i] : i)}</th>`;
        for (let j = 0; j < cols; ++j) {
          const k = base + i * cols + j, v = values[k];
          const x = max > 0 ? v / max : 0;
          let bg;
          if (opt.kind === 'prob') bg = `rgba(43,108,176,${Math.min(1, Math.abs(v)).toFixed(3)})`;
          else bg = x >= 0 ? `rgba(214,69,65,${x.toFixed(3)})` : `rgba(43,108,176,${(-x).toFixed(3)})`;
          const dark = opt.kind === 'prob' ? Math.abs(v) > 0.6 : Math.abs(x) > 0.7;
          let cls = showNum ? 'num' : '';
          const check = opt.checks && opt.checks[k];
          if (check) cls += check.pass ? ' checked' : ' failed';
          html += `<td class="${cls}" data-i="${k}" data-v="${full(v)}" style="background:${bg};${dark ? 'color:#fff' : ''}">` +
            (showNum ? fmt(v) : '') + '</td>';
        }
        html += '</tr>';
      }
      table.innerHTML = html;
    }
    table.addEventListener('mousemove', e => {
      const td = e.target.closest('td');
      if (!td) { tip.style.display = 'none'; return; }
      const k = +td.dataset.i;
      const idx = []; let rest = k;
      for (let a = shape.length - 1; a >= 0; --a) { idx.unshift(rest % shape[a]); rest = Math.floor(rest / shape[a]); }
      let text = `${opt.name || ''}[${idx.join(', ')}] = ${td.dataset.v}`;
      const check = opt.checks && opt.checks[k];
      if (check) text += `\nfinite difference ${check.fd}` + (check.pass ? '  (passes; click for the proof)' : '  FAILS');
      tip.textContent = text;
      tip.style.display = 'block';
      tip.style.left = (e.clientX + 14) + 'px';
      tip.style.top = (e.clientY + 14) + 'px';
    });
    table.addEventListener('mouseleave', () => { tip.style.display = 'none'; });
    if (opt.onClick) table.addEventListener('click', e => {
      const td = e.target.closest('td');
      if (!td) return;
      table.querySelectorAll('td.picked').forEach(c => c.classList.remove('picked'));
      td.classList.add('picked');
      opt.onClick(+td.dataset.i);
    });
    draw();
    return table;
  }

  // ---- the panel ---------------------------------------------------------------------------
  function inputList(tr, n) {
    return n.inputs.map((id, i) => {
      if (id === null) return `<li>a constant ${shapeText(n.input_shapes[i])} (no gradient)</li>`;
      const m = tr.nodes[id];
      return `<li><a class="node-link" data-node="${id}">${esc(nodeName(m))}</a> ${shapeText(m.shape)}</li>`;
    }).join('');
  }
  function readers(tr, id) {
    return tr.nodes.filter(m => m.kind === 'op' && m.inputs.includes(id));
  }

  function stepNote(tr, n) {
    if (state.step < 0) return '';
    const order = state.mode === 'backward' ? tr.backward_order : tr.forward_order;
    if (order[state.step] !== n.id) return '';
    const k = state.step + 1, N = order.length;
    if (state.mode === 'backward') {
      const to = n.inputs.filter(x => x !== null).map(x => esc(nodeName(tr.nodes[x])));
      return `<div class="stepnote">Backward step ${k} of ${N}: this op receives dL/d(output) ${shapeText(n.shape)}
        (summed over every use of its output) and runs its backward rule, sending a gradient to
        ${to.join(', ')}. The orange edges carry them.</div>`;
    }
    return `<div class="stepnote">Forward step ${k} of ${N}: this op reads its inputs
      (the orange edges) and makes its output ${shapeText(n.shape)}.</div>`;
  }

  function showPanel(id) {
    const tr = trace(), n = tr.nodes[id];
    panel.dataset.node = String(id);
    panel.dataset.trace = String(state.t);
    state.picked = null;
    let h = `<h2>${esc(n.kind === 'op' ? n.op : n.name)}<span class="kind">${n.kind === 'op' ? 'op' : (n.parameter ? 'parameter' : 'input')}</span></h2>`;
    h += stepNote(tr, n);
    h += '<table class="facts">';
    if (n.kind === 'op') {
      h += `<tr><td>module</td><td><code>${esc(n.module || '(top level)')}</code></td></tr>`;
      h += `<tr><td>output</td><td>${shapeText(n.shape)}</td></tr>`;
      h += `<tr><td>inputs</td><td><ul style="margin:0;padding-left:18px">${inputList(tr, n)}</ul></td></tr>`;
      h += `<tr><td>forward</td><td><span class="formula">${esc(n.forward || '(no formula given)')}</span></td></tr>`;
      h += `<tr><td>backward</td><td><span class="formula">${esc(n.backward || '(no rule given)')}</span></td></tr>`;
      if (n.page) h += `<tr><td>derived in</td><td>${docLink(n.page)}</td></tr>`;
    } else {
      h += `<tr><td>shape</td><td>${shapeText(n.shape)}</td></tr>`;
      const rs = readers(tr, id);
      h += `<tr><td>read by</td><td>${rs.map(m => `<a class="node-link" data-node="${m.id}">${esc(nodeName(m))}</a>`).join(', ')}</td></tr>`;
    }
    h += '</table>';
    panel.innerHTML = h;
    const prec = tr.precision;
    const sec = (title, note) => {
      const d = document.createElement('div');
      d.innerHTML = `<h3>${title}</h3>` + (note ? `<div class="hint">${note}</div>` : '');
      panel.appendChild(d);
      return d;
    };
    if (n.saved && n.saved.P) attentionSection(n.saved.P);
    if (n.value) {
      const d = sec(n.kind === 'op' ? 'Output values' : 'Values', `${prec}; hover a cell for its index and number`);
      d.dataset.role = 'value';
      heatmap(d, decode(n.value), n.value.shape, { name: 'value', kind: 'signed' });
    }
    const fd = fdIndex(tr)[id];
    if (n.grad) {
      let note = `${prec}, from the engine's backward`;
      if (n.kind === 'leaf' && fd) note += '; outlined cells have a finite-difference check: click one for its proof';
      const d = sec(`Gradient dL/d(${n.kind === 'op' ? 'output' : esc(n.name)})`, note);
      d.dataset.role = 'grad';
      heatmap(d, decode(n.grad), n.grad.shape, {
        name: 'grad', kind: 'signed', checks: n.kind === 'leaf' ? fd : null,
        onClick: n.kind === 'leaf' ? (k => showProof(id, k)) : null,
      });
    } else if (n.kind === 'op') {
      sec('Gradient', 'no gradient reached this op');
    }
    if (n.kind === 'leaf') fdSection(tr, n, fd);
    panel.querySelectorAll('a.node-link').forEach(a => a.addEventListener('click', () => select(+a.dataset.node)));
  }

  function fdSection(tr, n, fd) {
    const all = tr.finite_differences;
    const d = document.createElement('div');
    d.dataset.role = 'fd';
    if (!all) { d.innerHTML = '<h3>Finite differences</h3><div class="hint">not computed for this trace</div>'; panel.appendChild(d); return; }
    const checks = fd ? Object.values(fd) : [];
    const failed = checks.filter(c => !c.pass).length;
    const numel = n.shape.reduce((a, b) => a * b, 1);
    const sampled = all.sampled_leaves.includes(n.id);
    d.innerHTML = `<h3>Finite-difference proof (${all.precision})</h3>
      <div>${checks.length} of ${numel} elements checked${sampled ? ` (a sample: the ${all.largest} of largest |gradient| and ${all.random} random ones)` : ' (every element)'}:
      <span class="${failed ? 'bad' : 'ok'}">${failed ? failed + ' fail' : 'all pass'}</span>.
      Each is (L(x+h) - L(x-h)) / 2h with h = ${all.step}, against the engine's gradient;
      it passes when |engine - fd| &le; ${all.atol} + ${all.rtol}&middot;|fd|.</div>
      <div id="proof" class="hint">Click a cell of the gradient above.</div>`;
    panel.appendChild(d);
  }

  function showProof(id, k) {
    const tr = trace(), fd = (fdIndex(tr)[id] || {})[k];
    const box = $('proof');
    if (!box) return;
    state.picked = k;
    const prec = tr.finite_differences.precision;
    if (!fd) { box.className = ''; box.textContent = `Element ${k} was not in the sample checked.`; return; }
    box.className = fd.pass ? '' : 'fail';
    box.dataset.index = String(k);
    box.innerHTML = `<b>element ${k}</b> ${fd.pass ? '&#x2714; passes' : '&#x2718; fails'}<table>
      <tr><td>engine dL/dx (${prec})</td><td class="engine">${full(fd.engine)}</td></tr>
      <tr><td>finite difference (${prec}), (L(x+h) - L(x-h)) / 2h</td><td class="fd">${full(fd.fd)}</td></tr>
      <tr><td>step h</td><td class="step">${fd.step}${fd.step !== tr.finite_differences.step ? ` (h = ${tr.finite_differences.step} failed: a kink, such as a ReLU's, lay within h)` : ''}</td></tr>
      <tr><td>|engine - fd|</td><td>${Math.abs(fd.engine - fd.fd).toExponential(2)}</td></tr>
      <tr><td>relative error</td><td class="rel">${fd.rel.toExponential(2)}</td></tr></table>`;
  }

  function attentionSection(P) {
    const d = document.createElement('div');
    d.dataset.role = 'attention';
    d.innerHTML = `<h3>Attention probabilities P per head</h3>
      <div class="hint">rows: queries; columns: the keys they attend over; each row sums to 1.
      Saved by the forward for the backward (${trace().precision}).</div>`;
    panel.appendChild(d);
    heatmap(d, decode(P), P.shape, {
      name: 'P', kind: 'prob', axisNames: ['batch', 'head'],
      rowLabels: P.queries, colLabels: P.keys,
    });
  }

  // ---- the graph ---------------------------------------------------------------------------
  let nodeEls = {}, edgeEls = [], panZoom = null;
  function showTrace(t) {
    state.t = t;
    state.step = -1;
    document.querySelectorAll('#tabs button').forEach((b, i) => b.classList.toggle('active', i === t));
    const g = $('graph');
    if (panZoom) { panZoom.destroy(); panZoom = null; }
    g.innerHTML = '';
    g.appendChild(document.getElementById('graph-' + t).content.cloneNode(true));
    const svg = g.querySelector('svg');
    svg.removeAttribute('width');
    svg.removeAttribute('height');
    svg.querySelectorAll('title').forEach(x => { if (x.parentNode.tagName === 'svg' || x.parentNode.id === 'graph0') x.remove(); });
    nodeEls = {};
    svg.querySelectorAll('g.node').forEach(el => {
      const title = el.querySelector('title');
      const m = title && /^v(\d+)$/.exec(title.textContent);
      if (!m) return;
      const id = +m[1];
      nodeEls[id] = el;
      el.dataset.node = String(id);
      title.remove();  // no native tooltip over ours
      el.addEventListener('click', () => select(id));
    });
    edgeEls = [];
    svg.querySelectorAll('g.edge').forEach(el => {
      const title = el.querySelector('title');
      const m = title && /^v(\d+)->v(\d+)$/.exec(title.textContent);
      if (m) edgeEls.push({ from: +m[1], to: +m[2], el });
    });
    if (typeof svgPanZoom === 'function') {
      panZoom = svgPanZoom(svg, { controlIconsEnabled: true, fit: true, center: true, minZoom: 0.2, maxZoom: 30, dblClickZoomEnabled: false });
      // A graph fitted whole is often too small to read (part 2's labels
      // came out 8.4 px high at 1600x1000): zoom until they are READABLE_PX, and
      // let the view follow the selected box (select() pans to it).
      const px = labelPx();
      if (px > 0 && px < READABLE_PX) panZoom.zoom(panZoom.getZoom() * READABLE_PX / px);
    }
    summary();
    select(trace().loss);
    updateStepper();
  }

  // The smallest font of the boxes' labels as drawn now, in CSS pixels.
  const READABLE_PX = 12;
  function labelPx() {
    let min = Infinity;
    Object.values(nodeEls).forEach(el => el.querySelectorAll('text').forEach(t => {
      const size = parseFloat(t.getAttribute('font-size')), m = t.getScreenCTM();
      if (size > 0 && m) min = Math.min(min, size * Math.hypot(m.a, m.b));
    }));
    return min === Infinity ? 0 : min;
  }
  // Pan so that a box outside the graph's pane (or at its edge) is centred.
  function reveal(el) {
    if (!panZoom || !el) return;
    const g = $('graph').getBoundingClientRect(), b = el.getBoundingClientRect(), m = 16;
    if (b.left >= g.left + m && b.right <= g.right - m && b.top >= g.top + m && b.bottom <= g.bottom - m) return;
    panZoom.panBy({ x: g.left + g.width / 2 - (b.left + b.width / 2), y: g.top + g.height / 2 - (b.top + b.height / 2) });
  }

  function summary() {
    const tr = trace();
    const fd = fdTotals(tr);
    let h = `<b>${esc(tr.title)}</b> &middot; loss ${fmt(tr.loss_value)} &middot; ${tr.nodes.length} variables,
      ${tr.forward_order.length} ops &middot; every number computed in <b>${tr.precision}</b>`;
    if (fd) h += ` &middot; <a id="fd-link" class="node-link" href="#" title="open the first checked parameter and its proof">finite differences: ${fd.checked} checks, <span class="${fd.failed ? 'bad' : 'ok'}">${fd.failed ? fd.failed + ' fail' : 'all pass'}</span></a>, largest relative error ${fd.maxRel.toExponential(1)}`;
    if (tr.description) h += `<div class="hint">${esc(tr.description)}</div>`;
    $('summary').innerHTML = h;
    if (fd) $('fd-link').addEventListener('click', e => { e.preventDefault(); openFirstProof(); });
  }

  // The summary's link: the first checked parameter (else input), its
  // gradient's checked cell picked and its proof shown.
  function openFirstProof() {
    const tr = trace(), checks = tr.finite_differences.checks;
    const c = checks.find(c => tr.nodes[c[0]].parameter) || checks[0];
    const [id, k] = c;
    select(id);
    const cell = panel.querySelector(`[data-role="grad"] td[data-i="${k}"]`);
    if (cell) cell.classList.add('picked');
    showProof(id, k);
    $('proof').scrollIntoView({ block: 'nearest' });
  }

  // The box a node is drawn in: its own, or for a leaf folded into the op
  // that reads it, that op's.
  function boxOf(id) {
    if (nodeEls[id]) return nodeEls[id];
    const rs = readers(trace(), id);
    return rs.length ? nodeEls[rs[0].id] : null;
  }

  function select(id) {
    state.selected = id;
    Object.values(nodeEls).forEach(el => el.classList.remove('selected'));
    const el = boxOf(id);
    if (el) { el.classList.add('selected'); reveal(el); }
    showPanel(id);
  }

  // ---- stepping ----------------------------------------------------------------------------
  function order() { return state.mode === 'backward' ? trace().backward_order : trace().forward_order; }
  function setMode(mode) { state.mode = mode; go(-1); }
  function go(k) {
    const o = order();
    state.step = Math.max(-1, Math.min(o.length - 1, k));
    Object.values(nodeEls).forEach(el => el.classList.remove('current', 'done'));
    edgeEls.forEach(e => e.el.classList.remove('lit'));
    if (state.step >= 0) {
      const id = o[state.step];
      for (let j = 0; j < state.step; ++j) if (nodeEls[o[j]]) nodeEls[o[j]].classList.add('done');
      if (nodeEls[id]) nodeEls[id].classList.add('current');
      edgeEls.forEach(e => { if (e.to === id) e.el.classList.add('lit'); });
      select(id);
    }
    updateStepper();
  }
  function updateStepper() {
    const o = order();
    $('step-count').textContent = state.step < 0
      ? `${state.mode}: press next (${o.length} steps)`
      : `step ${state.step + 1} of ${o.length}`;
    $('mode-backward').classList.toggle('active', state.mode === 'backward');
    $('mode-forward').classList.toggle('active', state.mode === 'forward');
    $('mode-backward').style.fontWeight = state.mode === 'backward' ? '700' : '400';
    $('mode-forward').style.fontWeight = state.mode === 'forward' ? '700' : '400';
  }
  $('mode-backward').onclick = () => setMode('backward');
  $('mode-forward').onclick = () => setMode('forward');
  $('first').onclick = () => go(0);
  $('last').onclick = () => go(order().length - 1);
  $('prev').onclick = () => go(state.step - 1);
  $('next').onclick = () => go(state.step + 1);
  document.addEventListener('keydown', e => {
    if (e.target.tagName === 'SELECT' || e.target.tagName === 'INPUT') return;
    if (e.key === 'ArrowRight') { go(state.step + 1); e.preventDefault(); }
    else if (e.key === 'ArrowLeft') { go(state.step - 1); e.preventDefault(); }
    else if (e.key === 'Home') go(0);
    else if (e.key === 'End') go(order().length - 1);
  });

  // ---- start -------------------------------------------------------------------------------
  traces.forEach((tr, i) => {
    const b = document.createElement('button');
    b.textContent = tr.title || ('trace ' + (i + 1));
    b.onclick = () => showTrace(i);
    $('tabs').appendChild(b);
  });
  showTrace(0);
  body.dataset.ready = '1';
})();
