// evolve serve: a run's program tree, drawn as SVG and grown live. Each island is a lane, each program a dot at
// its iteration (x), parent -> child edges, colour by scalar (viridis over the run's range), solved programs ringed
// in red. It polls /api/runs/RUN/tree?since=LAST and adds only the programs it has not seen.
"use strict";

(() => {
  const { el, getJSON, num, colour, statusBadge, topBar } = evolve;
  const SVG = "http://www.w3.org/2000/svg";
  const POLL_MS = 1500;
  const SLOT = 14; // vertical distance between programs of one island and iteration
  const LEFT = 80, TOP = 8, BOTTOM = 26, RIGHT = 16;
  const runId = Number(location.pathname.split("/")[2]);

  const nodes = new Map(); // id -> {id, parent, island, iteration, scalar, solved, number, slot, dot, edge}
  const slots = new Map(); // "island:iteration" -> programs there so far
  let last = 0, run = null, selected = null, lo = Infinity, hi = -Infinity, timer = null;

  const svg = document.createElementNS(SVG, "svg");
  const lanes = document.createElementNS(SVG, "g");
  const edges = document.createElementNS(SVG, "g");
  const dots = document.createElementNS(SVG, "g");
  svg.append(lanes, edges, dots);
  svg.setAttribute("id", "tree-svg");
  document.getElementById("tree").append(svg);

  function svgEl(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    return node;
  }

  function add(node) {
    const key = `${node.island}:${node.iteration}`;
    node.slot = slots.get(key) || 0;
    slots.set(key, node.slot + 1);
    node.number = nodes.size + 1;
    node.dot = svgEl("circle", { class: "node fresh" + (node.solved ? " solved" : ""), r: node.solved ? 6 : 4.5,
      "data-id": node.id, "data-island": node.island });
    const label = `#${node.id} · iteration ${node.iteration} · island ${node.island} · scalar ${num(node.scalar)}` +
      (node.solved ? " · solved" : "");
    node.dot.append(svgEl("title", {}));
    node.dot.firstChild.textContent = label;
    node.dot.addEventListener("click", () => select(node.id));
    dots.append(node.dot);
    if (node.parent !== null) {
      node.edge = svgEl("path", { class: "edge", "data-child": node.id });
      edges.append(node.edge);
    }
    nodes.set(node.id, node);
    lo = Math.min(lo, node.scalar);
    hi = Math.max(hi, node.scalar);
  }

  function layout() {
    const islands = Math.max(run ? run.islands : 1, ...[...nodes.values()].map((n) => n.island + 1));
    const iterations = Math.max(run ? run.iterations_target : 1, ...[...nodes.values()].map((n) => n.iteration));
    const depth = Math.max(3, ...slots.values());
    const laneHeight = 12 + depth * SLOT;
    const width = Math.max(document.getElementById("tree-box").clientWidth - 4, 480);
    const step = Math.max(10, (width - LEFT - RIGHT) / Math.max(1, iterations));
    const fullWidth = LEFT + RIGHT + step * Math.max(1, iterations);
    const height = TOP + islands * laneHeight + BOTTOM;
    svg.setAttribute("width", fullWidth);
    svg.setAttribute("height", height);
    svg.setAttribute("viewBox", `0 0 ${fullWidth} ${height}`);
    lanes.replaceChildren();
    for (let i = 0; i < islands; i++) {
      lanes.append(svgEl("rect", { class: "lane" + (i % 2 ? " odd" : ""), x: 0, y: TOP + i * laneHeight,
        width: fullWidth, height: laneHeight }));
      const label = svgEl("text", { class: "lane-label", x: 6, y: TOP + i * laneHeight + 14 });
      label.textContent = `island ${i}`;
      lanes.append(label);
    }
    const every = Math.max(1, Math.ceil(40 / step));
    for (let t = 0; t <= iterations; t += every) {
      const tick = svgEl("text", { class: "tick", x: LEFT + t * step, y: height - 8, "text-anchor": "middle" });
      tick.textContent = t;
      lanes.append(tick);
    }
    const axis = svgEl("text", { class: "tick", x: 6, y: height - 8 });
    axis.textContent = "iteration →";
    lanes.append(axis);
    const span = hi - lo;
    for (const node of nodes.values()) {
      node.x = LEFT + node.iteration * step;
      node.y = TOP + node.island * laneHeight + 12 + node.slot * SLOT;
      node.dot.setAttribute("cx", node.x);
      node.dot.setAttribute("cy", node.y);
      node.dot.setAttribute("fill", colour(span > 0 ? (node.scalar - lo) / span : 1));
    }
    for (const node of nodes.values()) {
      const parent = nodes.get(node.parent);
      if (!node.edge || !parent) continue;
      const mid = (parent.x + node.x) / 2;
      node.edge.setAttribute("d", `M${parent.x},${parent.y} C${mid},${parent.y} ${mid},${node.y} ${node.x},${node.y}`);
    }
    legend();
  }

  function legend() {
    const box = document.getElementById("legend");
    box.replaceChildren(el("span", { text: `scalar ${num(lo === Infinity ? null : lo)}` }),
      el("span", { class: "ramp" }), el("span", { text: num(hi === -Infinity ? null : hi) }),
      el("span", { class: "ring" }), el("span", { text: "solved" }),
      el("span", { text: "· lanes: islands · edges: parent → child · click a dot" }));
  }

  function header() {
    const head = document.getElementById("run-head");
    const live = run.status === "running";
    head.replaceChildren(
      el("h1", { id: "run-title", text: `run ${run.id}: ${run.problem}` }),
      statusBadge(run.status),
      el("span", { class: "fact" }, "policy ", el("b", { text: run.policy }), ` · seed ${run.seed}`),
      el("span", { class: "fact" }, "iterations ", el("b", { id: "iterations", text:
        `${run.iterations_done}/${run.iterations_target}` })),
      el("span", { class: "fact" }, "programs ", el("b", { id: "program-count", text: nodes.size })),
      el("span", { class: "fact" }, "best ", el("b", { text: num(run.best) })),
      run.solved_programs ? el("span", { class: "fact" }, "solved ", el("b", { text: run.solved_programs })) : null,
      run.experiment ? el("a", { href: `/experiments/${encodeURIComponent(run.experiment)}/report`, id: "run-report-link",
        text: `experiment report (${run.experiment})` }) : null,
      el("span", { id: "live", class: live ? "on muted" : "muted", text: live
        ? `live, updated ${new Date().toLocaleTimeString()}` : `not running (${run.status})` }));
  }

  function highlightChain(id) {
    for (const node of nodes.values()) if (node.edge) node.edge.classList.remove("chain");
    let node = nodes.get(id), guard = 0;
    while (node && node.edge && guard++ < nodes.size) {
      node.edge.classList.add("chain");
      edges.append(node.edge); // drawn last: on top
      node = nodes.get(node.parent);
    }
  }

  async function select(id) {
    if (selected !== null && nodes.has(selected)) nodes.get(selected).dot.classList.remove("selected");
    selected = id;
    if (nodes.has(id)) nodes.get(id).dot.classList.add("selected");
    highlightChain(id);
    const panel = document.getElementById("detail");
    try {
      const program = await getJSON(`/api/runs/${runId}/programs/${id}`);
      if (selected !== id) return;
      panel.replaceChildren(programView.render(program, { run, select }));
    } catch (error) {
      panel.replaceChildren(el("p", { class: "error", text: error.message }));
    }
  }

  async function poll() {
    let more = false;
    try {
      const page = await getJSON(`/api/runs/${runId}/tree?since=${last}`);
      run = page.run;
      for (const node of page.nodes) if (!nodes.has(node.id)) add(node);
      last = page.last;
      more = page.more;
      if (page.nodes.length || !svg.getAttribute("width")) layout();
      header();
      document.title = `evolve: run ${run.id} (${run.status})`;
    } catch (error) {
      document.getElementById("run-head").replaceChildren(el("p", { class: "error", text: error.message }));
      return; // an unknown run: nothing to poll
    }
    if (more) timer = setTimeout(poll, 0);
    else if (run.status === "running") timer = setTimeout(poll, POLL_MS);
    else timer = null; // ended: what it stored is all drawn
  }

  document.getElementById("bar").replaceWith(topBar([["runs", "/"], [`run ${runId}`, null]]));
  window.addEventListener("resize", () => { if (nodes.size) layout(); });
  poll();
})();
