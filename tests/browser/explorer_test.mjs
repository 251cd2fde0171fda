// Opens an explorer page (explorer/page.h) in Debian's headless chromium and
// checks it as a learner would use it (tests/cli/explorer_browser.sh runs it):
//   - no console error and no uncaught exception;
//   - clicking a named node (a box of the laid-out graph) shows the panel
//     with that op's name, module, formula and the engine's numbers (the
//     trace's values and gradient, decoded here independently of the page);
//   - stepping backward with the arrow key visits the nodes in the trace's
//     backward_order (the engine's order: tests/test_explorer.cpp checks the
//     trace against the engine), and forward in forward_order;
//   - every finite-difference check of the page passes, re-judged here from
//     its numbers, covers every element of every leaf (or the page's
//     sample of a large one), and clicking a
//     gradient cell shows that element's proof;
//   - a newcomer finds the proof from the page: a line under the summary
//     says how, and the summary's "finite differences" link opens the first
//     checked parameter with its proof;
//   - the graph's legend defines |grad|; the boxes' labels are drawn at
//     least 11 px high at 1600x1000, and the view follows the selected box;
//   - the heatmaps' numbers have room: at least 3 px between each number
//     and its cell's edges.
// Usage: node explorer_test.mjs PAGE.html [SCREENSHOT.png]
import fs from 'node:fs';
import puppeteer from 'puppeteer-core';

const [page_path, screenshot] = process.argv.slice(2);
const started = Date.now();
const fail = msg => { console.error('FAIL: ' + msg); process.exit(1); };
const check = (ok, msg) => { if (!ok) fail(msg); };

// The traces, read from the file itself: JSON blocks, tensors as base64.
const html = fs.readFileSync(page_path, 'utf8');
const traces = [...html.matchAll(/<script type="application\/json" class="qkv-trace" id="trace-\d+">([\s\S]*?)<\/script>/g)]
  .map(m => JSON.parse(m[1]));
check(traces.length > 0, 'no trace in the page');
const decode = t => {
  const b = Buffer.from(t.data, 'base64');
  const ab = b.buffer.slice(b.byteOffset, b.byteOffset + b.length);
  return Array.from(t.dtype === 'float64' ? new Float64Array(ab) : new Float32Array(ab));
};

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--allow-file-access-from-files'],
  defaultViewport: { width: 1600, height: 1000 },
});
try {
  const page = await browser.newPage();
  const errors = [];
  page.on('console', m => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', e => errors.push(String(e)));
  await page.goto('file://' + fs.realpathSync(page_path));
  await page.waitForSelector('body[data-ready="1"]', { timeout: 10000 });

  for (let t = 0; t < traces.length; ++t) {
    const tr = traces[t];
    await page.click(`#tabs button:nth-child(${t + 1})`);
    check(await page.$eval('#panel', p => p.dataset.trace) === String(t), `tab ${t} did not open`);

    // The labels are readable as the page opens (not only after zooming in),
    // and the legend says what |grad| is.
    const label_px = await page.$$eval('#graph g.node text', ts => Math.min(...ts.map(t =>
      parseFloat(t.getAttribute('font-size')) * Math.hypot(t.getScreenCTM().a, t.getScreenCTM().b))));
    check(label_px >= 11, `trace ${t}: graph labels drawn ${label_px.toFixed(1)} px high, under 11 px`);
    const legend = await page.$eval('#legend', l => l.textContent.replace(/\s+/g, ' '));
    check(legend.includes('|grad|') && legend.includes('Frobenius norm') &&
      legend.includes('sqrt(sum of squares)'), `legend does not define |grad|: ${legend}`);
    const howto = await page.$eval('#howto', h => h.textContent.replace(/\s+/g, ' '));
    check(howto.includes('finite differences') && howto.includes('outlined cell'),
      `no line says how to reach a proof: ${howto}`);

    // Click the named node: the last attention op if any, else the softmax.
    const target = [...tr.nodes].reverse().find(n => n.op === 'multi_head_attention') ||
      tr.nodes.find(n => n.op === 'softmax');
    check(target, `trace ${t}: no attention or softmax node`);
    // Pan to it first, as a learner would: the graph opens zoomed to read.
    const click_node = async id => {
      await page.evaluate(id => window.qkvExplorer.reveal(id), id);
      await page.click(`#graph g.node[data-node="${id}"]`);
    };
    await click_node(target.id);
    const shown = await page.$eval('#panel', p => ({
      node: p.dataset.node,
      title: p.querySelector('h2').firstChild.textContent,
      text: p.textContent,
      value: [...p.querySelectorAll('[data-role="value"] td')].map(td => +td.dataset.v),
      grad: [...p.querySelectorAll('[data-role="grad"] td')].map(td => +td.dataset.v),
      attention: [...p.querySelectorAll('[data-role="attention"] th')].map(th => th.textContent),
    }));
    check(shown.node === String(target.id), `clicking node ${target.id} selected ${shown.node}`);
    check(shown.title === target.op, `panel title ${shown.title}, expected ${target.op}`);
    check(shown.text.includes(target.module || '(top level)'), 'panel lacks the module path');
    check(shown.text.includes(target.forward) && shown.text.includes(target.backward),
      'panel lacks the forward formula or the backward rule');
    // The first 2-D slice shown is the tensor's first rows*cols numbers.
    const want_value = decode(target.value), want_grad = decode(target.grad);
    check(shown.value.length > 0 && shown.grad.length > 0, 'no value or gradient heatmap');
    shown.value.forEach((v, i) => check(v === want_value[i], `value[${i}] shown ${v}, engine ${want_value[i]}`));
    shown.grad.forEach((v, i) => check(v === want_grad[i], `grad[${i}] shown ${v}, engine ${want_grad[i]}`));
    if (target.saved && target.saved.P && target.saved.P.keys)
      for (const tok of target.saved.P.keys) check(shown.attention.includes(tok), `P lacks token ${tok}`);

    // Step backward with the arrow key: the engine's order, one op per step.
    await page.click('#mode-backward');
    const visited = [];
    for (let k = 0; k < tr.backward_order.length; ++k) {
      await page.keyboard.press('ArrowRight');
      visited.push(+await page.$eval('#panel', p => p.dataset.node));
      // The loss's op sends its gradient along an edge of the drawing: lit.
      if (k === 0) check(await page.$$eval('#graph g.edge.lit', es => es.length) > 0, 'step 1 lights no edge');
      // The view follows the step: the op's box is inside the graph's pane.
      check(await page.$$eval('#graph g.node.current', els => els.every(el => {
        const b = el.getBoundingClientRect(), g = document.getElementById('graph').getBoundingClientRect();
        return b.left >= g.left && b.right <= g.right && b.top >= g.top && b.bottom <= g.bottom;
      })), `backward step ${k + 1}: the op's box is outside the graph pane`);
      const count = await page.$eval('#step-count', s => s.textContent);
      check(count === `step ${k + 1} of ${tr.backward_order.length}`, `step counter says "${count}"`);
    }
    check(JSON.stringify(visited) === JSON.stringify(tr.backward_order),
      `backward steps visited ${visited}, engine order ${tr.backward_order}`);
    await page.click('#mode-forward');
    const fwd = [];
    for (let k = 0; k < tr.forward_order.length; ++k) {
      await page.keyboard.press('ArrowRight');
      fwd.push(+await page.$eval('#panel', p => p.dataset.node));
    }
    check(JSON.stringify(fwd) === JSON.stringify(tr.forward_order), 'forward steps out of order');

    // Every finite-difference check passes, judged again from its numbers,
    // and every element of every leaf that requires grad is checked.
    const fd = tr.finite_differences;
    check(fd && fd.checks.length > 0, `trace ${t}: no finite differences`);
    check(fd.precision === 'float64', `finite differences in ${fd.precision}, not float64`);
    const per_leaf = {};
    for (const [node, index, engine, value, rel, pass] of fd.checks) {
      check(pass && Math.abs(engine - value) <= fd.atol + fd.rtol * Math.abs(value),
        `finite difference fails: node ${node} element ${index}: engine ${engine}, fd ${value}`);
      (per_leaf[node] = per_leaf[node] || new Set()).add(index);
    }
    // A sampled leaf (a large tensor of a trained model's page) has its
    // `largest` + `random` elements checked; every other leaf every element.
    const sampled = new Set(fd.sampled_leaves || []);
    for (const n of tr.nodes.filter(n => n.kind === 'leaf')) {
      const numel = n.shape.reduce((a, b) => a * b, 1);
      const want = sampled.has(n.id) ? Math.min(numel, fd.largest + fd.random) : numel;
      check(per_leaf[n.id] && per_leaf[n.id].size === want,
        `leaf ${n.name}: ${per_leaf[n.id] ? per_leaf[n.id].size : 0} of ${want} elements checked`);
    }
    const summary = await page.$eval('#summary', s => s.textContent);
    check(summary.includes(`${fd.checks.length} checks`) && summary.includes('all pass'),
      `summary says: ${summary}`);

    // The summary's "finite differences" opens the first checked parameter
    // (an input when no parameter is checked) with its first check's proof.
    await page.click('#fd-link');
    const first = fd.checks.find(c => tr.nodes[c[0]].parameter) || fd.checks[0];
    const opened = await page.$eval('#panel', p => {
      const b = p.querySelector('#proof');
      return { node: +p.dataset.node, index: b && +b.dataset.index,
        engine: b && b.querySelector('.engine') && +b.querySelector('.engine').textContent,
        fd: b && b.querySelector('.fd') && +b.querySelector('.fd').textContent,
        picked: [...p.querySelectorAll('[data-role="grad"] td.picked')].map(td => +td.dataset.i) };
    });
    check(opened.node === first[0] && opened.index === first[1] && opened.engine === first[2] &&
      opened.fd === first[3], `the finite-differences link opened node ${opened.node} element ` +
      `${opened.index}, not the first check (node ${first[0]} element ${first[1]})`);
    check(JSON.stringify(opened.picked) === JSON.stringify([first[1]]), 'the proved cell is not marked');
    check(await page.$eval('#proof', b => { const r = b.getBoundingClientRect();
      return r.top >= 0 && r.bottom <= innerHeight; }), 'the proof opened out of sight');

    // Every number in the panel's heatmaps keeps 3 px from its cell's edges.
    const tight = await page.$$eval('#panel .heat td.num', tds => tds.map(td => {
      const range = document.createRange();
      range.selectNodeContents(td);
      const r = range.getBoundingClientRect(), c = td.getBoundingClientRect();
      return { text: td.textContent, gap: Math.min(r.left - c.left, c.right - r.right) };
    }).filter(x => x.gap < 3));
    check(tight.length === 0, `numbers touch their cells' edges: ${tight.slice(0, 3).map(x =>
      x.text + ' (' + x.gap.toFixed(1) + ' px)').join(', ')}`);

    // A leaf's proof: reach it from an op's input list (parameters are folded
    // into their op) or its own node, then click a gradient cell.
    const leaf = tr.nodes.find(n => n.kind === 'leaf' && n.shape.length === 2) ||
      tr.nodes.find(n => n.kind === 'leaf');
    const reader = tr.nodes.find(n => n.kind === 'op' && n.inputs.includes(leaf.id));
    await click_node(reader.id);
    await page.click(`#panel a.node-link[data-node="${leaf.id}"]`);
    check(await page.$eval('#panel', p => p.dataset.node) === String(leaf.id), 'leaf link did not open it');
    const cells = await page.$$('#panel [data-role="grad"] td');
    // An element the page checked (a sampled leaf has only some).
    const checked = fd.checks.filter(c => c[0] === leaf.id).map(c => c[1]);
    const pick = checked.includes(Math.min(cells.length - 1, 3)) ? Math.min(cells.length - 1, 3)
      : checked[0];
    await cells[pick].click();
    const proof = await page.$eval('#proof', b => ({
      index: +b.dataset.index, engine: +b.querySelector('.engine').textContent,
      fd: +b.querySelector('.fd').textContent, text: b.textContent,
    }));
    const row = fd.checks.find(c => c[0] === leaf.id && c[1] === proof.index);
    check(row && proof.engine === row[2] && proof.fd === row[3] && proof.text.includes('passes'),
      `proof of ${leaf.name}[${proof.index}] shows ${proof.engine} / ${proof.fd}`);
    check(proof.engine === decode(leaf.grad)[proof.index], 'proof engine value is not the gradient');
    check(proof.text.includes('float64'), 'proof does not say its precision');
  }

  if (screenshot) {
    const tr = traces.at(-1);
    await page.click(`#tabs button:nth-child(${traces.length})`);
    const att = tr.nodes.find(n => n.module && n.module.endsWith('cross_attn')) || tr.nodes[tr.loss];
    // Mid-way through the backward pass, at the cross-attention's step.
    await page.click('#mode-backward');
    for (let k = 0; k < tr.backward_order.length; ++k) {
      await page.keyboard.press('ArrowRight');
      if (await page.$eval('#panel', p => p.dataset.node) === String(att.id)) break;
    }
    await page.screenshot({ path: screenshot });
  }
  check(errors.length === 0, 'console errors: ' + errors.join(' | '));
  console.log(`ok: ${traces.length} traces, clicks, steps and finite differences checked in ` +
    `${((Date.now() - started) / 1000).toFixed(1)} s`);
} finally {
  await browser.close();
}
